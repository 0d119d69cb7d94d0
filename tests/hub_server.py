"""A loopback stand-in for the Hugging Face Hub HTTP API, so that the real `huggingface_hub` client code runs in tests.

[`HubStandIn`] serves, from memory, the routes that `create_repo`, `create_commit` / `upload_folder`, `create_branch`,
`repo_info` / `model_info`, `list_repo_tree`, `get_paths_info`, `hf_hub_download` and `snapshot_download` use:

- `POST /api/repos/create` and `POST /api/validate-yaml`,
- `POST /api/{type}s/{repo_id}/preupload/{revision}`: every file is a regular (inline) upload, never LFS or Xet,
- `POST /api/{type}s/{repo_id}/commit/{revision}`: the NDJSON commit payload with base64 file contents,
- `POST /api/{type}s/{repo_id}/branch/{branch}` and `POST /api/{type}s/{repo_id}/paths-info/{revision}`,
- `GET /api/{type}s/{repo_id}[/revision/{revision}]` and `GET /api/{type}s/{repo_id}/tree/{revision}[/{path}]`,
- `HEAD` / `GET /[datasets/|spaces/]{repo_id}/resolve/{revision}/{path}` with `X-Repo-Commit`, `ETag` and
  `Content-Length` (and `Range` requests),

with the Hub's error headers (`X-Error-Code: RepoNotFound | RevisionNotFound | EntryNotFound`). Commits are atomic
and have real ids (SHA-1 of their content and parent). `fail_next_commits(n)` makes the commit endpoint read the
request and drop the connection without answering and without committing: a network failure mid-upload.

The `hub` fixture starts one on 127.0.0.1 (free port, daemon thread) and points the client at it: `HF_ENDPOINT`,
`huggingface_hub.constants.ENDPOINT` (read at import time, so it is patched too), the module-level `HfApi` behind
`huggingface_hub.create_repo` & co. and transformers' shared one, `HF_HUB_OFFLINE=0`, `HF_HUB_DISABLE_XET=1`, a
token, a fresh Hub cache; and it clears the cache of `elical_hf.models.default_model.hub_offline()` before and after, so the
library sees an online Hub. Everything is restored by `monkeypatch` afterwards.
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
import yaml


TOKEN = "hf_standin_token"
REPO_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
URL_PREFIXES = {"model": "", "dataset": "datasets/", "space": "spaces/"}
ACTIONS = {"revision", "tree", "preupload", "commit", "branch", "paths-info"}


def git_blob_sha(data: bytes) -> str:
    """The git object id of a blob, as the Hub reports for regular files."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Commit:
    oid: str
    parent: str | None
    message: str
    files: dict[str, bytes]
    timestamp: float


@dataclass
class Repo:
    repo_id: str
    repo_type: str
    private: bool = False
    sdk: str | None = None
    branches: dict[str, str] = field(default_factory=dict)
    commits: dict[str, Commit] = field(default_factory=dict)

    def resolve(self, revision: str) -> Commit | None:
        oid = self.branches.get(revision, revision)
        return self.commits.get(oid)

    def add_commit(self, parent: Commit | None, message: str, files: dict[str, bytes]) -> Commit:
        digest = hashlib.sha1()
        digest.update((parent.oid if parent else "").encode() + message.encode() + str(time.time_ns()).encode())
        for path in sorted(files):
            digest.update(path.encode() + git_blob_sha(files[path]).encode())
        commit = Commit(digest.hexdigest(), parent.oid if parent else None, message, dict(files), time.time())
        self.commits[commit.oid] = commit
        return commit


class HubStandIn:
    """An in-memory Hub served over HTTP on 127.0.0.1; see the module docstring."""

    def __init__(self) -> None:
        self.repos: dict[tuple[str, str], Repo] = {}
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []
        self._drop_commits = 0
        self._server: ThreadingHTTPServer | None = None

    # -- control ------------------------------------------------------------------------------------------------
    def start(self) -> HubStandIn:
        handler = type("Handler", (_Handler,), {"hub": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._server.block_on_close = False
        threading.Thread(target=self._server.serve_forever, name="hub-stand-in", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def fail_next_commits(self, count: int = 1) -> None:
        """Drop the connection of the next `count` commit requests, without committing."""
        self._drop_commits = count

    # -- inspection ---------------------------------------------------------------------------------------------
    def repo(self, repo_id: str, repo_type: str = "model") -> Repo | None:
        return self.repos.get((repo_type, repo_id))

    def files(self, repo_id: str, repo_type: str = "model", revision: str = "main") -> dict[str, bytes]:
        return dict(self.repos[(repo_type, repo_id)].resolve(revision).files)

    def history(self, repo_id: str, repo_type: str = "model", revision: str = "main") -> list[Commit]:
        repo = self.repos[(repo_type, repo_id)]
        commit, commits = repo.resolve(revision), []
        while commit is not None:
            commits.append(commit)
            commit = repo.commits.get(commit.parent) if commit.parent else None
        return commits


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: HubStandIn

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - quiet
        pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    # -- plumbing -----------------------------------------------------------------------------------------------
    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        headers = {"Content-Type": "application/json", "Content-Length": str(len(body)), **(headers or {})}
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, payload, status: int = 200, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(payload).encode(), headers)

    def _error(self, status: int, code: str | None, message: str, commit: str | None = None) -> None:
        headers = {"X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        if commit:
            headers["X-Repo-Commit"] = commit
        self._json({"error": message}, status, headers)

    def _authorized(self) -> bool:
        return self.headers.get("Authorization", "").startswith("Bearer ")

    def _find_repo(self, repo_type: str, repo_id: str) -> Repo | None:
        repo = self.hub.repos.get((repo_type, repo_id))
        if repo is None or (repo.private and not self._authorized()):
            self._error(404 if repo is None else 401, "RepoNotFound", f"Repository {repo_id} not found")
            return None
        return repo

    def _dispatch(self, method: str) -> None:
        parts = urlsplit(self.path)
        segments = [unquote(s) for s in parts.path.split("/")[1:]]
        query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        self.hub.requests.append((method, parts.path))
        try:
            if segments[:1] == ["api"]:
                self._api(method, segments[1:], query)
            else:
                self._resolve(method, segments)
        except (BrokenPipeError, ConnectionResetError):
            pass

    # -- /api -----------------------------------------------------------------------------------------------------
    def _api(self, method: str, segs: list[str], query: dict[str, str]) -> None:
        if method == "POST" and segs == ["repos", "create"]:
            return self._create_repo()
        if method == "POST" and segs == ["validate-yaml"]:
            return self._validate_yaml()
        if segs == ["whoami-v2"]:
            return self._json({"type": "user", "name": "tester", "auth": {"accessToken": {"role": "write"}}})
        if not segs or segs[0] not in REPO_TYPES or len(segs) < 2:
            return self._error(404, None, f"No route for /api/{'/'.join(segs)}")
        repo_type = REPO_TYPES[segs[0]]
        width = 1 if len(segs) == 2 or segs[2] in ACTIONS else 2  # "name" or "namespace/name"
        repo_id, rest = "/".join(segs[1 : 1 + width]), segs[1 + width :]
        repo = self._find_repo(repo_type, repo_id)
        if repo is None:
            return None
        action = rest[0] if rest else "revision"
        revision = rest[1] if len(rest) > 1 else "main"
        if method == "GET" and action == "revision":
            return self._info(repo, revision)
        if method == "GET" and action == "tree":
            return self._tree(repo, revision, "/".join(rest[2:]), query.get("recursive", "").lower() == "true")
        if method == "POST" and not self._authorized():
            return self._error(401, None, "Invalid credentials in Authorization header")
        if method == "POST" and action == "preupload":
            return self._preupload(repo, revision)
        if method == "POST" and action == "commit":
            return self._commit(repo, revision)
        if method == "POST" and action == "branch":
            return self._branch(repo, "/".join(rest[1:]))
        if method == "POST" and action == "paths-info":
            return self._paths_info(repo, revision)
        return self._error(404, None, f"No route for {method} {self.path}")

    def _create_repo(self) -> None:
        if not self._authorized():
            return self._error(401, None, "Invalid credentials in Authorization header")
        payload = json.loads(self._body() or b"{}")
        repo_type = payload.get("type") or "model"
        name, organization = payload["name"], payload.get("organization")
        repo_id = f"{organization}/{name}" if organization else f"tester/{name}"
        url = f"{self.hub.url}/{URL_PREFIXES[repo_type]}{repo_id}"
        with self.hub.lock:
            if (repo_type, repo_id) in self.hub.repos:
                return self._json({"error": "You already created this repo", "url": url}, 409)
            private = payload.get("visibility") == "private" or bool(payload.get("private"))
            repo = Repo(repo_id, repo_type, private=private, sdk=payload.get("sdk"))
            first = repo.add_commit(None, "initial commit", {".gitattributes": b"*.safetensors filter=lfs\n"})
            repo.branches["main"] = first.oid
            self.hub.repos[(repo_type, repo_id)] = repo
        self._json({"url": url, "name": repo_id, "id": repo_id})

    def _validate_yaml(self) -> None:
        content = json.loads(self._body()).get("content", "")
        if content.startswith("---"):
            try:
                yaml.safe_load(content.split("---", 2)[1])
            except yaml.YAMLError as error:
                return self._json({"errors": [{"message": str(error)}], "warnings": []}, 400)
        self._json({"errors": [], "warnings": []})

    def _info(self, repo: Repo, revision: str) -> None:
        commit = repo.resolve(revision)
        if commit is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(commit.timestamp))
        info = {
            "id": repo.repo_id,
            "author": repo.repo_id.split("/")[0],
            "sha": commit.oid,
            "private": repo.private,
            "disabled": False,
            "gated": False,
            "lastModified": stamp,
            "createdAt": stamp,
            "tags": [],
            "siblings": [{"rfilename": path} for path in sorted(commit.files)],
        }
        if repo.repo_type == "space":
            info["sdk"] = repo.sdk
        self._json(info)

    def _entries(self, commit: Commit, prefix: str, recursive: bool) -> list[dict]:
        prefix = prefix.strip("/")
        base = prefix + "/" if prefix else ""
        files, folders = [], set()
        for path, data in sorted(commit.files.items()):
            if not path.startswith(base):
                continue
            rest = path[len(base) :].split("/")
            for depth in range(1, len(rest)):
                if recursive or depth == 1:
                    folders.add(base + "/".join(rest[:depth]))
            if recursive or len(rest) == 1:
                files.append({"type": "file", "path": path, "size": len(data), "oid": git_blob_sha(data)})
        dirs = [{"type": "directory", "path": path, "oid": "0" * 40} for path in sorted(folders)]
        return dirs + files

    def _tree(self, repo: Repo, revision: str, path: str, recursive: bool) -> None:
        commit = repo.resolve(revision)
        if commit is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        entries = self._entries(commit, path, recursive)
        if path and not entries:
            return self._error(404, "EntryNotFound", f"{path} does not exist on {revision}", commit.oid)
        self._json(entries)

    def _paths_info(self, repo: Repo, revision: str) -> None:
        commit = repo.resolve(revision)
        if commit is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        paths = parse_qs(self._body().decode()).get("paths", [])
        found = []
        for path in paths:
            if path in commit.files:
                data = commit.files[path]
                found.append({"type": "file", "path": path, "size": len(data), "oid": git_blob_sha(data)})
            elif any(name.startswith(path.rstrip("/") + "/") for name in commit.files):
                found.append({"type": "directory", "path": path, "oid": "0" * 40})
        self._json(found)

    def _preupload(self, repo: Repo, revision: str) -> None:
        payload = json.loads(self._body())
        commit = repo.resolve(revision)
        if commit is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        files = []
        for entry in payload["files"]:
            existing = commit.files.get(entry["path"])
            oid = git_blob_sha(existing) if existing is not None else None
            files.append({"path": entry["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": oid})
        self._json({"files": files, "commitOid": commit.oid})

    def _commit(self, repo: Repo, revision: str) -> None:
        lines = [json.loads(line) for line in self._body().splitlines() if line.strip()]
        with self.hub.lock:
            if self.hub._drop_commits > 0:  # a network failure: the request arrived, no answer, nothing committed
                self.hub._drop_commits -= 1
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return None
            head = repo.resolve(revision) if revision in repo.branches else None
            if head is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            header = next(item["value"] for item in lines if item["key"] == "header")
            if header.get("parentCommit") and header["parentCommit"] != head.oid:
                return self._error(412, None, "A commit has happened since. Please refresh and try again.")
            files = dict(head.files)
            for item in lines:
                key, value = item["key"], item["value"]
                if key == "file":
                    files[value["path"]] = base64.b64decode(value["content"])
                elif key == "deletedFile":
                    if files.pop(value["path"], None) is None:
                        return self._error(404, "EntryNotFound", "A file with this name doesn't exist")
                elif key == "deletedFolder":
                    files = {p: d for p, d in files.items() if not p.startswith(value["path"].rstrip("/") + "/")}
                elif key == "lfsFile":
                    return self._error(422, None, "The Hub stand-in accepts regular (inline) files only.")
            commit = repo.add_commit(head, header.get("summary", ""), files)
            repo.branches[revision] = commit.oid
        url = f"{self.hub.url}/{URL_PREFIXES[repo.repo_type]}{repo.repo_id}/commit/{commit.oid}"
        self._json({"success": True, "commitOid": commit.oid, "commitUrl": url, "hookOutput": ""})

    def _branch(self, repo: Repo, branch: str) -> None:
        payload = json.loads(self._body() or b"{}")
        with self.hub.lock:
            if branch in repo.branches:
                return self._error(409, None, f"Reference {branch} already exists")
            start = repo.resolve(payload.get("startingPoint") or "main")
            if start is None:
                return self._error(404, "RevisionNotFound", "Invalid starting point")
            repo.branches[branch] = start.oid
        self._json({})

    # -- /{repo_id}/resolve/{revision}/{path} ---------------------------------------------------------------------
    def _resolve(self, method: str, segs: list[str]) -> None:
        repo_type = "model"
        if segs and segs[0] in ("datasets", "spaces"):
            repo_type, segs = REPO_TYPES[segs[0]], segs[1:]
        if "resolve" not in segs[:3] or method not in ("GET", "HEAD"):
            return self._error(404, None, f"No route for {method} {self.path}")
        at = segs.index("resolve")
        repo = self._find_repo(repo_type, "/".join(segs[:at]))
        if repo is None:
            return None
        revision, path = segs[at + 1], "/".join(segs[at + 2 :])
        commit = repo.resolve(revision)
        if commit is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        data = commit.files.get(path)
        if data is None:
            return self._error(404, "EntryNotFound", f"{path} does not exist on {revision}", commit.oid)
        headers = {
            "Content-Type": "application/octet-stream",
            "X-Repo-Commit": commit.oid,
            "ETag": f'"{git_blob_sha(data)}"',
            "Accept-Ranges": "bytes",
            "Last-Modified": formatdate(commit.timestamp, usegmt=True),
        }
        status, start = 200, 0
        ranged = self.headers.get("Range", "")
        if ranged.startswith("bytes="):
            first, _, last = ranged[len("bytes=") :].partition("-")
            start, end = int(first or 0), int(last) if last else len(data) - 1
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            data, status = data[start : end + 1], 206
        self._send(status, data, headers)


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """A running [`HubStandIn`] with the Hub client (and `elical_hf.models.default_model.hub_offline`) pointed at it."""
    server = HubStandIn().start()
    point_client_at(monkeypatch, server.url, tmp_path / "hub-cache")
    yield server
    server.stop()
    from elical_hf.models.default_model import hub_offline

    hub_offline.cache_clear()  # recomputed on next use, after monkeypatch has restored the client's settings


def point_client_at(monkeypatch, endpoint: str, cache_dir) -> None:
    """Point `huggingface_hub` (already imported) at `endpoint`, online, without Xet, with a token and a fresh cache."""
    import huggingface_hub.hf_api as hf_api_module
    from huggingface_hub import constants

    from elical_hf.models.default_model import hub_offline

    env = {
        "HF_ENDPOINT": endpoint,
        "HF_HUB_OFFLINE": "0",
        "TRANSFORMERS_OFFLINE": "0",
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_TOKEN": TOKEN,
        "HF_HUB_CACHE": str(cache_dir),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    patches = {
        "ENDPOINT": endpoint,
        "HUGGINGFACE_CO_URL_TEMPLATE": endpoint + "/{repo_id}/resolve/{revision}/{filename}",
        "HF_HUB_OFFLINE": False,
        "HF_HUB_DISABLE_XET": True,
        "HF_HUB_DISABLE_TELEMETRY": True,
        "HF_HUB_CACHE": str(cache_dir),
    }
    for name, value in patches.items():
        monkeypatch.setattr(constants, name, value)
    monkeypatch.setattr(hf_api_module.api, "endpoint", endpoint)  # behind huggingface_hub.create_repo & co.
    import transformers.utils.hub as transformers_hub

    monkeypatch.setattr(transformers_hub, "_hf_api", None)  # transformers' shared HfApi, built on first use
    hub_offline.cache_clear()


def go_offline(monkeypatch) -> None:
    """Switch the client to `HF_HUB_OFFLINE=1` mid-test (and make `hub_offline()` notice)."""
    from huggingface_hub import constants

    from elical_hf.models.default_model import hub_offline

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    hub_offline.cache_clear()
