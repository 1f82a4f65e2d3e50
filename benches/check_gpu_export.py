"""Models that live on a GPU, exported as they are: one command for a machine with CUDA.

A conv/BN/MLP net (tied weights, a buffer) and a ``TransformerEncoderLayer``, parameters
and inputs on ``--device`` (default ``cuda:0``), each exported with ``check_io`` (tract
against the CPU stand-in the export traces, torch_graph/devices.py); then tract's output
is compared with the model's own on its device, and every parameter and buffer is checked
to be where it was (same device, same storage, same values). Prints one line per model and
a result line. ``--smoke`` makes the models smaller and, where no CUDA device is, runs on
``cpu`` (the same code path but the copy to CPU; CI runs it, tests/test_benches.py).

    PYTHONPATH=python python benches/check_gpu_export.py [--device cuda:0] [--smoke]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from fastnnef.check import TractArtefact
from fastnnef.export import export_model_with_result
from fastnnef.inference_target import TractNNEF

# cuDNN convolutions may run in TF32: the GPU's outputs are only that close to tract's.
ATOL = RTOL = 5e-3


class ConvBnMlp(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 3, padding=1)
        self.bn = nn.BatchNorm2d(channels)
        self.mlp = nn.Sequential(nn.Linear(channels, channels), nn.GELU(), nn.Linear(channels, channels))
        self.head = nn.Linear(channels, channels)
        self.head.weight = self.mlp[2].weight  # tied
        self.register_buffer("offset", torch.linspace(-1.0, 1.0, channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3))
        return self.head(self.mlp(y)) + self.offset


def models(width: int) -> list[tuple[str, nn.Module, torch.Tensor]]:
    torch.manual_seed(0)
    conv = ConvBnMlp(width)
    conv.bn.running_mean.uniform_(-0.5, 0.5)
    conv.bn.running_var.uniform_(0.5, 2.0)
    encoder = nn.TransformerEncoderLayer(width, 4, dim_feedforward=2 * width, dropout=0.0, batch_first=True)
    return [("conv_bn_mlp", conv.eval(), torch.randn(2, 3, 16, 16)),
            ("transformer_encoder_layer", encoder.eval(), torch.randn(2, 7, width))]


def check(name: str, model: nn.Module, x: torch.Tensor, out_dir: Path) -> float:
    """Export ``model`` (already on its device) and check it; return the export's seconds."""
    before = {n: (t.device, t.data_ptr(), t.detach().clone()) for n, t in model.state_dict(keep_vars=True).items()}
    start = time.perf_counter()
    result = export_model_with_result(model, (x,), out_dir / f"{name}.nnef.tgz", TractNNEF.latest())
    seconds = time.perf_counter() - start
    assert "check_io" in result.checks, result.checks
    for key, tensor in model.state_dict(keep_vars=True).items():
        device, ptr, values = before[key]
        assert (tensor.device, tensor.data_ptr()) == (device, ptr), f"{name}: {key} moved"
        assert torch.equal(tensor.detach(), values), f"{name}: {key} changed"
    with torch.no_grad():
        expected = model(x).cpu().numpy()
    (got,) = TractArtefact.load(result.path).run([x.cpu()])
    np.testing.assert_allclose(got, expected, atol=ATOL, rtol=RTOL, err_msg=name)
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="where the models live (default cuda:0)")
    parser.add_argument("--smoke", action="store_true", help="small models; cpu where no CUDA device is")
    opts = parser.parse_args()
    device = opts.device or ("cuda:0" if torch.cuda.is_available() or not opts.smoke else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device here: run on a machine with one (or pass --device cpu)", file=sys.stderr)
        return 2
    where = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "cpu"
    with tempfile.TemporaryDirectory() as tmp:
        for name, model, x in models(16 if opts.smoke else 256):
            seconds = check(name, model.to(device), x.to(device), Path(tmp))
            print(f"{name:<26} on {device}: exported and checked in tract in {seconds:.2f} s, model untouched")
    print(f"{device} ({where}): 2 models exported, checked, left on their device")
    return 0


if __name__ == "__main__":
    sys.exit(main())
