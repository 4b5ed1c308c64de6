"""Random source trees (folders, formats, the same file name in two folders, hostile ids) through the tool's own
commands: every loadable document lands in the workspace exactly once, nothing still on disk is marked removed, and
every release written from it loads, exports and scores."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_hostile_ids import HOSTILE

from testset_builder.cli import main
from testset_builder.corpus.loaders import file_doc_id
from testset_builder.export import read_qrels
from testset_builder.records import id_problem
from testset_builder.stages.release import load_release
from testset_builder.store import open_workspace

pytestmark = pytest.mark.slow
NAMES = ["notes.md", "guide.md", "my notes.txt", "a#b.md", "page.html", "漢字.md", "deep/inner.md", "100%.txt"]
PROSE = "Retrieval evaluation asks whether the right passage was found for a query. " * 6


@st.composite
def source_trees(draw):
    roots = draw(st.lists(st.sampled_from(["teamA", "teamB", "team C"]), min_size=1, max_size=3, unique=True))
    files = {root: draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True)) for root in roots}
    jsonl = {
        root: draw(st.lists(st.sampled_from(HOSTILE[:12]), max_size=4, unique=True))
        for root in roots
        if draw(st.booleans())
    }
    bad = draw(st.booleans())  # a record with an id no format can carry, and an unreadable file
    return roots, files, jsonl, bad


def build(base: Path, roots, files, jsonl, bad) -> set[str]:
    """Write the tree; return the ids the tool must load from it, computed from the tree itself."""
    expected = set()
    prefixed = len(roots) > 1
    for root in roots:
        for name in files[root]:
            path = base / root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if name.endswith(".html"):
                path.write_text(f"<html><body><p>{PROSE}</p><p>{name}</p></body></html>", encoding="utf-8")
            else:
                path.write_text(f"# {name}\n\n{PROSE}\n{root} {name}\n", encoding="utf-8")
            expected.add(file_doc_id(name, root if prefixed else ""))
        if root in jsonl:
            records = [{"_id": f"{root}:{ident}", "text": f"{PROSE} {ident}"} for ident in jsonl[root]]
            if bad:
                records.append({"_id": "an id\twith a tab", "text": PROSE})
            (base / root / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
            expected |= {r["_id"] for r in records if id_problem(r["_id"]) is None}  # "team C:…" has a space
        if bad:
            (base / root / "broken.txt").write_bytes(b"\xff\xfe\x00binary")
    return expected


def live_documents(ws: Path) -> list[str]:
    with open_workspace(ws) as workspace:
        return [r[0] for r in workspace.db.execute("SELECT doc_id FROM documents WHERE removed_at IS NULL")]


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(tree=source_trees())
def test_random_source_trees_load_whole_remove_only_what_is_gone_and_release_round_trips(
    tree, tmp_path_factory, capsys
):
    roots, files, jsonl, bad = tree
    base = tmp_path_factory.mktemp("tree")
    expected = build(base, roots, files, jsonl, bad)
    ws = base / "ws"
    chunk = ["chunk", *(str(base / root) for root in roots), "--workspace", str(ws), "--json"]
    assert main(chunk) == 0
    capsys.readouterr()
    live = live_documents(ws)
    assert sorted(live) == sorted(expected) and len(live) == len(set(live))  # each exactly once

    gone_root, gone_name = roots[0], files[roots[0]][0]
    (base / gone_root / gone_name).unlink()
    assert main([*chunk, "--allow-removal"]) == 0
    report = json.loads(capsys.readouterr().out)
    gone = file_doc_id(gone_name, gone_root if len(roots) > 1 else "")
    assert sorted(live_documents(ws)) == sorted(expected - {gone}) and report["removed"] == 1
    if len(expected) == 1:
        return  # the corpus is empty now: nothing to release

    with open_workspace(ws) as workspace:
        chunks = [
            r[0] for r in workspace.db.execute("SELECT chunk_id FROM chunks WHERE removed_at IS NULL ORDER BY chunk_id")
        ]
    queries, qrels = base / "queries.jsonl", base / "qrels.tsv"
    picked = chunks[:: max(1, len(chunks) // 4)][:4]
    queries.write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": f"retrieval {i}"}) + "\n" for i in range(len(picked)))
    )
    qrels.write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\t{c}\t2\n" for i, c in enumerate(picked)), encoding="utf-8"
    )
    assert (
        main(["import", str(qrels), "--queries", str(queries), "--workspace", str(ws), "--version", "1.0.0", "--json"])
        == 0
    )
    released = load_release(ws / "releases" / "1.0.0")
    assert released.qrels == {f"q{i}": {c: 2} for i, c in enumerate(picked)}
    run = base / "run.trec"
    assert main(["baseline", "--release", f"{ws}@1.0.0", "--out", str(run)]) == 0
    assert main(["score", "--release", f"{ws}@latest", "--run", str(run), "--json"]) == 0
    for fmt in ("hf", "beir", "trec", "jsonl"):
        out = base / f"export-{fmt}"
        assert main(["export", "--version", "1.0.0", "--format", fmt, "--out", str(out), "--workspace", str(ws)]) == 0
    assert read_qrels(base / "export-trec" / "qrels.trec").to_dict() == released.qrels
    assert read_qrels(base / "export-jsonl" / "qrels.jsonl").to_dict() == released.qrels
    capsys.readouterr()
    shutil.rmtree(base)
