"""``-s/--model-slug`` downloads (llm/hub.py): from a hub served on 127.0.0.1 by
``fake_hub.py`` (no network), into a hub cache under tmp_path chosen through the
environment as users choose it (HF_HUB_CACHE, HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE).

Each case exports through the command line and checks what was fetched, what the cache
holds after, and that a failure leaves neither an export directory nor a partial model in
the cache."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorNotFoundFile
from fastnnef.llm.cli import main
from fastnnef.llm.hub import snapshot_dir
from tests.llm.fake_hub import COMMIT, FakeHub, online_hub

MODEL = "tiny-org/tiny-llama"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    with online_hub(tmp_path / "cache", monkeypatch) as served:
        yield served


def _with_decoys(checkpoint: Path, tmp_path: Path) -> Path:
    """The checkpoint plus weights the exporter never reads: a pickle and an ONNX file."""
    repo = Path(shutil.copytree(checkpoint, tmp_path / "repo"))
    (repo / "pytorch_model.bin").write_bytes(b"not a pickle to run")
    (repo / "onnx").mkdir()
    (repo / "onnx" / "model.onnx").write_bytes(b"onnx")
    return repo


def _cached_models(tmp_path: Path) -> list[str]:
    cache = tmp_path / "cache"
    return sorted(p.name for p in cache.iterdir() if p.name.startswith("models--")) if cache.exists() else []


def test_download_export_then_offline_from_the_cache(
    hub: FakeHub, checkpoint: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = checkpoint("llama", tokenizer=True)
    hub.add(MODEL, _with_decoys(source, tmp_path))
    assert main(["-s", MODEL, "-e", str(tmp_path / "out"), "-sgts", "4"]) == 0
    assert "generation: 16 greedy tokens identical in tract and PyTorch" in capsys.readouterr().out
    expected = sorted(str(p.relative_to(source)) for p in source.rglob("*") if p.is_file())
    assert hub.downloads() == expected  # neither the pickle nor the ONNX file
    snapshot = tmp_path / "cache" / f"models--{MODEL.replace('/', '--')}" / "snapshots" / COMMIT
    assert sorted(str(p.relative_to(snapshot)) for p in snapshot.rglob("*") if p.is_file()) == expected

    # Cached: no request at all, and it works offline.
    hub.requests.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["-s", MODEL, "-e", str(tmp_path / "again"), "-nv"]) == 0
    assert hub.requests == []


def test_offline_and_not_cached(hub: FakeHub, checkpoint: Callable[..., Path], tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    hub.add(MODEL, checkpoint("llama"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["-s", MODEL, "-e", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "T2NErrorNotFoundFile" in err
    assert (f"model '{MODEL}' is not in the local Hugging Face cache ({tmp_path / 'cache'}) and HF_HUB_OFFLINE is "
            f"set: download it where the hub is reachable (`hf download {MODEL}`), unset HF_HUB_OFFLINE, or pass "
            "-d <checkpoint directory>") in err
    assert hub.requests == [] and not (tmp_path / "out").exists() and _cached_models(tmp_path) == []


def test_revision(hub: FakeHub, checkpoint: Callable[..., Path], tmp_path: Path,
                  capsys: pytest.CaptureFixture[str]) -> None:
    hub.add(MODEL, checkpoint("llama"), branches=("main", "v1"))
    snapshot = snapshot_dir(MODEL, revision="v1")
    assert snapshot.name == COMMIT and (snapshot / "config.json").is_file()
    assert (snapshot.parents[1] / "refs" / "v1").read_text() == COMMIT
    assert any(p.endswith("/revision/v1") for _, p, _ in hub.requests)
    with pytest.raises(T2NErrorInvalidArgument, match=rf"model '{MODEL}' at revision 'v9': no such revision on "
                                                      rf"{hub.url} \(give a branch, tag or commit of the model\)"):
        snapshot_dir(MODEL, revision="v9")
    assert snapshot_dir(MODEL, revision=COMMIT) == snapshot  # a cached commit: no request
    assert main(["-d", str(checkpoint("llama")), "--revision", "v1", "-e", str(tmp_path / "out"), "-nv"]) == 2
    assert "--revision 'v1' applies to -s/--model-slug only" in capsys.readouterr().err


def test_private_model_needs_the_token_from_the_environment(
    hub: FakeHub, checkpoint: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub.add(MODEL, checkpoint("llama"), token="hf_secret")
    with pytest.raises(T2NErrorNotFoundFile, match=rf"model '{MODEL}' was not found on {hub.url}: check the id, or, "
                                                   r"for a private model, set HF_TOKEN to a token that can read it"):
        snapshot_dir(MODEL)
    assert _cached_models(tmp_path) == []  # nothing left of the failed attempt
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    assert (snapshot_dir(MODEL) / "config.json").is_file()
    assert {auth for _, path, auth in hub.requests if "/resolve/" in path} == {"Bearer hf_secret"}


def test_gated_model(hub: FakeHub, checkpoint: Callable[..., Path], tmp_path: Path,
                     capsys: pytest.CaptureFixture[str]) -> None:
    hub.add(MODEL, checkpoint("llama"), gated=True)
    assert main(["-s", MODEL, "-e", str(tmp_path / "out")]) == 2
    assert (f"model '{MODEL}' is gated on {hub.url}: request access on its page, then set HF_TOKEN"
            in capsys.readouterr().err)
    assert not (tmp_path / "out").exists() and _cached_models(tmp_path) == []


def test_transient_failures_are_retried(hub: FakeHub, checkpoint: Callable[..., Path], tmp_path: Path,
                                        caplog: pytest.LogCaptureFixture) -> None:
    hub.add(MODEL, checkpoint("llama"))
    hub.fail_api_times = 1
    with pytest.raises(T2NErrorNotFoundFile, match=rf"could not download model '{MODEL}' from {hub.url}, and it is "
                                                   r"not in the local Hugging Face cache .*503"):
        snapshot_dir(MODEL, n_retries=0)
    assert _cached_models(tmp_path) == []
    hub.fail_api_times = 1
    assert (snapshot_dir(MODEL, n_retries=1) / "config.json").is_file()
    assert f"downloading model '{MODEL}': HTTP 503; retry 1/1 in 2 s" in caplog.text


def test_unreachable_hub(hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    monkeypatch.setenv("HF_ENDPOINT", closed)
    assert main(["-s", MODEL, "-e", str(tmp_path / "out"), "--hf-download-n-retries", "0"]) == 2
    err = capsys.readouterr().err
    assert f"could not download model '{MODEL}' from {closed}, and it is not in the local Hugging Face cache" in err
    assert "Check the network (HF_ENDPOINT, proxies), or pass -d <checkpoint directory>" in err
    assert not (tmp_path / "out").exists() and _cached_models(tmp_path) == []


def test_pickled_weights_only_when_no_safetensors(hub: FakeHub, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "config.json").write_text("{}")
    (repo / "pytorch_model.bin").write_bytes(b"weights")
    (repo / "model.onnx").write_bytes(b"onnx")
    hub.add(MODEL, repo)
    snapshot = snapshot_dir(MODEL)
    assert sorted(p.name for p in snapshot.iterdir()) == ["config.json", "pytorch_model.bin"]


def test_bad_retries_value(tmp_path: Path) -> None:
    with pytest.raises(T2NErrorInvalidArgument, match=r"hf_download_n_retries must be an int >= 0, got -1"):
        snapshot_dir(MODEL, n_retries=-1)
