"""Bad input to fastnnef-peft: each a fastnnef error naming the problem, the output folder
left exactly as it was (no archive, no temporary)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

safetensors_torch = pytest.importorskip("safetensors.torch")

from fastnnef.artefact import Artefact  # noqa: E402
from fastnnef.exceptions import (  # noqa: E402
    T2NErrorCheckpoint,
    T2NErrorInvalidArgument,
    T2NErrorMisuse,
    T2NErrorNotFoundFile,
)
from fastnnef.peft import export_peft, lora_merged_artefact  # noqa: E402
from fastnnef.peft.cli import main  # noqa: E402


def lora_tensors(modules: list[str], rank: int = 2) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    out = {}
    for m in modules:
        out[f"{m}.lora_A.default.weight"] = torch.randn(rank, 8, generator=gen)
        out[f"{m}.lora_B.default.weight"] = torch.randn(6, rank, generator=gen)
        out[f"{m}.base_layer.weight"] = torch.randn(6, 8, generator=gen)
    return out


def save(tmp_path: Path, tensors: dict[str, torch.Tensor], name: str = "adapter.safetensors") -> Path:
    path = tmp_path / "in" / name
    path.parent.mkdir(exist_ok=True)
    if name.endswith(".safetensors"):
        safetensors_torch.save_file(tensors, path)
    else:
        torch.save(tensors, path)
    return path


def assert_nothing_written(
    out_dir: Path, before: set[str], call: Callable[[], object], error: type, match: str | None
) -> None:
    with pytest.raises(error, match=match):
        call()
    assert {p.name for p in out_dir.iterdir()} == before


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    path = tmp_path / "out"
    path.mkdir()
    return path


@pytest.mark.parametrize("suffix", [".safetensors", ".bin"])
def test_patterns_matching_nothing(suffix: str, tmp_path: Path, out_dir: Path) -> None:
    # What save_pretrained writes does not fit the reference's default (state_dict) patterns.
    src = save(tmp_path, {"base_model.model.fc1.lora_A.weight": torch.ones(2, 8)}, "adapter" + suffix)
    assert_nothing_written(
        out_dir, set(), lambda: export_peft(src, out_dir / "a.peft.nnef.tgz"), T2NErrorMisuse,
        r"no tensor of the file matches the patterns .*'base_model.model.fc1.lora_A.weight'.*save_pretrained",
    )


@pytest.mark.parametrize("suffix", [".safetensors", ".bin"])
def test_a_without_its_b(suffix: str, tmp_path: Path, out_dir: Path) -> None:
    tensors = lora_tensors(["l0", "l1", "l2"])
    del tensors["l1.lora_B.default.weight"]  # 5 matrices: an odd number
    src = save(tmp_path, tensors, "adapter" + suffix)
    assert_nothing_written(
        out_dir, set(), lambda: export_peft(src, out_dir / "a.peft.nnef.tgz"), T2NErrorMisuse,
        r"found 5 PEFT matrices.*'l1' lacks \['\(\?P<name>\.\*\)\.lora_B\.default\.weight\$'\]",
    )


def test_checked_base_weight_missing(tmp_path: Path, out_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tensors = lora_tensors(["l0", "l1"])
    del tensors["l1.base_layer.weight"]
    src = save(tmp_path, tensors)
    assert_nothing_written(
        out_dir, set(), lambda: export_peft(src, out_dir / "a.peft.nnef.tgz"), T2NErrorMisuse,
        r"lacks base weights that check_map_name '\{name\}.base_layer.weight' names: 'l1.base_layer.weight'",
    )
    # The same through -c: a check name that the file does not use.
    assert main(["-r", str(src), "-c", "{name}.weight", "-o", str(out_dir / "a.peft.nnef.tgz")]) == 2
    assert list(out_dir.iterdir()) == []
    assert "fastnnef-peft: error: T2NErrorMisuse: " in capsys.readouterr().err


def test_output_exists_and_is_kept(tmp_path: Path, out_dir: Path) -> None:
    src = save(tmp_path, lora_tensors(["l0"]))
    existing = out_dir / "a.peft.nnef.tgz"
    existing.write_bytes(b"precious")
    assert_nothing_written(
        out_dir, {existing.name}, lambda: export_peft(src, existing), T2NErrorInvalidArgument, "already exists"
    )
    assert existing.read_bytes() == b"precious"


@pytest.mark.parametrize("name", ["a.nnef.tgz", "a.peft.tgz", "a.peft.nnef.tar", ".peft.nnef.tgz"])
def test_wrong_output_suffix(name: str, tmp_path: Path, out_dir: Path) -> None:
    src = save(tmp_path, lora_tensors(["l0"]))
    assert_nothing_written(
        out_dir, set(), lambda: export_peft(src, out_dir / name), T2NErrorInvalidArgument, r"\.peft\.nnef\.tgz"
    )


def test_bad_options(tmp_path: Path, out_dir: Path) -> None:
    src = save(tmp_path, lora_tensors(["l0"]))
    out = out_dir / "a.peft.nnef.tgz"
    cases = [
        (lambda: export_peft(src, out, patterns=["(.*)\\.lora_A"]), T2NErrorInvalidArgument, "no \\(\\?P<name>"),
        (lambda: export_peft(src, out, patterns=["(?P<name>[.*"]), T2NErrorInvalidArgument, "not a valid regex"),
        (lambda: export_peft(src, out, map_name="weight"), T2NErrorInvalidArgument, "must contain \\{name\\}"),
        (lambda: export_peft(src, out, map_name="{name}.{x}"), T2NErrorInvalidArgument, "no other field"),
        (lambda: export_peft(src, out, compression_level=10), T2NErrorInvalidArgument, "compression_level"),
        (lambda: export_peft(tmp_path / "nope.safetensors", out), T2NErrorNotFoundFile, "does not exist"),
        (lambda: export_peft(tmp_path / "adapter.npz", out), T2NErrorInvalidArgument, "expected a .safetensors"),
        (lambda: export_peft(src, tmp_path / "no" / "a.peft.nnef.tgz"), T2NErrorNotFoundFile, "does not exist"),
    ]
    for call, error, match in cases:
        assert_nothing_written(out_dir, set(), call, error, match)


def test_swapped_patterns_and_integer_tensors(tmp_path: Path, out_dir: Path) -> None:
    src = save(tmp_path, lora_tensors(["l0"]))
    swapped = [r"(?P<name>.*)\.lora_B\.default\.weight$", r"(?P<name>.*)\.lora_A\.default\.weight$"]
    assert_nothing_written(
        out_dir, set(), lambda: export_peft(src, out_dir / "a.peft.nnef.tgz", patterns=swapped), T2NErrorMisuse,
        "do not chain",
    )
    ints = save(tmp_path, {"l0.lora_A.default.weight": torch.ones(2, 8, dtype=torch.int32),
                           "l0.lora_B.default.weight": torch.ones(6, 2), "l0.base_layer.weight": torch.ones(6, 8)},
                "ints.safetensors")
    assert_nothing_written(
        out_dir, set(), lambda: export_peft(ints, out_dir / "a.peft.nnef.tgz"), T2NErrorInvalidArgument,
        "has dtype I32",
    )


def test_two_adapters_in_one_file_are_ambiguous(tmp_path: Path, out_dir: Path) -> None:
    tensors = lora_tensors(["l0"])
    tensors["l0.lora_A.other.weight"] = tensors["l0.lora_A.default.weight"].clone()
    src = save(tmp_path, tensors)
    loose = [r"(?P<name>.*)\.lora_A\.\w+\.weight$", r"(?P<name>.*)\.lora_B\.\w+\.weight$"]
    assert_nothing_written(
        out_dir, set(), lambda: export_peft(src, out_dir / "a.peft.nnef.tgz", patterns=loose), T2NErrorMisuse,
        "gives the name 'l0' to two tensors",
    )


class NotATensor:
    pass


def test_pickle_runs_only_on_opt_in(tmp_path: Path, out_dir: Path) -> None:
    tensors: dict[str, object] = dict(lora_tensors(["l0"]))
    tensors["extra"] = NotATensor()
    src = save(tmp_path, tensors, "adapter.pt")  # type: ignore[arg-type]
    assert_nothing_written(
        out_dir, set(), lambda: export_peft(src, out_dir / "a.peft.nnef.tgz"), T2NErrorCheckpoint,
        "weights_only=False",
    )
    report = export_peft(src, out_dir / "a.peft.nnef.tgz", weights_only=False)
    assert report.n_tensors == 2


def test_failure_while_writing_leaves_nothing(tmp_path: Path, out_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = save(tmp_path, lora_tensors(["l0", "l1"]), "adapter.bin")
    written = []
    real_add_tensor = Artefact.add_tensor

    def failing_second(self: Artefact, label: str, tensor: torch.Tensor, *args: object, **kwargs: object) -> int:
        if written:
            raise KeyboardInterrupt  # e.g. Ctrl-C half way
        written.append(label)
        return real_add_tensor(self, label, tensor, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Artefact, "add_tensor", failing_second)
    assert_nothing_written(
        out_dir, set(), lambda: export_peft(src, out_dir / "a.peft.nnef.tgz"), KeyboardInterrupt, None
    )
    assert written == ["l0.lora_A.default.weight"]


def test_merge_refuses_weights_the_base_lacks(tmp_path: Path) -> None:
    from tests.peft.lora_models import SAVED_PATTERNS, export_base, lora_model, make_mlp  # skips without peft

    base = make_mlp()
    base_path = export_base(base, torch.randn(2, 8), tmp_path / "base.nnef.tgz")
    lora_model(base, ["fc1"], seed=0).save_pretrained(tmp_path / "adapter")
    archive = tmp_path / "a.peft.nnef.tgz"
    # No -m: the mapped names keep the model. prefix the base artefact does not have.
    export_peft(tmp_path / "adapter" / "adapter_model.safetensors", archive,
                patterns=[p.replace(r"base_model\.model\.", r"base_model\.") for p in SAVED_PATTERNS],
                check_map_name=None)
    with pytest.raises(T2NErrorMisuse, match=r"lacks: \['model.fc1.weight'\].*-m/--map-name"):
        lora_merged_artefact(base_path, archive, 2.0)
