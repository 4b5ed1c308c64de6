"""A fault-injecting HTTP server on 127.0.0.1 that speaks OpenAI's and Anthropic's shapes.

``FaultServer(schedule=[...])`` answers requests in order with the scheduled faults, then normally:
``("status", code, retry_after, message)``, ``("slow", seconds)`` (then answers), ``("truncated",)`` and
``("invalid_json",)`` (a 200 whose body is not JSON). ``requests_per_minute`` enforces a rate limit (one second of
burst; excess gets 429 with Retry-After: 1). Every request is recorded with its arrival time and headers.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def default_answer(body: dict) -> str:
    if "messages" in body:
        return f"answer to: {body['messages'][-1]['content']}"
    return f" completion of: {body.get('prompt', '')[-20:]}"


class FaultServer:
    def __init__(
        self,
        schedule: list[tuple] | None = None,
        answer: Callable[[dict], str] = default_answer,
        latency: float = 0.0,
        requests_per_minute: float | None = None,
        usage: tuple[int, int] = (11, 7),
    ) -> None:
        self.schedule = list(schedule or [])
        # a per-minute limit enforced as a rate with one second of burst, as providers do; excess gets 429
        self._rate = requests_per_minute / 60.0 if requests_per_minute else None
        self._allowance = self._rate or 0.0
        self._allowance_at = time.monotonic()
        self.rejected = 0
        self.answer = answer
        self.usage = usage
        self.latency = latency
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length", 0))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:  # the client died mid-request (a kill test): nothing arrived to answer
                    self.close_connection = True
                    return
                with server._lock:
                    server.requests.append(
                        {"time": time.monotonic(), "path": self.path, "headers": dict(self.headers), "body": body}
                    )
                    action = server.schedule.pop(0) if server.schedule else ("ok",)
                    if action == ("ok",) and not server._admit():
                        action = ("status", 429, 1, "rate limit exceeded")
                        server.rejected += 1
                if server.latency:
                    time.sleep(server.latency)
                kind = action[0]
                if kind == "status":
                    _, code, retry_after, message = action
                    payload = {"type": "error", "error": {"type": "api_error", "message": message}}
                    headers = {"retry-after": str(retry_after)} if retry_after is not None else {}
                    return self._send(code, json.dumps(payload).encode(), headers)
                if kind == "slow":
                    time.sleep(action[1])
                if kind == "truncated":
                    return self._send(200, json.dumps(server.reply(self.path, body)).encode()[:25])
                if kind == "invalid_json":
                    return self._send(200, b"<html>upstream proxy error</html>")
                return self._send(200, json.dumps(server.reply(self.path, body)).encode())

            def _send(self, code: int, payload: bytes, headers: dict | None = None):
                try:
                    self.send_response(code)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    for key, value in (headers or {}).items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _admit(self) -> bool:
        if self._rate is None:
            return True
        now = time.monotonic()
        self._allowance = min(self._rate, self._allowance + (now - self._allowance_at) * self._rate)
        self._allowance_at = now
        if self._allowance >= 1.0:
            self._allowance -= 1.0
            return True
        return False

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    usage: tuple[int, int] = (11, 7)  # (input, output) tokens every answer reports

    def openai_usage(self) -> dict:
        return {"prompt_tokens": self.usage[0], "completion_tokens": self.usage[1], "total_tokens": sum(self.usage)}

    def reply(self, path: str, body: dict) -> dict:
        text = self.answer(body)
        if path.endswith("/chat/completions"):
            return {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": self.openai_usage(),
            }
        if path.endswith("/completions"):
            return {
                "id": "cmpl-1",
                "object": "text_completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}],
                "usage": self.openai_usage(),
            }
        if path.endswith("/messages"):
            content = [{"type": "text", "text": text}]
            if body.get("tools"):
                content = [
                    {"type": "tool_use", "id": "toolu_1", "name": body["tools"][0]["name"], "input": json.loads(text)}
                ]
            return {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": content,
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 11, "output_tokens": 7},
            }
        raise ValueError(f"unknown path {path}")

    def __enter__(self) -> FaultServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._server.shutdown()
        self._server.server_close()
