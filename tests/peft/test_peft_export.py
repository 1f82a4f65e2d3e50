"""fastnnef-peft on adapters made by the ``peft`` library: the archive's layout and mapping
(the reference's schema), and the runtime use it is for: the base artefact, its weights
patched at load time with the archive's matrices (``W + B @ A * scaling``), run in tract,
reproduces peft's ``merge_and_unload()`` model run in torch."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from fastnnef import _native  # noqa: E402
from fastnnef.check import TractArtefact  # noqa: E402
from fastnnef.peft import export_peft, lora_merged_artefact, read_peft_archive  # noqa: E402
from fastnnef.peft.cli import main  # noqa: E402
from tests.peft.lora_models import SAVED_PATTERNS, export_base, lora_model, make_mlp, scaling

REPO = Path(__file__).resolve().parents[2]


def merged_outputs(peft_model: nn.Module, inputs: torch.Tensor) -> np.ndarray:
    """What peft's own merge gives (on a copy: merge_and_unload changes the model)."""
    import copy

    merged = copy.deepcopy(peft_model).merge_and_unload().eval()
    with torch.no_grad():
        return merged(inputs).numpy()


def assert_tract_matches(base_artefact: Path, archive: Path, peft_model: nn.Module, inputs: torch.Tensor) -> None:
    patched = TractArtefact.load(lora_merged_artefact(base_artefact, archive, scaling()))
    got = patched.run([inputs.numpy()])[0]
    expected = merged_outputs(peft_model, inputs)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    with torch.no_grad():  # the unmerged PeftModel agrees too
        np.testing.assert_allclose(got, peft_model(inputs).numpy(), rtol=1e-4, atol=1e-5)


def members(archive: Path) -> list[str]:
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    if shutil.which("tar"):  # what a runtime unpacking with the system tool sees
        listed = subprocess.run(["tar", "-tzf", str(archive)], capture_output=True, text=True, check=True)
        assert listed.stdout.split() == names
    return names


@pytest.mark.parametrize("serialization", ["safetensors", "bin"])
def test_save_pretrained_adapter_patches_base_in_tract(serialization: str, tmp_path: Path) -> None:
    base = make_mlp()
    x = torch.randn(3, 8)
    base_path = export_base(base, x, tmp_path / "base.nnef.tgz")
    adapted = lora_model(base, ["fc1", "fc2"], seed=1)
    adapted.save_pretrained(tmp_path / "adapter", safe_serialization=serialization == "safetensors")
    adapter_file = tmp_path / "adapter" / f"adapter_model.{serialization}"
    assert adapter_file.is_file()
    archive = tmp_path / "lora.peft.nnef.tgz"

    assert main(["-r", str(adapter_file), "-p", *SAVED_PATTERNS, "-c", "", "-o", str(archive)]) == 0

    names = members(archive)
    assert names[0] == "peft_mapping.json"  # first, so a streaming reader learns the table first
    assert sorted(names[1:]) == names[1:]
    with tarfile.open(archive) as tar:
        mapping = json.loads(tar.extractfile("peft_mapping.json").read())  # type: ignore[union-attr]
    assert mapping == {
        "method": "LoRA",
        "mapping_table": {
            f"{m}.weight": [f"base_model.model.{m}.lora_A.weight", f"base_model.model.{m}.lora_B.weight"]
            for m in ("fc1", "fc2")
        },
    }
    state = adapted.state_dict()
    read = read_peft_archive(archive)
    for module in ("fc1", "fc2"):
        for kind in ("A", "B"):
            values = read.tensors[f"base_model.model.{module}.lora_{kind}.weight"]
            np.testing.assert_array_equal(values,
                                          state[f"base_model.model.{module}.lora_{kind}.default.weight"].numpy())
    assert_tract_matches(base_path, archive, adapted, torch.randn(3, 8))  # fresh inputs


def test_state_dict_with_reference_defaults(tmp_path: Path) -> None:
    """torch.save(peft_model.state_dict()): the reference's default patterns and check name
    fit it as they are; -c and -m then map the names onto the base artefact's."""
    base = make_mlp()
    adapted = lora_model(base, ["fc1", "fc2"], seed=2)
    torch.save(adapted.state_dict(), tmp_path / "peft_state.bin")

    defaults = export_peft(tmp_path / "peft_state.bin", tmp_path / "defaults.peft.nnef.tgz")
    assert defaults.mapping_table == {
        f"base_model.model.{m}.weight": [
            f"base_model.model.{m}.lora_A.default.weight", f"base_model.model.{m}.lora_B.default.weight"
        ]
        for m in ("fc1", "fc2")
    }
    assert defaults.n_tensors == 4 and defaults.dat_bytes == sum(
        128 + t.numel() * 4 for k, t in adapted.state_dict().items() if "lora_" in k
    )

    x = torch.randn(3, 8)
    base_path = export_base(base, x, tmp_path / "base.nnef.tgz")
    archive = tmp_path / "mapped.peft.nnef.tgz"
    export_peft(
        tmp_path / "peft_state.bin", archive,
        patterns=[r"base_model\.model\.(?P<name>.*)\.lora_A\.default\.weight$",
                  r"base_model\.model\.(?P<name>.*)\.lora_B\.default\.weight$"],
        check_map_name="base_model.model.{name}.base_layer.weight",
    )
    assert set(read_peft_archive(archive).mapping_table) == {"fc1.weight", "fc2.weight"}
    assert_tract_matches(base_path, archive, adapted, x)


# transformers deprecates its own helpers (is_gradient_checkpointing) on the traced path.
@pytest.mark.filterwarnings("ignore::FutureWarning:transformers")
def test_one_base_artefact_serves_many_adapters_on_a_tiny_llama(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")

    class Logits(nn.Module):
        def __init__(self, lm: nn.Module) -> None:
            super().__init__()
            self.lm = lm

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.lm(input_ids, use_cache=False, return_dict=False)[0]

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=100, max_position_embeddings=64, attn_implementation="eager",
    )
    llama = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 100, (1, 7), generator=torch.Generator().manual_seed(3))
    base_path = export_base(Logits(llama), ids, tmp_path / "llama.nnef.tgz", input_names=["input_ids"],
                            output_names=["logits"])
    targets = ["q_proj", "v_proj", "o_proj", "down_proj"]
    for seed in (10, 11):
        adapted = lora_model(llama, targets, seed=seed)
        adapted.save_pretrained(tmp_path / f"adapter{seed}")
        archive = tmp_path / f"adapter{seed}.peft.nnef.tgz"
        report = export_peft(tmp_path / f"adapter{seed}" / "adapter_model.safetensors", archive,
                             patterns=SAVED_PATTERNS, map_name="lm.{name}.weight", check_map_name="")
        assert len(report.mapping_table) == 2 * len(targets)  # 2 layers
        got = TractArtefact.load(lora_merged_artefact(base_path, archive, scaling())).run([ids.numpy()])[0]
        merged = Logits(adapted.merge_and_unload().eval())
        with torch.no_grad():
            expected = merged(ids).numpy()
            untouched = Logits(llama)(ids).numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
        assert np.abs(expected - untouched).max() > 1e-2  # the adapter does change the outputs


def test_bf16_adapter_written_as_exact_f32(tmp_path: Path) -> None:
    safetensors_torch = pytest.importorskip("safetensors.torch")
    gen = torch.Generator().manual_seed(4)
    tensors = {
        "m.lora_A.default.weight": torch.randn(4, 8, generator=gen).to(torch.bfloat16),
        "m.lora_B.default.weight": torch.randn(6, 4, generator=gen).to(torch.bfloat16),
        "m.base_layer.weight": torch.randn(6, 8, generator=gen).to(torch.bfloat16),
    }
    safetensors_torch.save_file(tensors, tmp_path / "a.safetensors")
    archive = tmp_path / "a.peft.nnef.tgz"
    export_peft(tmp_path / "a.safetensors", archive, compression_level=6)
    with tarfile.open(archive) as tar:
        dat = _native.dat_decode(tar.extractfile("m.lora_B.default.weight.dat").read())  # type: ignore[union-attr]
    assert dat.encoding == "f32"
    np.testing.assert_array_equal(dat.array(), tensors["m.lora_B.default.weight"].float().numpy())
    assert "m.base_layer.weight.dat" not in members(archive)


def test_python_m_and_console_scripts(tmp_path: Path) -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    # pyproject.toml's [project.scripts] (the installed metadata lags until the next install).
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["fastnnef-peft"] == scripts["t2n_export_peft_to_nnef"] == "fastnnef.peft.cli:script"
    base = make_mlp()
    adapted = lora_model(base, ["fc1"], seed=5)
    adapted.save_pretrained(tmp_path / "adapter")
    archive = tmp_path / "out.peft.nnef.tgz"
    done = subprocess.run(
        [sys.executable, "-m", "fastnnef.peft", "-r", str(tmp_path / "adapter" / "adapter_model.safetensors"),
         "-p", *SAVED_PATTERNS, "-c", "", "-o", str(archive), "-v"],
        capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "exported 2 LoRA matrices for 1 base weights" in done.stdout
    assert set(read_peft_archive(archive).mapping_table) == {"fc1.weight"}


def test_drop_in_signature_and_names() -> None:
    """torch_to_nnef_llm.peft.cli's function, parameters and constants, under fastnnef.peft.cli."""
    import inspect

    from fastnnef.peft import cli

    params = inspect.signature(cli.export_peft).parameters
    positional = [n for n, p in params.items() if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert positional == ["read_filepath", "output_archive", "patterns", "map_name", "check_map_name", "method_name"]
    assert [params[n].default for n in positional[2:]] == [
        None, cli.MAP_TENSOR_NAME, cli.CHECK_MAP_TENSOR_NAME, cli.DEFAULT_METHOD_TYPE
    ]
    assert cli.PATTERN_LORA == [f"{cli.NAME_PLACEHOLDER}.lora_{m}.default.weight$" for m in "AB"]
    assert (cli.MAP_TENSOR_NAME, cli.CHECK_MAP_TENSOR_NAME) == ("{name}.weight", "{name}.base_layer.weight")
