"""LLM layer throughput against the fault server: 1,000 requests, 200 ms latency, a 3,000 requests/min limit.

The limit-bound time is 1,000 / (3,000 / 60) = 20 s. The client, told the same limit, should finish within 1.15x
of it with zero failures and zero 429s, and be at least 5x faster than the same requests made one at a time
(measured here, not extrapolated). Also: local Gemma 3 270M tokens/s through llama-server on this machine.

    python benchmarks/llm_throughput.py [--requests 1000] [--skip-sequential] [--skip-local]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fault_server import FaultServer  # noqa: E402

from testset_builder.llm import LLMClient, LLMRequest, Message, OpenAIProvider, RetryPolicy  # noqa: E402
from testset_builder.store import open_workspace  # noqa: E402

LIMIT_PER_MINUTE = 3000
LATENCY = 0.2


def requests(n: int, tag: str) -> list[LLMRequest]:
    return [
        LLMRequest(model="gpt-4o-mini", messages=(Message(role="user", content=f"{tag} question {i}"),), max_tokens=16)
        for i in range(n)
    ]


async def run_concurrent(server: FaultServer, workspace_dir: Path, n: int) -> tuple[float, int]:
    with open_workspace(workspace_dir) as workspace:
        client = LLMClient(
            OpenAIProvider(api_key="bench", base_url=server.openai_url),
            workspace,
            "bench",
            max_in_flight=32,
            requests_per_minute=LIMIT_PER_MINUTE,
            retry=RetryPolicy(initial_wait=0.05, max_wait=1.0),
        )
        async with client:
            start = time.perf_counter()
            results = await client.complete_many(requests(n, "concurrent"))
            return time.perf_counter() - start, sum(1 for r in results if isinstance(r, Exception))


async def run_sequential(server: FaultServer, workspace_dir: Path, n: int) -> float:
    with open_workspace(workspace_dir) as workspace:
        client = LLMClient(
            OpenAIProvider(api_key="bench", base_url=server.openai_url), workspace, "bench", max_in_flight=1
        )
        async with client:
            start = time.perf_counter()
            for request in requests(n, "sequential"):
                await client.complete(request)
            return time.perf_counter() - start


def local_tokens_per_second() -> str:
    try:
        from testset_builder.llm.local_provider import LocalProvider, LocalServer, model_file
    except ImportError as error:
        return f"skipped ({error})"
    server = LocalServer(model_file())
    try:
        provider = LocalProvider(server)
        prompt = "Document: Retrieval quality decides what a RAG system can answer.\nRelevant Query:"
        request = LLMRequest(kind="completion", model="gemma-3-270m", prompt=prompt, max_tokens=64, temperature=0.0)

        async def measure() -> tuple[int, float]:
            await provider.complete(request.model_copy(update={"max_tokens": 4}))  # warm-up
            start, tokens = time.perf_counter(), 0
            for seed in range(5):
                completion = await provider.complete(
                    request.model_copy(update={"seed": seed, "prompt": prompt + f" ({seed})"})
                )
                tokens += completion.usage.output_tokens
            elapsed = time.perf_counter() - start
            await provider.aclose()
            return tokens, elapsed

        tokens, elapsed = asyncio.run(measure())
        rate = tokens / elapsed
        return f"{rate:.1f} output tokens/s ({tokens} tokens in {elapsed:.2f} s, 5 completions of up to 64 tokens)"
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--skip-sequential", action="store_true")
    parser.add_argument("--skip-local", action="store_true")
    args = parser.parse_args(argv)
    bound = args.requests / (LIMIT_PER_MINUTE / 60)
    with (
        tempfile.TemporaryDirectory() as tmp,
        FaultServer(latency=LATENCY, requests_per_minute=LIMIT_PER_MINUTE) as server,
    ):
        elapsed, failures = asyncio.run(run_concurrent(server, Path(tmp) / "concurrent", args.requests))
        print(
            f"concurrent: {args.requests} requests in {elapsed:.2f} s = {elapsed / bound:.3f}x the limit-bound "
            f"{bound:.0f} s; "
            f"{failures} failures, {server.rejected} answered 429 by the server"
        )
        if not args.skip_sequential:
            sequential = asyncio.run(run_sequential(server, Path(tmp) / "sequential", args.requests))
            print(
                f"sequential: {args.requests} requests in {sequential:.2f} s; concurrent is "
                f"{sequential / elapsed:.1f}x faster"
            )
    if not args.skip_local:
        print(f"local Gemma 3 270M (llama-server, this machine): {local_tokens_per_second()}")


if __name__ == "__main__":
    main()
