"""The release report: one self-contained HTML page that opens in a real headless Chromium with no console error and
no network request, with every plot drawn and the figures it states computed from the release."""

from __future__ import annotations

import json
import re

import pytest
from conftest import TEST_OUTPUT

from testset_builder.cli import main

pytestmark = pytest.mark.slow


@pytest.fixture
def reviewed_release(pair_queue, capsys, tmp_path):
    """A release of two real queries: a drawn round answered by a reviewer, the rest estimated; two runs."""
    from testset_builder.stages import review

    ws = pair_queue
    assert main(["select", "--budget", "8", "-w", str(ws.root), "--json"]) == 0
    answered = 0
    while (item := review.next_item(ws, "ann")) is not None and item.reason.startswith("drawn"):
        grade = 2 * int(ws.truth(item.query["query_id"], item.chunk["chunk_id"]))
        review.submit(ws, "ann", item.item_id, "grade", f"k-{answered}", grade=grade)
        answered += 1
    assert main(["release", "-w", str(ws.root), "--version", "1.0.0"]) == 0
    runs = []
    for retriever in ("bm25", "dense"):
        path = tmp_path / f"{retriever}.trec"
        assert main(["baseline", "--release", f"{ws.root}@1.0.0", "--retriever", retriever, "--out", str(path)]) == 0
        runs.append(path)
    capsys.readouterr()
    return ws, runs, answered


def test_the_report_opens_in_chromium_with_every_plot_and_no_network(reviewed_release, browser, capsys):
    ws, runs, answered = reviewed_release
    args = ["report", "--release", f"{ws.root}@1.0.0", "--json"] + [a for r in runs for a in ("--run", str(r))]
    assert main(args) == 0
    written = json.loads(capsys.readouterr().out)
    page_file = ws.root / "reports" / "1.0.0.html"
    assert written == {"report": str(page_file), "version": "1.0.0", "runs": ["bm25", "dense"]}
    html = page_file.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # nothing to fetch

    page = browser.new_page(viewport={"width": 1200, "height": 900})
    errors, requests = [], []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("request", lambda request: requests.append(request.url))
    page.goto(page_file.as_uri())
    expected = [
        "queries_by_origin", "labels_by_grade", "labels_by_origin", "estimates", "calibration", "recall_curves",
    ]  # fmt: skip
    for name in expected:
        assert page.locator(f"figure[data-plot={name}] svg").count() == 1, name
        assert page.locator(f"figure[data-plot={name}] svg path").count() > 0, name  # something is drawn
    TEST_OUTPUT.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(TEST_OUTPUT / "release-report.png"), full_page=True)
    text = page.inner_text("body")
    page.close()
    assert errors == [] and requests == [page_file.as_uri()]

    manifest = json.loads((ws.root / "releases" / "1.0.0" / "manifest.json").read_text(encoding="utf-8"))
    counts = manifest["counts"]
    assert f"{counts['corpus']} chunks, {counts['queries']} queries, {counts['qrels']} labels" in text
    carried = counts["estimates"]
    assert f"{carried['drawn']} were drawn for review with known probabilities, {answered} answered" in text
    assert "bm25" in text and "dense" in text and "prediction-powered" in text


def test_a_report_of_a_release_directory_needs_an_out_file(reviewed_release, capsys, tmp_path):
    ws = reviewed_release[0]
    release_dir = ws.root / "releases" / "1.0.0"
    assert main(["report", "--release", str(release_dir)]) == 1
    assert "--out" in capsys.readouterr().err
    out = tmp_path / "r.html"
    assert main(["report", "--release", str(release_dir), "--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8").startswith("<!doctype html>")
