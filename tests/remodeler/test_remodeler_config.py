"""The shape config: torch_to_nnef's format loads unchanged, round-trips through save_config,
and every malformed config is refused with a message naming the fault."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorNotFoundFile
from fastnnef.remodeler import (
    AxisSymbolRegistry,
    IODescriptor,
    Stage,
    SubnetSignature,
    dump_registry_from_signatures,
    load_axis_symbol_registry,
    parse_axis_symbol_registry,
    plan_from_registry,
    save_config,
    schema,
    validate_registry_against_signatures,
)

# Written as torch_to_nnef's NeMo CLI dumps and its tutorial edits one (flow lists, quoted
# extensions, a tuple input by position, renames as a list of one-key mappings).
REFERENCE_YAML = """\
encoder:
  inputs:
    audio_signal:
      original_shape: [AUDIO_SIGNAL__BATCH, 80, AUDIO_SIGNAL__TIME]
      collapse_dims: [AUDIO_SIGNAL__BATCH]
    length:
      original_shape: [LENGTH__BATCH]
      collapse_dims: [length__batch]
      bind_scalar_to_dim_size: audio_signal.AUDIO_SIGNAL__TIME
  outputs:
    outputs: {collapse_dims: [0]}
  renamed_symbols:
  - S: [AUDIO_SIGNAL__TIME]
  outputs_keep: [outputs, encoded_lengths]
  extensions: ["tract_assert S >= 1"]
decoder:
  inputs:
    targets: [B, U]
    states:
      "0": {original_shape: [2, B, 640]}
      "1": {original_shape: [2, B, 640], eval_symbols: {b: 1}}
  outputs:
  renamed_symbols:
joint.encoder_outputs: [B, 1024, R]
"""


def test_reference_config_loads_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "shapes.yaml"
    path.write_text(REFERENCE_YAML)
    reg = load_axis_symbol_registry(path)
    assert reg.symbols_per_input == {
        "encoder.audio_signal": {0: "AUDIO_SIGNAL__BATCH", 2: "AUDIO_SIGNAL__TIME"},
        "encoder.length": {0: "LENGTH__BATCH"},
        "decoder.targets": {0: "B", 1: "U"},
        "decoder.states_0": {1: "B"},
        "decoder.states_1": {1: "B"},
        "joint.encoder_outputs": {0: "B", 2: "R"},
    }
    assert reg.rank_per_input["encoder.audio_signal"] == 3
    assert reg.original_shape_per_input["encoder.audio_signal"] == ["AUDIO_SIGNAL__BATCH", 80, "AUDIO_SIGNAL__TIME"]
    assert reg.input_collapse_dims == {
        "encoder.audio_signal": ["AUDIO_SIGNAL__BATCH"], "encoder.length": ["LENGTH__BATCH"],
    }
    assert reg.bind_to_dim == {"encoder.length": "audio_signal.AUDIO_SIGNAL__TIME"}
    assert reg.renamed_symbols_per_subnet == {"encoder": {"S": ["AUDIO_SIGNAL__TIME"]}}
    assert reg.outputs_keep_per_subnet == {"encoder": ["outputs", "encoded_lengths"]}
    assert reg.output_collapse_dims == {"encoder.outputs": [0]}
    assert reg.eval_symbols_per_input == {"decoder.states_1": {"B": 1}}
    assert reg.extensions_per_subnet == {"encoder": ["tract_assert S >= 1"]}
    assert plan_from_registry(reg).registry is reg


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_save_config_round_trips(tmp_path: Path, suffix: str) -> None:
    src = tmp_path / "shapes.yaml"
    src.write_text(REFERENCE_YAML)
    reg = load_axis_symbol_registry(src)
    out = tmp_path / f"again{suffix}"
    save_config(out, reg)
    assert load_axis_symbol_registry(out) == reg
    if suffix == ".yaml":
        text = out.read_text()
        assert "original_shape: [AUDIO_SIGNAL__BATCH, 80, AUDIO_SIGNAL__TIME]" in text
        assert 'extensions: ["tract_assert S >= 1"]' in text
    else:
        assert json.loads(out.read_text())["encoder"]["outputs_keep"] == ["outputs", "encoded_lengths"]
    stream = io.StringIO()
    save_config(None, reg, stream=stream, flow_seq=False)
    assert parse_axis_symbol_registry(yaml.safe_load(stream.getvalue())) == reg


def test_registry_checked_against_signatures() -> None:
    sig = SubnetSignature(
        name="encoder", stage=Stage.RAW,
        inputs=[IODescriptor("audio_signal", ["B", 80, "T"], "float32"), IODescriptor("length", ["B"], "int64")],
        outputs=[IODescriptor("outputs", ["B", 16, "T"]), IODescriptor("encoded_lengths", ["B"])],
        symbol_axes={"audio_signal": {0: "B", 2: "T"}, "length": {0: "B"}},
    )
    starter = dump_registry_from_signatures([sig])
    assert starter.outputs_keep_per_subnet == {"encoder": ["outputs", "encoded_lengths"]}
    validate_registry_against_signatures([sig], starter)
    bad = parse_axis_symbol_registry({
        "encoder": {
            "inputs": {"audio_signal": {"original_shape": ["B", 80, "T"], "collapse_dims": ["X"]},
                       "lenght": {"original_shape": ["B"], "bind_scalar_to_dim_size": "audio_signal.Q"}},
            "outputs_keep": ["logits"],
            "renamed_symbols": {"S": ["TIME"]},
        },
        "decodr": {"inputs": {"targets": ["B", "U"]}},
    })
    with pytest.raises(T2NErrorInvalidArgument) as err:
        validate_registry_against_signatures([sig], bad)
    msg = str(err.value)
    for part in ("unknown subnets ['decodr']", "unknown inputs ['encoder.lenght']", "names ['logits']",
                 "'Q' is no dynamic axis of 'encoder.audio_signal'", "names ['X']", "sources ['TIME']"):
        assert part in msg, (part, msg)


def test_schema_names() -> None:
    assert (schema.SHAPE_KEY_INPUTS, schema.INPUT_FIELD_BIND_SCALAR_TO_DIM_SIZE, schema.OUTPUT_FIELD_COLLAPSE_DIMS) == (
        "inputs", "bind_scalar_to_dim_size", "collapse_dims")
    assert AxisSymbolRegistry.empty().symbols_per_input == {}


def _enc(**inputs: object) -> dict:
    return {"enc": {"inputs": {"x": {"original_shape": ["B", 4]}, **inputs}}}


@pytest.mark.parametrize(
    "raw, message",
    [
        ([1, 2], "shape-config must be a mapping of subnet names"),
        ({}, "shape-config defines no input shape"),
        ({"enc": {"inputs": {"x": ["B"]}, "output_keep": ["y"]}},
         "unknown keys in subnet 'enc': output_keep (allowed: inputs, outputs, renamed_symbols, outputs_keep, "
         "extensions)"),
        ({"enc": {"outputs_keep": ["y"]}}, "subnet 'enc' must declare an 'inputs' mapping"),
        ({"enc": {"inputs": {"x": ["B"]}, "collapse_dims": ["B"]}},
         "collapse_dims is set on subnet 'enc': set it on each input instead"),
        (_enc(y={"original_shape": ["B"], "colapse_dims": ["B"]}),
         "unknown keys in input 'enc.y': colapse_dims"),
        (_enc(y={"original_shape": ["B", 2.5]}), "the original_shape of 'enc.y'[1] is 2.5"),
        (_enc(y={"original_shape": ["B", " "]}), "the original_shape of 'enc.y'[1] is an empty symbol"),
        (_enc(y={"original_shape": "B"}), "the original_shape of 'enc.y' must be a list of dims"),
        (_enc(y={"original_shape": ["B"], "collapse_dims": "B"}), "the collapse_dims of 'enc.y' must be a list"),
        (_enc(y={"original_shape": [], "bind_scalar_to_dim_size": "T"}),
         "the bind_scalar_to_dim_size of 'enc.y' is 'T': write it as '<input>.<SYMBOL>'"),
        (_enc(y={"original_shape": ["B"], "eval_symbols": {"B": 0}}),
         "the eval_symbols of 'enc.y' must map symbols to sizes >= 1"),
        (_enc(y=7), "input 'enc.y' must be a list of dims or a mapping, got 7"),
        ({"enc": {"inputs": {"x": ["B"]}, "outputs": {"y": {"collapse_dims": [-1]}}}},
         "the collapse_dims of output 'enc.y' must be a list of axis indices"),
        ({"enc": {"inputs": {"x": ["B"]}, "outputs": {"y": {"squeeze": [0]}}}},
         "unknown keys in output 'enc.y': squeeze"),
        ({"enc": {"inputs": {"x": ["B"]}, "renamed_symbols": {"B": ["B", "C"]}}},
         "target 'B' cannot be one of its sources"),
        ({"enc": {"inputs": {"x": ["B"]}, "renamed_symbols": "B"}},
         "must map each target symbol to its source symbols, got 'B'"),
        ({"enc": {"inputs": {"x": ["B"]}, "outputs_keep": "y"}}, "the outputs_keep of subnet 'enc' must be a list"),
        ({"enc": {"inputs": {"x": ["B"]}, "extensions": [""]}},
         "an entry of the extensions of subnet 'enc' must be a non-empty string"),
        ({"enc": 3}, "'enc' must be a subnet mapping or a list of dims, got 3"),
        ({"x": ["B", 4]}, "the dims ['B', 4] of 'x' name no subnet: key them '<subnet>.x'"),
        ({"enc": {"inputs": {"x": ["B"]}, "renamed_symbols": [{"S": ["A"]}, {"S": ["B"]}]}},
         "target 'S' is given twice"),
        ({"enc": {"inputs": {"x": ["B"]}, "renamed_symbols": {"S": ["A", "B"], "T": ["b"]}}},
         "sources ['B'] are renamed to two targets"),
    ],
)
def test_bad_config_refused(raw: object, message: str) -> None:
    with pytest.raises(T2NErrorInvalidArgument) as err:
        parse_axis_symbol_registry(raw)
    assert message in str(err.value)


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(T2NErrorNotFoundFile, match="shape-config file not found"):
        load_axis_symbol_registry(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("enc: [B, \n")
    with pytest.raises(T2NErrorInvalidArgument, match="cannot be read"):
        load_axis_symbol_registry(broken)
    twice = tmp_path / "twice.yaml"
    twice.write_text("enc:\n  inputs:\n    x: [B]\n    x: [B, T]\n")
    with pytest.raises(T2NErrorInvalidArgument, match=r"key 'x' is written twice \(line 4\)"):
        load_axis_symbol_registry(twice)
    twice_json = tmp_path / "twice.json"
    twice_json.write_text('{"enc": {"inputs": {"x": ["B"]}, "inputs": {"y": ["B"]}}}')
    with pytest.raises(T2NErrorInvalidArgument, match=r"keys \['inputs'\] are written twice"):
        load_axis_symbol_registry(twice_json)
    with pytest.raises(T2NErrorInvalidArgument, match="needs a path or a stream"):
        save_config(None, AxisSymbolRegistry.empty())


def test_failed_save_keeps_previous_file(tmp_path: Path) -> None:
    out = tmp_path / "shapes.json"
    out.write_text("previous")
    with pytest.raises(TypeError):
        save_config(out, {"enc": {"inputs": {"x": object()}}})
    assert out.read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["shapes.json"]
