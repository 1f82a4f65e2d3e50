"""A Hugging Face hub on 127.0.0.1 for the download tests (no network): the four requests
``huggingface_hub.snapshot_download`` makes, answered as the hub answers them.

- ``GET /api/models/<id>/revision/<rev>``: the commit and the file list;
- ``GET /api/models/<id>/tree/<commit>``: the files with sizes;
- ``HEAD`` and ``GET /<id>/resolve/<commit>/<file>``: a file's metadata, then its bytes.

A repository may be private (it answers 401 without ``Authorization: Bearer <token>``, as
the hub answers for a private or missing model), gated (403 ``GatedRepo``), and the API
may fail its first requests with 503 (a transient outage). Every request is recorded.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

import huggingface_hub.constants
import pytest

COMMIT = "89abcdef0123456789abcdef0123456789abcdef"


@dataclass
class Repo:
    files: dict[str, bytes]
    token: str | None = None  # private: this bearer token is required
    gated: bool = False
    branches: tuple[str, ...] = ("main",)


@dataclass
class FakeHub:
    repos: dict[str, Repo] = field(default_factory=dict)
    fail_api_times: int = 0  # the next API requests answered 503
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # method, path, Authorization
    url: str = ""

    def add(self, repo_id: str, directory: Path, **kwargs: object) -> None:
        files = {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}
        self.repos[repo_id] = Repo(files, **kwargs)  # type: ignore[arg-type]

    def downloads(self) -> list[str]:
        return sorted(p.rsplit(f"/resolve/{COMMIT}/", 1)[1] for m, p, _ in self.requests
                      if m == "GET" and "/resolve/" in p)


def _split(path: str, marker: str) -> tuple[str, str] | None:
    if marker not in path:
        return None
    repo_id, rest = path.split(marker, 1)
    return repo_id.strip("/"), rest


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # quiet
            pass

        def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, value: object) -> None:
            self._send(200, json.dumps(value).encode(), {"Content-Type": "application/json"})

        def _refused(self, repo_id: str) -> bool:
            repo = hub.repos.get(repo_id)
            auth = self.headers.get("Authorization")
            if repo is None or (repo.token is not None and auth != f"Bearer {repo.token}"):
                self._send(401, b"{}", {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"})
                return True
            if repo.gated:
                self._send(403, b"{}", {"X-Error-Code": "GatedRepo", "X-Error-Message": "Access is restricted"})
                return True
            return False

        def do_HEAD(self) -> None:  # noqa: N802 (http.server's name)
            self.do_GET()

        def do_GET(self) -> None:  # noqa: N802
            path = unquote(urlparse(self.path).path)
            hub.requests.append((self.command, path, self.headers.get("Authorization")))
            if path.startswith("/api/") and hub.fail_api_times > 0:
                hub.fail_api_times -= 1
                self._send(503, b"{}")
                return
            if (found := _split(path.removeprefix("/api/models/"), "/revision/")) and path.startswith("/api/"):
                repo_id, revision = found
                if self._refused(repo_id):
                    return
                repo = hub.repos[repo_id]
                if revision not in (*repo.branches, COMMIT):
                    self._send(404, b"{}", {"X-Error-Code": "RevisionNotFound"})
                    return
                self._json({"id": repo_id, "sha": COMMIT, "private": repo.token is not None,
                            "siblings": [{"rfilename": name} for name in repo.files]})
            elif (found := _split(path.removeprefix("/api/models/"), "/tree/")) and path.startswith("/api/"):
                repo_id, _ = found
                if self._refused(repo_id):
                    return
                self._json([{"type": "file", "path": name, "size": len(data),
                             "oid": hashlib.sha1(data).hexdigest()}
                            for name, data in hub.repos[repo_id].files.items()])
            elif found := _split(path, f"/resolve/{COMMIT}/"):
                repo_id, name = found
                if self._refused(repo_id):
                    return
                data = hub.repos[repo_id].files[name]
                self._send(200, data, {"X-Repo-Commit": COMMIT, "ETag": f'"{hashlib.sha1(data).hexdigest()}"'})
            else:
                self._send(404, b"{}", {"X-Error-Code": "EntryNotFound"})

    return Handler


@contextmanager
def serving(hub: FakeHub) -> Iterator[FakeHub]:
    """Serve ``hub`` on a free port of 127.0.0.1 while the block runs (``hub.url``)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@contextmanager
def online_hub(cache: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """A served fake hub as the environment's endpoint, ``cache`` as the hub cache, online
    and without a token (huggingface_hub reads HF_HUB_OFFLINE once, at import: its
    constant is reset too, for a session started offline)."""
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    with serving(FakeHub()) as served:
        monkeypatch.setenv("HF_ENDPOINT", served.url)
        yield served
