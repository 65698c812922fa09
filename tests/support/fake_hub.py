"""A Hugging Face Hub on loopback, in a thread: the file routes huggingface_hub downloads through.

``HEAD|GET /<org>/<name>/resolve/<revision>/<file>`` answers as the hub does: ``X-Repo-Commit``,
``ETag`` and ``Content-Length`` on success; ``X-Error-Code`` (``RepoNotFound``, ``GatedRepo``,
``RevisionNotFound``, ``EntryNotFound``) with the status the hub uses otherwise. Every request is
recorded with its method, path and Authorization header, so a test can tell which files were
downloaded and whether the token was sent.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class HubRepo:
    commit: str
    files: dict[str, bytes]
    gated: bool = False
    tokens: tuple[str, ...] = ()  # tokens with access to a gated repo
    refs: tuple[str, ...] = ("main",)


@dataclass
class FakeHub:
    repos: dict[str, HubRepo]
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # (method, path, auth)
    url: str = ""

    def downloads(self) -> list[str]:
        """The paths fetched with GET (HEAD only asks for metadata)."""
        return [path for method, path, _ in self.requests if method == "GET"]


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def do_GET(self) -> None:
            self._answer(body=True)

        def _error(self, status: int, code: str, commit: str | None = None) -> None:
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", f"{code} (fake hub)")
            if commit is not None:
                self.send_header("X-Repo-Commit", commit)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _answer(self, body: bool) -> None:
            auth = self.headers.get("Authorization")
            hub.requests.append((self.command, self.path, auth))
            parts = self.path.split("?", 1)[0].lstrip("/").split("/", 4)
            if len(parts) != 5 or parts[2] != "resolve":
                self._error(404, "RepoNotFound")
                return
            repo_id, revision, filename = f"{parts[0]}/{parts[1]}", parts[3], parts[4]
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._error(401, "RepoNotFound")
                return
            token = auth.removeprefix("Bearer ") if auth else None
            if repo.gated and token not in repo.tokens:
                self._error(401 if token is None else 403, "GatedRepo")
                return
            if revision not in (*repo.refs, repo.commit):
                self._error(404, "RevisionNotFound")
                return
            data = repo.files.get(filename)
            if data is None:
                self._error(404, "EntryNotFound", commit=repo.commit)
                return
            self.send_response(200)
            self.send_header("X-Repo-Commit", repo.commit)
            self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

    return Handler


@contextmanager
def fake_hub(repos: dict[str, HubRepo]) -> Iterator[FakeHub]:
    hub = FakeHub(repos)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
