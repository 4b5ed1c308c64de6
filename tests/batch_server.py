"""A local server implementing the contracts of OpenAI's Batch API and Anthropic's Message Batches, for tests.

Anthropic: ``POST /v1/messages/batches``, ``GET /v1/messages/batches/{id}`` (``in_progress``, then ``ended`` with a
``results_url``), ``GET /v1/messages/batches/{id}/results`` (JSONL of ``{custom_id, result}``).

Upload a JSONL file (multipart ``POST /v1/files``), ``POST /v1/batches``, ``GET /v1/batches/{id}`` (``in_progress``
for the first ``polls_until_done`` looks, then ``completed``), ``GET /v1/files/{id}/content`` (the output JSONL).
Request lines whose user message contains "FAIL" get a per-request 400 in the error file, as the real API does.
"""

from __future__ import annotations

import email
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from fault_server import FaultServer, default_answer


class BatchServer:
    def __init__(self, polls_until_done: int = 1, answer=default_answer, create_delay: float = 0.0) -> None:
        self.polls_until_done = polls_until_done
        self.create_delay = create_delay  # seconds between taking a batch and answering (a client may die meanwhile)
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict] = {}
        self.calls: list[tuple[str, str]] = []
        shaper = FaultServer.__new__(FaultServer)
        shaper.answer = answer
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _json(self, code: int, payload, raw: bytes | None = None):
                body = raw if raw is not None else json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json" if raw is None else "application/octet-stream")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                server.calls.append(("POST", self.path))
                if self.path == "/v1/files":
                    message = email.message_from_bytes(
                        b"Content-Type: " + self.headers["content-type"].encode() + b"\r\n\r\n" + body
                    )
                    parts = {
                        part.get_param("name", header="content-disposition"): part.get_payload(decode=True)
                        for part in message.get_payload()
                    }
                    file_id = f"file-{len(server.files) + 1}"
                    server.files[file_id] = parts["file"]
                    return self._json(
                        200,
                        {
                            "id": file_id,
                            "object": "file",
                            "bytes": len(parts["file"]),
                            "created_at": 0,
                            "filename": "batch.jsonl",
                            "purpose": parts["purpose"].decode(),
                            "status": "processed",
                        },
                    )
                if self.path == "/v1/messages/batches":
                    batch_id = f"msgbatch_{len(server.batches) + 1}"
                    server.batches[batch_id] = {"requests": json.loads(body)["requests"], "polls": 0}
                    return self._json(200, server.message_batch_object(batch_id))
                if self.path == "/v1/batches":
                    spec = json.loads(body)
                    batch_id = f"batch_{len(server.batches) + 1}"
                    server.batches[batch_id] = {"spec": spec, "polls": 0}
                    time.sleep(server.create_delay)
                    try:
                        return self._json(200, server.batch_object(batch_id))
                    except (BrokenPipeError, ConnectionResetError):
                        return None  # the client died while waiting: the batch exists all the same
                self._json(404, {"error": {"message": f"no route {self.path}"}})

            def do_GET(self):
                server.calls.append(("GET", self.path))
                if self.path.startswith("/v1/messages/batches/") and self.path.endswith("/results"):
                    return self._json(200, None, raw=server.message_batch_results(self.path.split("/")[4]))
                if self.path.startswith("/v1/messages/batches/"):
                    batch_id = self.path.rsplit("/", 1)[1]
                    server.batches[batch_id]["polls"] += 1
                    return self._json(200, server.message_batch_object(batch_id))
                if self.path.startswith("/v1/batches/"):
                    batch_id = self.path.rsplit("/", 1)[1]
                    server.batches[batch_id]["polls"] += 1
                    return self._json(200, server.batch_object(batch_id))
                if self.path.startswith("/v1/files/") and self.path.endswith("/content"):
                    return self._json(200, None, raw=server.files[self.path.split("/")[3]])
                self._json(404, {"error": {"message": f"no route {self.path}"}})

        self._shaper = shaper
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def batch_object(self, batch_id: str) -> dict:
        batch = self.batches[batch_id]
        spec = batch["spec"]
        done = batch["polls"] >= self.polls_until_done
        output_id = error_id = None
        if done and "output" not in batch:
            output, errors = [], []
            for line in self.files[spec["input_file_id"]].decode().splitlines():
                item = json.loads(line)
                content = json.dumps(item["body"])
                if "FAIL" in content:
                    errors.append(
                        {
                            "id": "r",
                            "custom_id": item["custom_id"],
                            "response": {"status_code": 400, "body": {"error": {"message": "invalid request"}}},
                            "error": None,
                        }
                    )
                else:
                    body = self._shaper.reply(item["url"], item["body"])
                    output.append(
                        {
                            "id": "r",
                            "custom_id": item["custom_id"],
                            "response": {"status_code": 200, "body": body},
                            "error": None,
                        }
                    )
            batch["output"] = f"file-out-{batch_id}"
            self.files[batch["output"]] = "".join(json.dumps(o) + "\n" for o in output).encode()
            if errors:
                batch["errors"] = f"file-err-{batch_id}"
                self.files[batch["errors"]] = "".join(json.dumps(e) + "\n" for e in errors).encode()
        if done:
            output_id, error_id = batch.get("output"), batch.get("errors")
        return {
            "id": batch_id,
            "object": "batch",
            "endpoint": spec["endpoint"],
            "input_file_id": spec["input_file_id"],
            "completion_window": spec["completion_window"],
            "status": "completed" if done else "in_progress",
            "created_at": 0,
            "output_file_id": output_id,
            "error_file_id": error_id,
        }

    def message_batch_object(self, batch_id: str) -> dict:
        batch = self.batches[batch_id]
        ended = batch["polls"] >= self.polls_until_done
        n = len(batch["requests"])
        return {
            "id": batch_id,
            "type": "message_batch",
            "processing_status": "ended" if ended else "in_progress",
            "request_counts": {
                "processing": 0 if ended else n,
                "succeeded": n if ended else 0,
                "errored": 0,
                "canceled": 0,
                "expired": 0,
            },
            "created_at": "2026-12-02T00:00:00Z",
            "expires_at": "2026-12-03T00:00:00Z",
            "ended_at": "2026-12-02T01:00:00Z" if ended else None,
            "cancel_initiated_at": None,
            "archived_at": None,
            "results_url": f"{self.anthropic_url}/v1/messages/batches/{batch_id}/results" if ended else None,
        }

    def message_batch_results(self, batch_id: str) -> bytes:
        lines = []
        for item in self.batches[batch_id]["requests"]:
            if "FAIL" in json.dumps(item["params"]):
                result = {
                    "type": "errored",
                    "error": {
                        "type": "error",
                        "error": {"type": "invalid_request_error", "message": "invalid request"},
                    },
                }
            else:
                result = {"type": "succeeded", "message": self._shaper.reply("/v1/messages", item["params"])}
            lines.append(json.dumps({"custom_id": item["custom_id"], "result": result}))
        return ("\n".join(lines) + "\n").encode()

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> BatchServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._server.shutdown()
        self._server.server_close()
