"""``-s/--model-slug``: a Hugging Face model id resolved to a snapshot directory of the
hub cache, downloaded through ``huggingface_hub`` when it is not there yet.

The cache is looked at first (no request when the model is cached, so a cached model
exports offline), then the hub is asked. The environment decides as it does for
``huggingface_hub``, read at call time rather than at import (``hub_cache_dir``):
the cache (``HF_HUB_CACHE``, ``HF_HOME``...), the endpoint (``HF_ENDPOINT``), the token
(``HF_TOKEN`` or a saved ``hf auth login``, read by ``huggingface_hub`` itself), and
``HF_HUB_OFFLINE`` (a model not cached is then an error, before any request).

Only what the exporters read is downloaded: other frameworks' weights are skipped, and
pickled PyTorch weights (``*.bin``, ``*.pt``) only come when the repository has no
safetensors. Transient failures (HTTP 429 and 5xx) are retried with an exponential
backoff, as torch_to_nnef_llm does (``--hf-download-n-retries``). A failed download of a
model that had nothing in the cache leaves nothing there.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from huggingface_hub import snapshot_download
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorNotFoundFile, T2NErrorRuntime
from fastnnef.log import get_logger

log = get_logger("fastnnef.llm")

DEFAULT_HF_DOWNLOAD_N_RETRIES = 5  # torch_to_nnef_llm's default
# Rate limit and server errors: worth a retry; a missing or forbidden model is not.
TRANSIENT_HTTP_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_RETRY_DELAY_S = 60.0
# Weights for other runtimes that checkpoint repositories often ship next to PyTorch's.
OTHER_FORMATS = ["*.onnx", "*.onnx_data", "onnx/*", "*.gguf", "*.msgpack", "*.h5", "*.tflite", "*.ot",
                 "*.mlmodel", "*.mlpackage/*", "coreml/*", "openvino/*"]
# Pickled PyTorch weights: fetched only when the repository has no safetensors.
PICKLED_WEIGHTS = ["*.bin", "*.pt", "*.pth", "*.ckpt"]
_TRUE = {"1", "ON", "YES", "TRUE"}


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache, read from the environment at call time (huggingface_hub
    reads it once at import): HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE, HF_HOME/hub, then
    XDG_CACHE_HOME/huggingface/hub or ~/.cache/huggingface/hub."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.path.expanduser(os.environ[var]))
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
    )
    return Path(os.path.expanduser(home)) / "hub"


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` (or transformers' ``TRANSFORMERS_OFFLINE``) set, at call time."""
    return any((os.environ.get(var) or "").upper() in _TRUE for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def snapshot_dir(model_id: str, revision: str | None = None,
                 n_retries: int = DEFAULT_HF_DOWNLOAD_N_RETRIES) -> Path:
    """The local snapshot of ``model_id`` at ``revision`` (default: the main branch): the
    cached one, else downloaded. Raises a fastnnef error naming the model and what to do."""
    if isinstance(n_retries, bool) or not isinstance(n_retries, int) or n_retries < 0:
        raise T2NErrorInvalidArgument(f"hf_download_n_retries must be an int >= 0, got {n_retries!r}")
    cache = hub_cache_dir()
    what = f"model {model_id!r}" + (f" at revision {revision!r}" if revision else "")
    try:
        return _snapshot(model_id, revision, cache, None, local_files_only=True)
    except LocalEntryNotFoundError:
        pass
    except HFValidationError as err:
        raise T2NErrorInvalidArgument(f"{model_id!r} is not a Hugging Face model id (org/name): {err}") from err
    if hub_offline():
        raise T2NErrorNotFoundFile(
            f"{what} is not in the local Hugging Face cache ({cache}) and HF_HUB_OFFLINE is set: download it "
            f"where the hub is reachable (`hf download {model_id}`), unset HF_HUB_OFFLINE, or pass "
            "-d <checkpoint directory>"
        )
    storage = cache / f"models--{model_id.replace('/', '--')}"
    locks = cache / ".locks" / storage.name
    fresh = not storage.exists()
    try:
        return _download(model_id, revision, cache, what, n_retries)
    except BaseException:
        if fresh:  # nothing of this model was cached before: leave nothing of it
            shutil.rmtree(storage, ignore_errors=True)
            shutil.rmtree(locks, ignore_errors=True)
        raise


def _download(model_id: str, revision: str | None, cache: Path, what: str, n_retries: int) -> Path:
    endpoint = os.environ.get("HF_ENDPOINT") or None  # None: huggingface_hub's default
    where = endpoint or "the Hugging Face hub"
    log.info("downloading %s from %s into %s", what, where, cache)
    attempt = 0
    while True:
        try:
            return _snapshot(model_id, revision, cache, endpoint, local_files_only=False)
        except GatedRepoError as err:
            raise T2NErrorNotFoundFile(
                f"{what} is gated on {where}: request access on its page, then set HF_TOKEN to a token of that "
                f"account (or run `hf auth login`); or pass -d <checkpoint directory> ({_reason(err)})"
            ) from err
        except RepositoryNotFoundError as err:
            raise T2NErrorNotFoundFile(
                f"{what} was not found on {where}: check the id, or, for a private model, set HF_TOKEN to a token "
                f"that can read it (or run `hf auth login`); or pass -d <checkpoint directory> ({_reason(err)})"
            ) from err
        except RevisionNotFoundError as err:
            raise T2NErrorInvalidArgument(
                f"{what}: no such revision on {where} (give a branch, tag or commit of the model) ({_reason(err)})"
            ) from err
        except (LocalEntryNotFoundError, HfHubHTTPError) as err:
            status = _http_status(err)
            if status in TRANSIENT_HTTP_STATUSES and attempt < n_retries:
                attempt += 1
                delay = min(2.0 * 2 ** (attempt - 1), MAX_RETRY_DELAY_S)
                log.warning("downloading %s: HTTP %s; retry %d/%d in %.0f s", what, status, attempt, n_retries, delay)
                time.sleep(delay)
                continue
            tried = f" (after {attempt} retries)" if attempt else ""
            raise T2NErrorNotFoundFile(
                f"could not download {what} from {where}{tried}, and it is not in the local Hugging Face cache "
                f"({cache}): {_reason(err)}. Check the network (HF_ENDPOINT, proxies), or pass "
                "-d <checkpoint directory>"
            ) from err
        except OSError as err:  # the cache: disk full, permissions
            raise T2NErrorRuntime(f"downloading {what} into {cache} failed: {err}") from err


def _snapshot(model_id: str, revision: str | None, cache: Path, endpoint: str | None,
              local_files_only: bool) -> Path:
    """The snapshot without other runtimes' and pickled weights; with the pickled ones too
    when it has no safetensors. The cache is read with the same patterns it was filled
    with (huggingface_hub calls a snapshot incomplete when a listed file it was asked for
    is missing)."""
    def fetch(ignore: list[str]) -> Path:
        return Path(snapshot_download(model_id, revision=revision, cache_dir=cache, endpoint=endpoint,
                                      local_files_only=local_files_only, ignore_patterns=ignore))

    path = fetch(OTHER_FORMATS + PICKLED_WEIGHTS)
    return path if any(path.rglob("*.safetensors")) else fetch(OTHER_FORMATS)


def _http_status(err: BaseException) -> int | None:
    """The HTTP status behind a hub error (huggingface_hub wraps it as the cause when the
    cache was tried after the request failed)."""
    seen: BaseException | None = err
    chain: set[int] = set()
    while seen is not None and id(seen) not in chain:
        chain.add(id(seen))
        if isinstance(seen, HfHubHTTPError) and seen.response is not None:
            return int(seen.response.status_code)
        seen = seen.__cause__ or seen.__context__
    return None


def _reason(err: BaseException) -> str:
    """The first line of the innermost error: the request that failed and why."""
    while err.__cause__ is not None:
        err = err.__cause__
    return (str(err).strip().splitlines() or [type(err).__name__])[0]
