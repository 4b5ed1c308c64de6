"""Twenty reviewers, each with a token of their own (the verdict's reviewer comes from it), two thousand items,
overlap two, through the HTTP API of a real `serve`, killed with SIGKILL and restarted half way: every acknowledged
verdict is stored exactly once, no item gets a third reviewer, none is stranded, and a verdict sent again with its
idempotency key stores nothing new."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter

import httpx
import pytest

from testset_builder.records import Chunk, Document, Query, QueryOrigin
from testset_builder.stages.review import add_reviewer
from testset_builder.store import open_workspace, rows
from testset_builder.store import review as store
from testset_builder.store.workspace import utc_timestamp

pytestmark = pytest.mark.slow
ITEMS, REVIEWERS, OVERLAP, LEASE_S = 2000, 20, 2, 3
TOKEN = "concurrency-token-" + "x" * 16


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(ws, port: int) -> subprocess.Popen:
    args = [sys.executable, "-m", "testset_builder", "serve", "--workspace", str(ws), "--port", str(port)]
    args += ["--overlap", str(OVERLAP), "--lease", str(LEASE_S)]
    server = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "TESTSET_BUILDER_REVIEW_TOKEN": TOKEN},
        text=True,
    )
    assert "review at http://" in server.stdout.readline()
    return server


def test_twenty_reviewers_and_a_killed_server_lose_no_verdict_and_store_none_twice(tmp_path):
    ws = tmp_path / "ws"
    with open_workspace(ws) as workspace, workspace.transaction() as db:
        ids = [f"d{i:04d}" for i in range(ITEMS)]
        rows.put_documents(db, [Document(doc_id=i, text=f"passage {i}") for i in ids])
        rows.put_chunks(
            db, [Chunk(chunk_id=i, doc_id=i, text=f"passage {i}", start=0, end=len(f"passage {i}")) for i in ids]
        )
        rows.put_queries(db, [Query(query_id="q", text="which passage", origin=QueryOrigin.real)])
        items = [
            store.QueuedItem(store.pair_item_id("q", i), "pair", "q", i, random.random(), "llm proposal", 1)
            for i in ids
        ]
        store.enqueue(db, items, utc_timestamp())
    with open_workspace(ws) as workspace:
        tokens = {f"reviewer-{n:02d}": add_reviewer(workspace, f"reviewer-{n:02d}") for n in range(REVIEWERS)}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = {"process": start_server(ws, port)}
    acknowledged: dict[str, tuple[str, str, str]] = {}  # idempotency key -> (verdict id, item, reviewer)
    replays, refused = Counter(), Counter()
    guard = threading.Lock()
    deadline = time.monotonic() + 600

    def call(client: httpx.Client, method: str, path: str, **kwargs) -> httpx.Response:
        """Retry through the server's absence (it is killed and restarted), as a reviewer's page would."""
        while time.monotonic() < deadline:
            try:
                return client.request(method, path, **kwargs)
            except httpx.TransportError:
                time.sleep(0.1)
        raise TimeoutError(path)

    def reviewer(name: str) -> None:
        client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {tokens[name]}"}, timeout=30)
        chance = random.Random(name)
        while time.monotonic() < deadline:
            response = call(client, "GET", "/api/next")  # who asks comes from the token
            if response.status_code == 204:
                if call(client, "GET", "/api/stats").json()["remaining"] == 0:
                    return
                time.sleep(0.5)  # what is left is leased to others; an expired lease comes back
                continue
            assert response.status_code == 200, response.text
            item = response.json()
            key = uuid.uuid4().hex
            body = {
                "item_id": item["item_id"],
                "action": "grade",
                "grade": chance.randint(0, 2),
                "idempotency_key": key,
            }
            saved = call(client, "POST", "/api/verdicts", json=body)
            if saved.status_code == 409:  # the lease ran out (a kill, a slow answer) and others finished the item
                with guard:
                    refused[key] += 1
                continue
            assert saved.status_code in (200, 201), saved.text  # 200: the first send landed before a kill
            with guard:
                acknowledged[key] = (saved.json()["verdict_id"], item["item_id"], name)
            if chance.random() < 0.05:  # a double click, a retry after a lost answer
                again = call(client, "POST", "/api/verdicts", json=body)
                assert again.status_code == 200 and again.json()["verdict_id"] == saved.json()["verdict_id"]
                with guard:
                    replays[key] += 1

    threads = [threading.Thread(target=reviewer, args=(f"reviewer-{n:02d}",)) for n in range(REVIEWERS)]
    for thread in threads:
        thread.start()
    while len(acknowledged) < ITEMS and time.monotonic() < deadline:  # half of the 4,000 verdicts
        time.sleep(0.05)
    server["process"].send_signal(signal.SIGKILL)
    server["process"].wait()
    time.sleep(1.0)
    server["process"] = start_server(ws, port)
    for thread in threads:
        thread.join()
    server["process"].send_signal(signal.SIGTERM)
    server["process"].wait(timeout=30)

    with open_workspace(ws) as workspace:
        stored = {
            row[0]: row[1:]
            for row in workspace.db.execute(
                "SELECT idempotency_key, verdict_id, item_id, reviewer FROM review_verdicts"
            )
        }
        per_item = Counter(
            row[0] for row in workspace.db.execute("SELECT item_id FROM review_state WHERE counting = 1")
        )
        humans = workspace.db.execute("SELECT COUNT(*) FROM judgments WHERE source = 'human'").fetchone()[0]
    assert replays and all(stored[key] == value for key, value in acknowledged.items())  # every acknowledged one, once
    assert len(stored) == len(acknowledged) == humans  # nothing stored twice, nothing unacknowledged left behind
    assert not set(refused) & set(stored)  # a verdict refused as no longer wanted left nothing behind
    assert len(per_item) == ITEMS and set(per_item.values()) == {OVERLAP}  # none stranded, none with a third reviewer
