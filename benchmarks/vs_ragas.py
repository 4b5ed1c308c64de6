"""Ragas' ``TestsetGenerator`` against ``testset-builder synthesize``: same corpus, same endpoint, same question count.

For each tool: questions asked, questions delivered, LLM calls, input and output tokens, endpoint embedding calls,
wall time per delivered question, and whether each delivered question carries the id of its source chunk
(testset-builder stores ``source_chunk_id`` on every synthetic query; a Ragas row carries ``reference_contexts``, the
text; its ``reference_context_ids`` field is checked, and so is whether any input id turns up anywhere in the row).

What runs:

- Corpus: the project's demo corpus ``examples/corpus/`` (four Markdown files, about 1,400 words); both tools
  are asked for ``--questions`` (default 10). testset-builder chunks the folder (markdown chunker, 800/80) and
  synthesizes with the quickstart's settings (styles, mining by the relevance estimate, critic off) through
  ``kind: openai``, ``base_url`` and ``prompt_style: completion``, in a fresh workspace (nothing from its LLM
  cache).
- Ragas twice, with its defaults otherwise, the LLM as ``LangchainLLMWrapper(ChatOpenAI(..., max_tokens=1024))`` and
  embeddings as ``LangchainEmbeddingsWrapper(OpenAIEmbeddings(...))`` (its testset quickstart's setup):
  ``ragas-documents``, ``generate_with_langchain_docs`` on the four files (its documented path), and
  ``ragas-chunks``, ``generate_with_chunks`` on testset-builder's chunks of the same run, each with its chunk id in
  the metadata. On this corpus the documents path stops in ``HeadlineSplitter`` with ``'headlines' property not
  found in this node`` whatever the model answers: the headline extractor runs only on documents over 500 tokens
  (one of the four), the splitter on all of them (the same crash as ragas' own quickstart, vibrantlabsai/ragas pull
  request 2587). The chunks path is the one that gets through.
- Ragas has a venv of its own (``benchmarks/.cache/ragas-venv``, made on first use from PyPI, ``RAGAS_PINS``):
  langchain-community is held at 0.3.31 because 0.4 dropped ``chat_models.vertexai``, which ragas 0.4.3 imports, and
  rapidfuzz is added because its default transforms need it without declaring it. The child is this file with
  ``--ragas-child``, run in that venv: it refuses every connection and name lookup that is not loopback (refusals
  are reported), telemetry is off (``RAGAS_DO_NOT_TRACK``), and tiktoken finds cl100k_base and o200k_base in
  ``benchmarks/.cache/tiktoken``, copied from the ``bpe-openai`` wheel (byte-identical to OpenAI's files: tiktoken
  checks their sha256).
- Each request goes through a counting proxy on 127.0.0.1 that forwards it and reads the answer's ``usage``: calls,
  failed calls, byte-identical repeats, input and output tokens, finish reasons, calls by prompt (first line).

Endpoints:

- ``real``: the embedded Gemma 3 270M (``shared_server()``: llama-server, one slot), a base model; tokens are
  llama-server's. It serves no embeddings, so Ragas' embedding calls go to the stand-in in both runs. A Ragas run
  there is killed after ``--real-timeout`` seconds if it has not ended.
- ``stand-in``: an OpenAI-compatible server in this file, on 127.0.0.1. It answers a Ragas prompt with JSON valid
  for the schema the prompt carries, built from the prompt's own input (headlines from the document's ``##``
  headings, entities and themes from its most frequent content words, summaries from its first sentences, the
  persona-theme mapping from the names and themes given, queries from the term or themes given); testset-builder's
  completion prompts with a question about the passage's most frequent content words; embeddings with a hashed bag
  of words (256 dimensions, L2-normalised). Its usage tokens follow one rule for both tools:
  ``len(re.findall(r"\\w+|[^\\w\\s]", text))`` over the prompt (chat: every message's text) and each answer. Its
  figures measure each tool's call and token pattern, not a model's speed or quality.

Wall time is each tool's process from start to end (imports and model loading included; testset-builder's chunk and
synthesize commands together). Results: ``benchmarks/.cache/vs-ragas.json`` (``--json`` to change).

    python benchmarks/vs_ragas.py [--questions 10] [--skip-real] [--skip-standin] [--skip-ragas]
        [--real-timeout 300] [--json PATH] [--log-requests PATH]

``make bench`` runs it (``benchmarks/run.py``); ``BENCH_SKIP_RAGAS=1 make bench`` leaves it out (its first run
installs Ragas from PyPI into its venv).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "benchmarks" / ".cache"
RAGAS_VENV = CACHE / "ragas-venv"
TIKTOKEN_CACHE = CACHE / "tiktoken"
WORK = CACHE / "vs-ragas"
DEFAULT_JSON = CACHE / "vs-ragas.json"
DOCS = ROOT / "examples" / "corpus"
RAGAS_VERSION = "0.4.3"
RAGAS_PINS = (f"ragas=={RAGAS_VERSION}", "langchain-community==0.3.31", "rapidfuzz==3.14.6")
MODEL = "gemma-3-270m"
TOKEN = re.compile(r"\w+|[^\w\s]")
TIKTOKEN_URLS = {
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
}
STOP_WORDS = (
    "the a an and or of to in on for with by from as at is are was were be been being it its this that these those "
    "which what when where who how why not no can could would should will may might must than then there their they "
    "them you your we our us he she his her also each every any all some more most other such into over under about "
    "only one two three does do did has have had if else so but just like per out up same both own very whose"
)
STOP = set(STOP_WORDS.split())


def count_tokens(text: str) -> int:
    """The stand-in's one token rule: words and single punctuation marks."""
    return len(TOKEN.findall(text))


# ---------------------------------------------------------------------------------------------------------------
# The stand-in: an OpenAI-compatible server answering Ragas with schema-valid JSON and testset-builder with questions


def content_words(text: str) -> list[str]:
    """Content words of ``text`` by frequency, ties in order of first appearance."""
    words = [w for w in re.findall(r"[A-Za-z][A-Za-z0-9@\-]{3,}", text) if w.lower() not in STOP]
    counts = collections.Counter(w.lower() for w in words)
    first: dict[str, str] = {}
    for w in words:
        first.setdefault(w.lower(), w)
    order = {w: i for i, w in enumerate(first)}
    return [first[w] for w in sorted(counts, key=lambda w: (-counts[w], order[w]))]


def sentences(text: str) -> list[str]:
    plain = " ".join(line for line in text.splitlines() if not line.lstrip().startswith(("#", "```", "|")))
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", plain) if len(s.split()) >= 4]


def strings_in(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings_in(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings_in(v)]
    return []


class SchemaFiller:
    """Builds a JSON value valid for a Ragas output schema from the prompt's input."""

    def __init__(self, schema: dict, data: dict) -> None:
        self.defs = schema.get("$defs", {})
        self.data = data
        self.text = "\n".join(strings_in(data))
        self.words = content_words(self.text) or ["topic"]
        self.turn = 0

    def phrase(self, size: int = 2) -> str:
        start = self.turn % len(self.words)
        self.turn += 1
        return " ".join(self.words[(start + i) % len(self.words)] for i in range(size))

    def sentence(self, count: int = 1) -> str:
        found = sentences(self.text)
        return " ".join(found[:count]) if found else f"This text is about {self.phrase(3)}."

    def limit(self) -> int:
        return max(1, min(int(self.data.get("max_num", 3) or 3), 5))

    def fill(self, node: dict, name: str | None = None):
        if "$ref" in node:
            return self.fill(self.defs[node["$ref"].rsplit("/", 1)[-1]], name)
        if "anyOf" in node:
            options = [o for o in node["anyOf"] if o.get("type") != "null"] or node["anyOf"]
            return self.fill(options[0], name)
        if "enum" in node:
            return node["enum"][0]
        kind = node.get("type")
        if kind == "object":
            if "properties" in node:
                return {key: self.fill(value, key) for key, value in node["properties"].items()}
            if name == "mapping" and "personas" in self.data:
                themes = self.data.get("themes") or self.words
                return {
                    p["name"]: [themes[(i + j) % len(themes)] for j in range(min(2, len(themes)))]
                    for i, p in enumerate(self.data["personas"])
                }
            extra = node.get("additionalProperties") or {"type": "string"}
            return {self.phrase(1): self.fill(extra) for _ in range(2)}
        if kind == "array":
            return self.array(node.get("items", {"type": "string"}), name)
        if kind == "string":
            return self.string(name)
        if kind == "integer":
            return int(node.get("maximum", 5 if name == "score" else 1))
        if kind == "number":
            return float(node.get("maximum", 1.0))
        if kind == "boolean":
            return True
        return None

    def array(self, items: dict, name: str | None):
        if name == "headlines":
            headings = [line.lstrip("#").strip() for line in self.text.splitlines() if line.startswith("## ")]
            return headings or [self.phrase(2).title()]
        if name == "combinations" and self.data.get("lists_of_concepts"):
            lists = [c for c in self.data["lists_of_concepts"] if c]
            count = max(1, min(int(self.data.get("max_combinations", 5)), max(len(c) for c in lists)))
            return [[c[i % len(c)] for c in lists] for i in range(count)]
        if items.get("type") == "string" or ("$ref" not in items and "type" not in items):
            return [self.phrase(2) for _ in range(self.limit())]
        return [self.fill(items) for _ in range(self.limit() if items.get("type") == "array" else 2)]

    def string(self, name: str | None) -> str:
        if name in ("query", "question", "user_input"):
            term = self.data.get("term") or ", ".join((self.data.get("themes") or [])[:2]) or self.phrase(2)
            return f"What does the documentation say about {term}?"
        if name in ("answer", "reference", "role_description", "description"):
            return self.sentence(1)
        if name in ("summary", "text"):
            return self.sentence(2)
        if name == "name":
            return f"{self.phrase(1).title()} practitioner"
        return self.phrase(2)


def ragas_answer(prompt: str) -> str | None:
    """The JSON answer to a Ragas ``PydanticPrompt`` (its schema follows ``JSON Schema:``, its input ``input:``)."""
    marker = prompt.find("JSON Schema:\n")
    if marker < 0:
        return None
    decoder = json.JSONDecoder()
    schema, _ = decoder.raw_decode(prompt, marker + len("JSON Schema:\n"))
    data: dict = {}
    where = prompt.rfind("\ninput: ")
    if where >= 0:
        try:
            data, _ = decoder.raw_decode(prompt, where + len("\ninput: "))
        except json.JSONDecodeError:
            data = {}
    return json.dumps(SchemaFiller(schema, data if isinstance(data, dict) else {}).fill(schema))


def question_answer(prompt: str) -> str:
    """testset-builder's completion prompts end with a block of the passage(s) and a label (``Relevant Query:``):
    a question about the block's most frequent content words (keyword style: the words alone)."""
    block = prompt.rstrip().rsplit("\n\n", 1)[-1]
    *passages, label = block.split("\n")
    text = " ".join(re.sub(r"^[A-Za-z ]{1,20}:\s*", "", line) for line in passages)
    words = content_words(text) or ["this", "topic"]
    if "keyword" in label.lower():
        return " ".join(words[:4])
    if len(words) >= 3:
        return f"how does {words[0]} relate to {words[1]} and {words[2]}?"
    return f"what is {' '.join(words[:2])}?"


def hashed_embedding(text: str, dims: int = 256) -> list[float]:
    """A hashed bag of words: each word adds +1 or -1 (by its hash) at a dimension its hash picks; L2-normalised."""
    vector = [0.0] * dims
    for word in re.findall(r"\w+", text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        vector[int.from_bytes(digest[:4], "big") % dims] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0.0:
        vector[0], norm = 1.0, 1.0
    return [v / norm for v in vector]


def message_text(messages: list) -> str:
    parts = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(p.get("text", "") for p in content if isinstance(p, dict))
    return "\n".join(parts)


class StandInHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def reply(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self.reply(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        else:
            self.reply(200, {"status": "ok"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        created = int(time.time())
        if self.path.endswith("/embeddings"):
            inputs = body.get("input")
            inputs = [inputs] if isinstance(inputs, str) else list(inputs or [])
            if inputs and not isinstance(inputs[0], str):
                self.reply(400, {"error": {"message": "the stand-in embeds text, not token ids"}})
                return
            data = [{"object": "embedding", "index": i, "embedding": hashed_embedding(t)} for i, t in enumerate(inputs)]
            tokens = sum(count_tokens(t) for t in inputs)
            self.reply(
                200,
                {
                    "object": "list",
                    "data": data,
                    "model": body.get("model", "hashed-bow"),
                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                },
            )
            return
        chat = self.path.endswith("/chat/completions")
        prompt = message_text(body.get("messages", [])) if chat else str(body.get("prompt", ""))
        answer = ragas_answer(prompt) or question_answer(prompt)
        n = int(body.get("n") or 1)
        if chat:
            choices = [
                {"index": i, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}
                for i in range(n)
            ]
        else:
            choices = [{"index": i, "text": " " + answer, "finish_reason": "stop", "logprobs": None} for i in range(n)]
        usage_in, usage_out = count_tokens(prompt), n * count_tokens(answer)
        self.reply(
            200,
            {
                "id": f"standin-{created}",
                "object": "chat.completion" if chat else "text_completion",
                "created": created,
                "model": body.get("model", MODEL),
                "choices": choices,
                "usage": {
                    "prompt_tokens": usage_in,
                    "completion_tokens": usage_out,
                    "total_tokens": usage_in + usage_out,
                },
            },
        )


# ---------------------------------------------------------------------------------------------------------------
# The counting proxy


class Counts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_tool: dict[str, dict] = collections.defaultdict(
            lambda: {
                "llm_calls": 0,
                "input_tokens": 0,
                "output_tokens": 0,
                "embedding_calls": 0,
                "embedding_input_tokens": 0,
                "failed_calls": 0,
                "repeated_calls": 0,
                "seconds_in_calls": 0.0,
                "by_prompt": collections.Counter(),
                "request_options": collections.Counter(),
                "finish_reasons": collections.Counter(),
                "first_answer": None,
            }
        )
        self.seen: set[tuple[str, str]] = set()

    def snapshot(self) -> dict:
        with self.lock:
            return {
                tool: {
                    **c,
                    "by_prompt": dict(c["by_prompt"].most_common()),
                    "request_options": dict(c["request_options"]),
                }
                for tool, c in self.by_tool.items()
            }


def prompt_label(path: str, body: dict) -> str:
    if path.endswith("/embeddings"):
        return "embeddings"
    text = message_text(body.get("messages", [])) if "messages" in body else str(body.get("prompt", ""))
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return f"{'chat' if 'messages' in body else 'completion'}: {first[:72]}"


def make_proxy(routes: dict[str, tuple[str, str]], counts: Counts, log_path: Path | None) -> ThreadingHTTPServer:
    """``routes``: path prefix (``/ragas``) -> (tool name, upstream base such as ``http://127.0.0.1:P``)."""
    log_lock = threading.Lock()

    class Proxy(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def forward(self, method: str) -> None:
            prefix = "/" + self.path.split("/", 2)[1]
            if prefix not in routes:
                self.send_error(404)
                return
            tool, upstream = routes[prefix]
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)) if method == "POST" else None
            body = json.loads(raw or b"{}") if raw else {}
            path = self.path[len(prefix) :]
            request = urllib.request.Request(
                upstream + path, data=raw, method=method, headers={"Content-Type": "application/json"}
            )
            start = time.perf_counter()
            try:
                with urllib.request.urlopen(request, timeout=900) as response:
                    status, data = response.status, response.read()
            except urllib.error.HTTPError as error:
                status, data = error.code, error.read()
            except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
                status, data = 502, json.dumps({"error": {"message": f"proxy: {error}"}}).encode()
            elapsed = time.perf_counter() - start
            if method == "POST":
                self.count(tool, path, body, status, data, elapsed)
                if log_path is not None:
                    with log_lock, log_path.open("a", encoding="utf-8") as log:
                        record = {"tool": tool, "path": path, "status": status, "seconds": round(elapsed, 3)}
                        record["request"] = body if not path.endswith("/embeddings") else {"inputs": len(body)}
                        record["response"] = data.decode("utf-8", "replace")[:4000]
                        log.write(json.dumps(record) + "\n")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def count(self, tool: str, path: str, body: dict, status: int, data: bytes, elapsed: float) -> None:
            try:
                answer = json.loads(data)
                usage = answer.get("usage") or {}
                choices = answer.get("choices") or []
            except (ValueError, AttributeError):
                usage, choices = {}, []
            with counts.lock:
                c = counts.by_tool[tool]
                c["seconds_in_calls"] += elapsed
                if status != 200:
                    c["failed_calls"] += 1
                if path.endswith("/embeddings"):
                    c["embedding_calls"] += 1
                    c["embedding_input_tokens"] += int(usage.get("prompt_tokens") or 0)
                    return
                c["llm_calls"] += 1
                key = (tool, hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest())
                c["repeated_calls"] += key in counts.seen  # byte-identical to an earlier request of the same tool
                counts.seen.add(key)
                c["input_tokens"] += int(usage.get("prompt_tokens") or 0)
                c["output_tokens"] += int(usage.get("completion_tokens") or 0)
                c["by_prompt"][prompt_label(path, body)] += 1
                for choice in choices:
                    c["finish_reasons"][str(choice.get("finish_reason"))] += 1
                    if c["first_answer"] is None:
                        c["first_answer"] = str((choice.get("message") or {}).get("content") or choice.get("text"))[
                            :300
                        ]
                for option in ("response_format", "tools", "n", "max_tokens", "stop", "logprobs"):
                    if body.get(option) is not None:
                        c["request_options"][f"{option}={json.dumps(body[option])[:40]}"] += 1

        def do_POST(self) -> None:
            self.forward("POST")

        def do_GET(self) -> None:
            self.forward("GET")

    return Server(("127.0.0.1", 0), Proxy)


class Server(ThreadingHTTPServer):
    request_queue_size = 256  # Ragas opens many connections at once; the default backlog of 5 refused some
    daemon_threads = True
    dropped_connections = 0

    def handle_error(self, request, client_address) -> None:  # a client that hung up: counted, not printed
        type(self).dropped_connections += 1


def serve(server: ThreadingHTTPServer) -> str:
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


# ---------------------------------------------------------------------------------------------------------------
# Ragas: its venv, and the child that runs in it


def ensure_ragas_venv() -> Path:
    python = RAGAS_VENV / "bin" / "python"
    stamp = RAGAS_VENV / (".installed-" + hashlib.sha256(" ".join(RAGAS_PINS).encode()).hexdigest()[:12])
    if stamp.exists():
        return python
    if not python.exists():
        print(f"creating {RAGAS_VENV} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(RAGAS_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True)
    print(f"installing {' '.join(RAGAS_PINS)} into {RAGAS_VENV} (from PyPI) ...", flush=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *RAGAS_PINS], check=True)
    stamp.touch()
    return python


def seed_tiktoken() -> str:
    """Put cl100k_base and o200k_base where tiktoken looks before it downloads (the file named by the sha1 of the
    URL), taken from the bpe-openai wheel; tiktoken checks their sha256 on reading."""
    import gzip
    from importlib import resources

    TIKTOKEN_CACHE.mkdir(parents=True, exist_ok=True)
    for name, url in TIKTOKEN_URLS.items():
        target = TIKTOKEN_CACHE / hashlib.sha1(url.encode()).hexdigest()
        if not target.exists():
            data = resources.files("bpe_openai.data").joinpath(f"{name}.tiktoken.gz").read_bytes()
            target.write_bytes(gzip.decompress(data))
    return str(TIKTOKEN_CACHE)


def guard_network(blocked: list[str]) -> None:
    """Refuse every connection and name lookup that is not loopback (Unix sockets pass), recording each refusal."""
    allowed = {"127.0.0.1", "localhost", "::1", None, ""}
    real_connect, real_connect_ex, real_getaddrinfo = (
        socket.socket.connect,
        socket.socket.connect_ex,
        socket.getaddrinfo,
    )

    def host_of(address) -> str | None:
        return address[0] if isinstance(address, tuple) else None

    def connect(self, address):
        if self.family != socket.AF_UNIX and host_of(address) not in allowed:
            blocked.append(f"connect {address}")
            raise ConnectionRefusedError(f"benchmark: no network but 127.0.0.1 ({address})")
        return real_connect(self, address)

    def connect_ex(self, address):
        if self.family != socket.AF_UNIX and host_of(address) not in allowed:
            blocked.append(f"connect {address}")
            return 111
        return real_connect_ex(self, address)

    def getaddrinfo(host, *args, **kwargs):
        name = host.decode() if isinstance(host, bytes) else host
        if name not in allowed:
            blocked.append(f"lookup {name}")
            raise socket.gaierror(socket.EAI_NONAME, f"benchmark: no lookups but localhost ({name})")
        return real_getaddrinfo(host, *args, **kwargs)

    socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = connect, connect_ex, getaddrinfo


def ragas_child(spec_path: Path) -> None:
    """Runs inside the Ragas venv: builds a test set from the spec's documents and writes what came back."""
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    blocked: list[str] = []
    guard_network(blocked)
    result: dict = {"blocked_connections": blocked}
    start = time.perf_counter()
    try:
        import ragas
        from langchain_core.documents import Document
        from langchain_openai import ChatOpenAI, OpenAIEmbeddings
        from ragas.embeddings import LangchainEmbeddingsWrapper
        from ragas.llms import LangchainLLMWrapper
        from ragas.testset import TestsetGenerator

        result["ragas_version"] = ragas.__version__
        documents = [Document(page_content=text, metadata=metadata) for text, metadata in spec["inputs"]]
        llm = LangchainLLMWrapper(
            ChatOpenAI(model=MODEL, base_url=spec["llm_url"], api_key="no-key", max_tokens=spec["max_tokens"])
        )
        embeddings = LangchainEmbeddingsWrapper(
            OpenAIEmbeddings(
                model="hashed-bow", base_url=spec["embeddings_url"], api_key="no-key", check_embedding_ctx_length=False
            )
        )
        generator = TestsetGenerator(llm=llm, embedding_model=embeddings)
        result["setup_seconds"] = time.perf_counter() - start
        began = time.perf_counter()
        if spec["mode"] == "documents":
            testset = generator.generate_with_langchain_docs(documents, testset_size=spec["questions"])
        else:
            testset = generator.generate_with_chunks(documents, testset_size=spec["questions"])
        result["generate_seconds"] = time.perf_counter() - began
        rows = []
        for sample in testset.samples:
            row = sample.eval_sample.model_dump()
            row["synthesizer_name"] = sample.synthesizer_name
            rows.append(row)
        result["rows"] = rows
    except BaseException as error:  # record exactly what stopped it
        result["generate_seconds"] = time.perf_counter() - start
        result["error"] = {
            "type": f"{type(error).__module__}.{type(error).__qualname__}",
            "message": str(error)[:4000],
            "traceback": traceback.format_exc()[-6000:],
        }
    Path(spec["output"]).write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")


def run_ragas(python: Path, proxy_url: str, questions: int, timeout: float, label: str, inputs: list) -> dict:
    """``inputs``: (text, metadata) pairs; with ``chunk_id`` in the metadata they go in as chunks, else documents."""
    mode = "chunks" if inputs and "chunk_id" in inputs[0][1] else "documents"
    label = f"{label}-{mode}"
    out = WORK / f"ragas-{label}.json"
    out.unlink(missing_ok=True)
    spec = {
        "mode": mode,
        "inputs": inputs,
        "llm_url": f"{proxy_url}/ragas-{mode}/v1",
        "embeddings_url": f"{proxy_url}/ragas-{mode}-embeddings/v1",
        "questions": questions,
        "max_tokens": 1024,
        "output": str(out),
    }
    spec_path = WORK / f"ragas-{label}-spec.json"
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    env = {
        key: value for key, value in os.environ.items() if not key.endswith(("_PROXY", "_proxy")) and "KEY" not in key
    }
    env.update(
        RAGAS_DO_NOT_TRACK="true",
        TIKTOKEN_CACHE_DIR=seed_tiktoken(),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        NO_PROXY="127.0.0.1,localhost",
        PYTHONWARNINGS="ignore",
    )
    start = time.perf_counter()
    process = subprocess.Popen(
        [str(python), __file__, "--ragas-child", str(spec_path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        timed_out = True
    wall = time.perf_counter() - start
    result = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
    if timed_out:
        result["error"] = {"type": "timeout", "message": f"killed after {timeout:.0f} s without finishing"}
    result["mode"] = mode
    result["wall_seconds"] = wall
    result["exit_code"] = process.returncode
    result["output_tail"] = (output or "")[-3000:]
    return result


def ragas_figures(result: dict, corpus: list[str], ids: set[str]) -> dict:
    """What came back: rows, rows whose ``reference_context_ids`` are filled or that hold any of the ids given
    (chunk ids, or document names) anywhere, and rows whose every context is verbatim in a corpus document."""
    rows = result.get("rows") or []
    carrying = [r for r in rows if r.get("reference_context_ids") or any(i in json.dumps(r, default=str) for i in ids)]
    verbatim = [
        r
        for r in rows
        if r.get("reference_contexts") and all(any(c in d for d in corpus) for c in r["reference_contexts"])
    ]
    return {
        "delivered": len(rows),
        "with_source_chunk_id": len(carrying),
        "with_reference_context_ids": sum(1 for r in rows if r.get("reference_context_ids")),
        "row_fields": sorted({k for r in rows for k in r}),
        "contexts_verbatim_in_a_document": len(verbatim),
        "synthesizers": dict(collections.Counter(r.get("synthesizer_name") for r in rows)),
        "examples": [
            {
                "user_input": r.get("user_input"),
                "reference_contexts": [c[:160] for c in r.get("reference_contexts") or []],
                "reference_context_ids": r.get("reference_context_ids"),
            }
            for r in rows[:3]
        ],
    }


# ---------------------------------------------------------------------------------------------------------------
# testset-builder


def run_testset_builder(proxy_url: str, questions: int, label: str) -> dict:
    import yaml

    workspace = WORK / f"tb-{label}"
    shutil.rmtree(workspace, ignore_errors=True)
    workspace.mkdir(parents=True)
    config = {
        "workspace": str(workspace),
        "generator": {
            "kind": "openai",
            "base_url": f"{proxy_url}/testset-builder/v1",
            "model": MODEL,
            "prompt_style": "completion",
            "timeout_s": 300,
        },
        "limits": {"max_in_flight": 2, "max_attempts": 3},
        "chunking": {"chunker": "markdown", "size": 800, "overlap": 80},
        "synthesize": {"questions": questions, "relevance_by": "estimate", "critic": False, "mine": True},
    }
    config_path = workspace / "testset-builder.yaml"
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    cli = str(Path(sys.executable).with_name("testset-builder"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("OPENAI_API_KEY", None)
    start = time.perf_counter()
    chunked = subprocess.run(
        [cli, "chunk", str(DOCS), "--config", str(config_path), "--json"], capture_output=True, text=True, env=env
    )
    made = subprocess.run(
        [cli, "synthesize", "--config", str(config_path), "--json"], capture_output=True, text=True, env=env
    )
    wall = time.perf_counter() - start
    listed = subprocess.run(
        [cli, "queue", "--questions", "--json", "--limit", "100000", "--config", str(config_path)],
        capture_output=True,
        text=True,
        env=env,
    )
    result: dict = {"wall_seconds": wall, "chunk_exit_code": chunked.returncode, "exit_code": made.returncode}
    try:
        result["summary"] = json.loads(made.stdout)
    except ValueError:
        result["summary"] = None
        result["output_tail"] = (made.stdout + made.stderr)[-3000:]
    questions_listed = json.loads(listed.stdout).get("questions", []) if listed.returncode == 0 else []
    import sqlite3

    db = sqlite3.connect(f"file:{workspace / 'testset.db'}?mode=ro", uri=True)
    chunk_ids = {row[0] for row in db.execute("SELECT chunk_id FROM chunks")}
    db.close()
    result["questions"] = questions_listed
    result["figures"] = {
        "delivered": len(questions_listed),
        "with_source_chunk_id": sum(1 for q in questions_listed if q.get("source_chunk_id") in chunk_ids),
        "chunks": len(chunk_ids),
        "examples": [{"text": q["text"], "source_chunk_id": q["source_chunk_id"]} for q in questions_listed[:3]],
    }
    return result


# ---------------------------------------------------------------------------------------------------------------


TOOLS = ("testset-builder", "ragas-documents", "ragas-chunks")


def live_chunks(workspace: Path) -> list[tuple[str, dict]]:
    import sqlite3

    db = sqlite3.connect(f"file:{workspace / 'testset.db'}?mode=ro", uri=True)
    rows = db.execute(
        "SELECT text, chunk_id, doc_id FROM chunks WHERE removed_at IS NULL ORDER BY doc_id, start"
    ).fetchall()
    db.close()
    return [(text, {"chunk_id": chunk_id, "doc_id": doc_id}) for text, chunk_id, doc_id in rows]


def measure(endpoint: str, upstream: str, standin_url: str, args, ragas_python: Path | None) -> dict:
    """One endpoint: testset-builder, then Ragas on the documents (its default path), then Ragas on
    testset-builder's chunks (``generate_with_chunks``), each counted by the proxy under its own name."""
    counts = Counts()
    routes = {"/testset-builder": ("testset-builder", upstream)}
    for tool in TOOLS[1:]:
        routes[f"/{tool}"] = (tool, upstream)
        routes[f"/{tool}-embeddings"] = (tool, standin_url)  # the local model serves no embeddings: the stand-in
    proxy = make_proxy(routes, counts, args.log_requests)
    proxy_url = serve(proxy)
    files = sorted(DOCS.glob("*.md"))
    corpus = [p.read_text(encoding="utf-8") for p in files]
    section: dict = {"endpoint": endpoint}
    try:
        print(f"[{endpoint}] testset-builder synthesize, {args.questions} questions ...", flush=True)
        tb = run_testset_builder(proxy_url, args.questions, endpoint)
        section["testset-builder"] = tb
        if ragas_python is not None:
            timeout = args.real_timeout if endpoint == "real" else args.standin_timeout
            chunks = live_chunks(WORK / f"tb-{endpoint}")
            documents = [(text, {"source": p.name}) for p, text in zip(files, corpus)]
            for tool, inputs, ids in (
                ("ragas-documents", documents, {p.name for p in files}),
                ("ragas-chunks", chunks, {m["chunk_id"] for _, m in chunks}),
            ):
                print(
                    f"[{endpoint}] Ragas {RAGAS_VERSION} TestsetGenerator on {len(inputs)} {tool.split('-')[1]}, "
                    f"{args.questions} questions ...",
                    flush=True,
                )
                run = run_ragas(ragas_python, proxy_url, args.questions, timeout, endpoint, inputs)
                run["figures"] = ragas_figures(run, corpus, ids)
                if not args.keep_rows:
                    run.pop("rows", None)
                section[tool] = run
    finally:
        proxy.shutdown()
        proxy.server_close()
    section["counts"] = counts.snapshot()
    return section


def table(sections: list[dict], questions: int) -> list[dict]:
    lines = []
    for section in sections:
        for tool in TOOLS:
            if tool not in section:
                continue
            run = section[tool]
            c = section["counts"].get(tool, {})
            delivered = run.get("figures", {}).get("delivered", 0)
            lines.append(
                {
                    "endpoint": section["endpoint"],
                    "tool": tool.replace("ragas", f"ragas {RAGAS_VERSION}"),
                    "asked": questions,
                    "delivered": delivered,
                    "llm_calls": c.get("llm_calls", 0),
                    "failed_calls": c.get("failed_calls", 0),
                    "repeated_calls": c.get("repeated_calls", 0),
                    "input_tokens": c.get("input_tokens", 0),
                    "output_tokens": c.get("output_tokens", 0),
                    "embedding_calls": c.get("embedding_calls", 0),
                    "wall_seconds": round(run["wall_seconds"], 1),
                    "seconds_per_delivered": round(run["wall_seconds"] / delivered, 1) if delivered else None,
                    "with_source_chunk_id": run.get("figures", {}).get("with_source_chunk_id", 0),
                    "error": (run.get("error") or {}).get("type"),
                }
            )
    return lines


def print_table(lines: list[dict]) -> None:
    head = ("endpoint", "tool", "asked", "deliv.", "LLM calls", "in tok", "out tok", "emb calls", "wall s", "s/deliv.")
    head += ("with chunk id",)
    rows = [
        (
            r["endpoint"],
            r["tool"],
            str(r["asked"]),
            str(r["delivered"]),
            f"{r['llm_calls']}"
            + (f" ({r['failed_calls']} failed)" if r["failed_calls"] else "")
            + (f" ({r['repeated_calls']} repeats)" if r["repeated_calls"] else ""),
            f"{r['input_tokens']:,}",
            f"{r['output_tokens']:,}",
            str(r["embedding_calls"]),
            f"{r['wall_seconds']:.1f}",
            "-" if r["seconds_per_delivered"] is None else f"{r['seconds_per_delivered']:.1f}",
            f"{r['with_source_chunk_id']}/{r['delivered']}",
        )
        for r in lines
    ]
    widths = [max(len(x) for x in column) for column in zip(head, *rows)]
    for row in (head, *rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=10)
    parser.add_argument("--skip-real", action="store_true", help="leave out the real local model")
    parser.add_argument("--skip-standin", action="store_true", help="leave out the stand-in endpoint")
    parser.add_argument("--skip-ragas", action="store_true", help="testset-builder only (no Ragas venv)")
    parser.add_argument("--real-timeout", type=float, default=300, help="cap on Ragas' run against the local model")
    parser.add_argument("--standin-timeout", type=float, default=1800)
    parser.add_argument("--keep-rows", action="store_true", help="keep Ragas' rows in the JSON")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--log-requests", type=Path, default=None, help="append every request and answer here")
    parser.add_argument("--ragas-child", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.ragas_child is not None:
        ragas_child(args.ragas_child)
        return {}
    WORK.mkdir(parents=True, exist_ok=True)
    ragas_python = None if args.skip_ragas else ensure_ragas_venv()
    standin = Server(("127.0.0.1", 0), StandInHandler)
    standin_url = serve(standin)
    sections = []
    try:
        if not args.skip_real:
            from testset_builder.llm.local_provider import shared_server

            server = shared_server()
            sections.append(measure("real", server.base_url, standin_url, args, ragas_python))
        if not args.skip_standin:
            sections.append(measure("stand-in", standin_url, standin_url, args, ragas_python))
    finally:
        standin.shutdown()
        standin.server_close()
    lines = table(sections, args.questions)
    print()
    print_table(lines)
    print(
        "\nreal: Gemma 3 270M (base model) in llama-server, tokens from its usage; Ragas' embeddings from the stand-in."
        "\nstand-in: this file's OpenAI-compatible server (schema-valid JSON for Ragas, a question line for "
        "testset-builder),\n  tokens counted as words + punctuation marks for both tools: call and token pattern, "
        "not model speed."
    )
    for section in sections:
        for tool in TOOLS:
            run = section.get(tool)
            if run and run.get("error"):
                print(f"[{section['endpoint']}] {tool}: {run['error']['type']}: {run['error']['message'][:600]}")
    freeze = None
    if ragas_python is not None:
        listed = subprocess.run([str(ragas_python), "-m", "pip", "freeze"], capture_output=True, text=True)
        freeze = [line for line in listed.stdout.splitlines() if re.match(r"(ragas|langchain|openai|tiktoken)", line)]
    report = {
        "questions": args.questions,
        "corpus": "examples/corpus/*.md",
        "ragas_pins": list(RAGAS_PINS),
        "ragas_venv_packages": freeze,
        "token_rule_standin": r"len(re.findall(r'\w+|[^\w\s]', text)) over the prompt text and each answer",
        "table": lines,
        "sections": sections,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
    print(f"\nwritten: {args.json}")
    return report


if __name__ == "__main__":
    main()
