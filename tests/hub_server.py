"""A local server implementing the Hugging Face hub endpoints that ``upload_folder`` and ``create_tag`` call, for
tests (the real hub cannot be reached). Every request is recorded; committed files and tags are kept.

``POST /api/validate-yaml`` (the dataset card's metadata); ``POST /api/repos/create``;
``POST /api/datasets/{repo}/preupload/{rev}`` (every file "regular": its content comes inline in the commit);
``POST /api/datasets/{repo}/commit/{rev}`` (NDJSON: a header, then one line per
file, base64); ``POST /api/datasets/{repo}/tag/{rev}``; and for downloads, ``GET /api/datasets/{repo}/revision/{rev}``,
``GET /api/datasets/{repo}/tree/{rev}`` and ``HEAD``/``GET /datasets/{repo}/resolve/{commit}/{path}``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class HubServer:
    def __init__(self, token: str) -> None:
        self.token = token
        self.requests: list[dict] = []
        self.repos: dict[str, dict] = {}
        self.commits: list[dict] = []
        self.tags: dict[str, dict] = {}
        self.validated: list[dict] = []
        self.snapshots: dict[str, dict[str, bytes]] = {}  # commit oid -> every file of the repo at that commit
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                hub.requests.append({"method": "POST", "path": self.path, "headers": dict(self.headers), "body": raw})
                if self.headers.get("authorization") != f"Bearer {hub.token}":
                    return self._json(401, {"error": "Invalid credentials"})
                path = self.path.split("?")[0]
                if path == "/api/validate-yaml":  # the client checks the dataset card's metadata before committing
                    body = json.loads(raw)
                    hub.validated.append(body)
                    ok = body.get("repoType") == "dataset" and body["content"].startswith("---\n")
                    return self._json(
                        200 if ok else 400, {"errors": [] if ok else [{"message": "bad card"}], "warnings": []}
                    )
                if path == "/api/repos/create":
                    body = json.loads(raw)
                    repo_id = f"{body['organization']}/{body['name']}" if body.get("organization") else body["name"]
                    visibility = body.get("visibility") or ("private" if body.get("private") else "public")
                    hub.repos.setdefault(repo_id, {"type": body.get("type"), "visibility": visibility, "files": {}})
                    return self._json(200, {"url": f"http://127.0.0.1:{hub.port}/datasets/{repo_id}", "name": repo_id})
                parts = path.split("/")  # ['', 'api', 'datasets', org, name, action, rev]
                if len(parts) >= 7 and parts[1:3] == ["api", "datasets"]:
                    repo_id, action, revision = f"{parts[3]}/{parts[4]}", parts[5], "/".join(parts[6:])
                    if repo_id not in hub.repos:
                        return self._json(404, {"error": "Repository not found"})
                    if action == "preupload":
                        files = json.loads(raw)["files"]
                        return self._json(
                            200,
                            {
                                "files": [
                                    {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None}
                                    for f in files
                                ]
                            },
                        )
                    if action == "commit":
                        lines = [json.loads(line) for line in raw.splitlines() if line.strip()]
                        files = {
                            item["value"]["path"]: base64.b64decode(item["value"]["content"])
                            for item in lines
                            if item["key"] == "file"
                        }
                        oid = hashlib.sha1(raw).hexdigest()
                        hub.repos[repo_id]["files"].update(files)
                        hub.snapshots[oid] = dict(hub.repos[repo_id]["files"])
                        hub.commits.append(
                            {
                                "repo_id": repo_id,
                                "revision": revision,
                                "header": lines[0]["value"],
                                "files": files,
                                "oid": oid,
                            }
                        )
                        return self._json(
                            200,
                            {
                                "commitUrl": f"http://127.0.0.1:{hub.port}/datasets/{repo_id}/commit/{oid}",
                                "commitOid": oid,
                                "pullRequestUrl": None,
                            },
                        )
                    if action == "tag":
                        hub.tags[json.loads(raw)["tag"]] = {
                            "repo_id": repo_id,
                            "revision": revision,
                            "body": json.loads(raw),
                        }
                        return self._json(200, {})
                return self._json(404, {"error": f"no route for {self.path}"})

            def do_GET(self):
                self._read(head=False)

            def do_HEAD(self):
                self._read(head=True)

            def _read(self, head: bool):
                """What snapshot_download calls: revision info, the file tree, and each file by commit."""
                hub.requests.append(
                    {"method": "HEAD" if head else "GET", "path": self.path, "headers": dict(self.headers), "body": b""}
                )
                parts = self.path.split("?")[0].split("/")
                if parts[1:3] == ["api", "datasets"] and len(parts) >= 7 and parts[5] in ("revision", "tree"):
                    repo_id, revision = f"{parts[3]}/{parts[4]}", parts[6]
                    oid = hub.tags[revision]["revision"] if revision in hub.tags else revision
                    if oid not in hub.snapshots:
                        return self._json(404, {"error": "Revision not found"}, head)
                    files = hub.snapshots[oid]
                    if parts[5] == "revision":
                        return self._json(
                            200,
                            {"id": repo_id, "sha": oid, "siblings": [{"rfilename": p} for p in sorted(files)]},
                            head,
                        )
                    tree = [
                        {"type": "file", "path": p, "size": len(d), "oid": hashlib.sha1(d).hexdigest()}
                        for p, d in sorted(files.items())
                    ]
                    return self._json(200, tree, head)
                if parts[1] == "datasets" and len(parts) >= 7 and parts[4] == "resolve":
                    oid, path = parts[5], "/".join(parts[6:])
                    data = hub.snapshots.get(oid, {}).get(path)
                    if data is None:
                        return self._json(404, {"error": "Entry not found"}, head)
                    self.send_response(200)
                    self.send_header("content-type", "application/octet-stream")
                    self.send_header("content-length", str(len(data)))
                    self.send_header("X-Repo-Commit", oid)
                    self.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
                    self.end_headers()
                    if not head:
                        self.wfile.write(data)
                    return None
                return self._json(404, {"error": f"no route for {self.path}"}, head)

            def _json(self, code: int, payload, head: bool = False):
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                if not head:
                    self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._server.shutdown()
        self._server.server_close()
