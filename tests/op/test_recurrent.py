"""Recurrent layers (LSTM, GRU, RNN, their cells) exported and compared with tract, at the
traced time length and, with a dynamic time axis, at other lengths."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NErrorNotImplemented, T2NErrorStrictNNEFSpec
from fastnnef.export import export_model_to_nnef
from fastnnef.inference_target import KhronosNNEF, TractNNEF
from tests import helpers
from tests.helpers import export_and_check

T, B, I, H = 5, 2, 3, 4


class Seq(nn.Module):
    """A recurrent layer with every output flat: (output, h_n[, c_n]), and the initial
    states as model inputs when given."""

    def __init__(self, rnn: nn.RNNBase):
        super().__init__()
        self.rnn = rnn

    def forward(self, x: torch.Tensor, *state: torch.Tensor) -> tuple[torch.Tensor, ...]:
        hx: Any = None
        if state:
            hx = tuple(state) if isinstance(self.rnn, nn.LSTM) else state[0]
        y, h = self.rnn(x, hx)
        return (y, *h) if isinstance(h, tuple) else (y, h)


def seq_inputs(rnn: nn.RNNBase, with_state: bool = False, t: int = T) -> tuple[torch.Tensor, ...]:
    x = torch.randn(B, t, rnn.input_size) if rnn.batch_first else torch.randn(t, B, rnn.input_size)
    if not with_state:
        return (x,)
    layers = rnn.num_layers * (2 if rnn.bidirectional else 1)
    out = rnn.proj_size if getattr(rnn, "proj_size", 0) else rnn.hidden_size
    h0 = torch.randn(layers, B, out)
    if isinstance(rnn, nn.LSTM):
        return x, h0, torch.randn(layers, B, rnn.hidden_size)
    return x, h0


SEQ_CASES = [
    # (id, layer factory, initial states as inputs)
    ("lstm", lambda: nn.LSTM(I, H), False),
    ("lstm_2_layers", lambda: nn.LSTM(I, H, num_layers=2), False),
    ("lstm_bidirectional", lambda: nn.LSTM(I, H, bidirectional=True), False),
    ("lstm_2_layers_bidirectional_batch_first", lambda: nn.LSTM(I, H, 2, batch_first=True, bidirectional=True), False),
    ("lstm_initial_state", lambda: nn.LSTM(I, H, 2, bidirectional=True), True),
    ("lstm_batch_first_initial_state", lambda: nn.LSTM(I, H, batch_first=True), True),
    ("lstm_no_bias", lambda: nn.LSTM(I, H, bias=False, bidirectional=True), False),
    ("lstm_proj", lambda: nn.LSTM(I, H, proj_size=2), False),
    ("lstm_proj_2_layers_bidirectional_state", lambda: nn.LSTM(I, H, 2, bidirectional=True, proj_size=3), True),
    ("gru", lambda: nn.GRU(I, H), False),
    ("gru_2_layers", lambda: nn.GRU(I, H, num_layers=2), False),
    ("gru_bidirectional_batch_first", lambda: nn.GRU(I, H, batch_first=True, bidirectional=True), False),
    ("gru_2_layers_bidirectional_state", lambda: nn.GRU(I, H, 2, bidirectional=True), True),
    ("gru_no_bias", lambda: nn.GRU(I, H, bias=False), True),
    ("rnn_tanh", lambda: nn.RNN(I, H), False),
    ("rnn_tanh_2_layers_state", lambda: nn.RNN(I, H, num_layers=2), True),
    ("rnn_relu_bidirectional_batch_first", lambda: nn.RNN(I, H, nonlinearity="relu", batch_first=True,
                                                          bidirectional=True), False),
    ("rnn_relu_no_bias_2_layers", lambda: nn.RNN(I, H, 2, nonlinearity="relu", bias=False), True),
]


@pytest.mark.parametrize("factory,with_state", [pytest.param(f, s, id=n) for n, f, s in SEQ_CASES])
@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
def test_recurrent(factory: Callable[[], nn.RNNBase], with_state: bool, tmp_path):
    torch.manual_seed(0)
    rnn = factory()
    export_and_check(Seq(rnn).eval(), seq_inputs(rnn, with_state), tmp_path)


def test_lstm_unbatched(tmp_path):
    """A [T, I] input: torch adds the batch axis (and drops it from every output)."""
    torch.manual_seed(0)
    export_and_check(Seq(nn.LSTM(I, H, bidirectional=True)).eval(), torch.randn(T, I), tmp_path)


def test_lstm_f16(tmp_path):
    torch.manual_seed(0)
    rnn = nn.LSTM(I, H, 2, batch_first=True)
    model = Seq(rnn).half().eval()
    export_and_check(model, seq_inputs(rnn)[0].half(), tmp_path, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("factory", [
    pytest.param(lambda: nn.LSTM(I, H, 2, batch_first=True, bidirectional=True), id="lstm"),
    pytest.param(lambda: nn.GRU(I, H, batch_first=True, bidirectional=True), id="gru"),
    pytest.param(lambda: nn.RNN(I, H, 2, batch_first=True), id="rnn"),
])
def test_recurrent_dynamic_time(factory: Callable[[], nn.RNNBase], tmp_path):
    """Exported at T=7, run at T=3 and T=12: one scan over a symbolic time axis, not an
    unrolled loop of the traced length."""
    torch.manual_seed(0)
    model = Seq(factory()).eval()
    target = TractNNEF.latest().with_dynamic_axes({"x": {1: "T"}})
    path = export_model_to_nnef(
        model, torch.randn(B, 7, I), tmp_path / "dyn.nnef", target,
        input_names=["x"], compression_level=0, front_end=helpers.FRONT_END,
    )
    artefact = TractArtefact.load(path)
    assert artefact.input_facts[0][1] == [B, "T", I]
    for t in (3, 12):
        x = torch.randn(B, t, I)
        with torch.no_grad():
            expected = model(x)
        got = artefact.run([x])
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.shape == tuple(e.shape)
            np.testing.assert_allclose(g, e.numpy(), atol=1e-5, rtol=1e-4)


def test_lstm_dynamic_batch_and_time(tmp_path):
    """The zero initial states follow a dynamic batch axis too."""
    torch.manual_seed(0)
    target = TractNNEF.latest().with_dynamic_axes({"x": {0: "B", 1: "T"}})
    path = export_and_check(Seq(nn.LSTM(I, H, 2, batch_first=True, bidirectional=True)).eval(), torch.randn(B, 7, I),
                            tmp_path, target=target, input_names=["x"], run_inputs=[torch.randn(5, 11, I)])
    facts = TractArtefact.load(path).output_facts
    assert [shape for _, shape in facts] == [["B", "T", 2 * H], [4, "B", H], [4, "B", H]]


class Audio(nn.Module):
    """The usual audio front end: conv features, a recurrent stack, a per-frame classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(8, 16, 3, padding=1)
        self.lstm = nn.LSTM(16, 12, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(24, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = torch.relu(self.conv(x)).transpose(1, 2)  # [B, C, T] -> [B, T, C]
        y, _ = self.lstm(feats)
        return self.head(y).log_softmax(-1)


def test_conv_lstm_linear(tmp_path):
    torch.manual_seed(0)
    model = Audio().eval()
    export_and_check(model, torch.randn(B, 8, 10), tmp_path)


def test_conv_lstm_linear_dynamic_time(tmp_path):
    torch.manual_seed(0)
    model = Audio().eval()
    target = TractNNEF.latest().with_dynamic_axes({"x": {2: "T"}})
    export_and_check(model, torch.randn(B, 8, 10), tmp_path, target=target, input_names=["x"],
                     run_inputs=[torch.randn(B, 8, 23)])


class Cell(nn.Module):
    def __init__(self, cell: nn.RNNCellBase):
        super().__init__()
        self.cell = cell

    def forward(self, x: torch.Tensor, *state: torch.Tensor) -> Any:
        if isinstance(self.cell, nn.LSTMCell):
            return self.cell(x, tuple(state) if state else None)
        return self.cell(x, state[0] if state else None)


class RawCell(nn.Module):
    """A direct call of torch.lstm_cell & co (traced as linear, unsafe_chunk and gates),
    here also without biases, which the nn cells can't combine with given weights."""

    def __init__(self, fn: Callable[..., Any], gates: int, bias: bool = True):
        super().__init__()
        self.fn = fn
        self.w_ih = nn.Parameter(torch.randn(gates * H, I) * 0.5)
        self.w_hh = nn.Parameter(torch.randn(gates * H, H) * 0.5)
        self.b_ih = nn.Parameter(torch.randn(gates * H)) if bias else None
        self.b_hh = nn.Parameter(torch.randn(gates * H)) if bias else None

    def forward(self, x: torch.Tensor, *state: torch.Tensor) -> Any:
        hx: Any = tuple(state) if len(state) == 2 else state[0]
        return self.fn(x, hx, self.w_ih, self.w_hh, self.b_ih, self.b_hh)


def _cell_state(n: int) -> tuple[torch.Tensor, ...]:
    return tuple(torch.randn(B, H) for _ in range(n))


CELL_CASES = [
    # (id, module factory, number of state inputs)
    ("lstm_cell", lambda: Cell(nn.LSTMCell(I, H)), 2),
    ("lstm_cell_zero_state", lambda: Cell(nn.LSTMCell(I, H)), 0),
    ("gru_cell", lambda: Cell(nn.GRUCell(I, H)), 1),
    ("gru_cell_no_bias", lambda: Cell(nn.GRUCell(I, H, bias=False)), 1),
    ("rnn_cell_relu", lambda: Cell(nn.RNNCell(I, H, nonlinearity="relu")), 1),
    ("aten_lstm_cell", lambda: RawCell(torch.lstm_cell, 4), 2),
    ("aten_lstm_cell_no_bias", lambda: RawCell(torch.lstm_cell, 4, bias=False), 2),
    ("aten_gru_cell", lambda: RawCell(torch.gru_cell, 3), 1),
    ("aten_gru_cell_no_bias", lambda: RawCell(torch.gru_cell, 3, bias=False), 1),
    ("aten_rnn_tanh_cell", lambda: RawCell(torch.rnn_tanh_cell, 1), 1),
    ("aten_rnn_relu_cell", lambda: RawCell(torch.rnn_relu_cell, 1), 1),
]


@pytest.mark.parametrize("factory,states", [pytest.param(f, s, id=n) for n, f, s in CELL_CASES])
def test_cell(factory: Callable[[], nn.Module], states: int, tmp_path):
    torch.manual_seed(0)
    export_and_check(factory().eval(), (torch.randn(B, I), *_cell_state(states)), tmp_path)


def test_equal_layers_share_one_step_fragment(tmp_path):
    """Two layers with the same step math use one fragment; a different size gets its own."""

    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.GRU(I, H, num_layers=2)
            self.b = nn.GRU(H, H + 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.a(x)[0])[0]

    torch.manual_seed(0)
    path = export_and_check(Two().eval(), torch.randn(T, B, I), tmp_path, compression_level=None)
    text = (path / "graph.nnef").read_text()
    assert text.count("fragment fastnnef_gru_step_") == 2
    assert text.count("tract_core_scan(") == 3


def test_khronos_refuses_scan(tmp_path):
    with pytest.raises(T2NErrorStrictNNEFSpec, match="tract_core"):
        export_model_to_nnef(Seq(nn.GRU(I, H)).eval(), torch.randn(T, B, I), tmp_path / "k.nnef", KhronosNNEF("1.0.5"),
                             front_end=helpers.FRONT_END)


# --- what tracing records for cells; packed sequences ----------------------------------------
@pytest.mark.parametrize("make, args", [
    pytest.param(lambda: RawCell(torch.lstm_cell, 4), lambda: (torch.randn(B, I), *_cell_state(2)), id="lstm_cell"),
    pytest.param(lambda: RawCell(torch.gru_cell, 3), lambda: (torch.randn(B, I), *_cell_state(1)), id="gru_cell"),
    pytest.param(lambda: RawCell(torch._VF.rnn_tanh_cell, 1), lambda: (torch.randn(B, I), *_cell_state(1)),
                 id="rnn_tanh_cell"),
    pytest.param(lambda: RawCell(torch._VF.rnn_relu_cell, 1), lambda: (torch.randn(B, I), *_cell_state(1)),
                 id="rnn_relu_cell"),
])
@helpers.TRACER_ALLOWED
def test_cells_trace_as_their_math(make: Callable[[], nn.Module], args: Callable[[], tuple]) -> None:
    """torch's tracer records aten::lstm_cell & co (composite ops) as the linear and gate
    ops above, which is why this family has no cell handler: should a torch version record
    the cell op itself, this fails and a handler is due."""
    with torch.no_grad():
        graph = str(torch.jit.trace(make().eval(), args(), check_trace=False).inlined_graph)
    assert "_cell(" not in graph and "aten::linear" in graph


class Packed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(I, H, batch_first=True)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True)
        return nn.utils.rnn.pad_packed_sequence(self.rnn(packed)[0], batch_first=True)[0]


def test_packed_sequence_is_refused_with_the_workaround(tmp_path):
    with pytest.raises(T2NErrorNotImplemented, match=r"aten::_pack_padded_sequence in <root module> .*packed "
                       r"sequences \(nn.utils.rnn.pack_padded_sequence\).*"
                       r"pass the padded tensor to the recurrent layer"):
        export_model_to_nnef(Packed().eval(), (torch.randn(B, T, I), torch.tensor([T, 3])), tmp_path / "p.nnef",
                             TractNNEF.latest(), front_end=helpers.FRONT_END)
    assert list(tmp_path.iterdir()) == []
