"""remap: a release's labels projected onto another chunking of the same corpus (splits, merges, losses, changed
documents), the command, and SciFact chunked two ways keeping a label on every relevant document."""

from __future__ import annotations

import asyncio
import csv
import json
import shutil
from pathlib import Path

import pytest
from fake_provider import FakeProvider, quoting

from testset_builder.cli import main
from testset_builder.config import ChunkingConfig, SynthesizeConfig
from testset_builder.corpus.ingest import ingest
from testset_builder.corpus.loaders import load_sources
from testset_builder.errors import InputError
from testset_builder.llm import LLMClient
from testset_builder.llm.roles import Roles
from testset_builder.records import Chunk, Judgment, JudgmentSource, JudgmentStatus, Query, QueryOrigin
from testset_builder.stages.release import load_release, write_release
from testset_builder.stages.release.reader import LoadedRelease
from testset_builder.stages.release.remap import RemapPolicy, plan_remap
from testset_builder.stages.synthesize import synthesize
from testset_builder.store import open_workspace, rows

TEXT = "".join(f"Sentence number {i:02d} of the document says one thing. " for i in range(10))  # 10 x 50 chars


def release_of(chunks: dict[str, tuple[int, int]], qrels: dict, evidence: dict | None = None, sha="v1"):
    """A release (in memory) over one document ``d`` whose text was ``TEXT``, cut into ``chunks``."""
    return LoadedRelease(
        path=Path("nowhere/releases/1.0.0"),
        manifest={"version": "1.0.0", "content_sha256": "c0ffee", "name": "set", "files": {}},
        corpus={c: {"title": "", "text": TEXT[s:e]} for c, (s, e) in chunks.items()},
        queries={q: f"query {q}" for q in qrels},
        qrels=qrels,
        chunk_spans={c: {"doc_id": "d", "start": s, "end": e, "doc_sha256": sha} for c, (s, e) in chunks.items()},
        query_meta={q: {"origin": "real"} for q in qrels},
        evidence=evidence or {},
    )


def target(spans: list[tuple[int, int]], text: str = TEXT, sha: str = "v1"):
    """The target workspace's document ``d`` (its text and sha) and its chunks, as plan_remap asks for them."""
    chunks = [Chunk(chunk_id=f"n{i}", doc_id="d", text=text[s:e], start=s, end=e) for i, (s, e) in enumerate(spans)]
    return (lambda doc_id: (text, sha) if doc_id == "d" else None), (lambda doc_id: chunks if doc_id == "d" else [])


def plan(release, spans, min_coverage=0.5, **kwargs):
    document, chunks_of = target(spans, **kwargs)
    return plan_remap(release, document, chunks_of, RemapPolicy(min_coverage))


def test_an_old_chunk_that_falls_inside_one_new_chunk_maps_one_to_one():
    result = plan(release_of({"a": (0, 100), "b": (100, 200)}, {"q": {"a": 2}}), [(0, 150), (150, 500)])
    (outcome,) = result.outcomes
    assert outcome.outcome == "one-to-one" and outcome.to == [{"chunk_id": "n0", "coverage": 1.0}]
    assert [(label.chunk.chunk_id, label.grade) for label in result.labels] == [("n0", 2)]


def test_an_old_chunk_covered_half_or_more_by_two_overlapping_new_chunks_is_split_and_both_inherit():
    result = plan(release_of({"a": (0, 100)}, {"q": {"a": 1}}), [(0, 60), (40, 100), (100, 500)])
    (outcome,) = result.outcomes
    assert outcome.outcome == "split" and [t["chunk_id"] for t in outcome.to] == ["n0", "n1"]
    assert result.counts()["split"] == 1 and result.counts()["new_labels"] == 2


def test_labelled_chunks_of_one_query_in_one_new_chunk_merge_and_the_new_chunk_gets_the_max_grade():
    release = release_of({"a": (0, 50), "b": (50, 100), "c": (100, 150)}, {"q": {"a": 1, "b": 2}, "r": {"c": 1}})
    result = plan(release, [(0, 200), (200, 500)])
    assert {(o.query_id, o.chunk_id): o.outcome for o in result.outcomes} == {
        ("q", "a"): "merged", ("q", "b"): "merged", ("r", "c"): "one-to-one",
    }  # fmt: skip
    merged = next(label for label in result.labels if label.query_id == "q")
    assert merged.grade == 2 and merged.parents == ["a", "b"]
    assert result.counts()["new_labels_merged"] == 1


def test_a_label_no_new_chunk_covers_enough_of_is_ambiguous_and_each_overlapping_chunk_is_proposed_for_review():
    release = release_of({"a": (0, 100)}, {"q": {"a": 1}})
    spans = [(0, 30), (30, 60), (60, 100), (100, 500)]  # big chunks cut small: none holds half of the label
    result = plan(release, spans)
    (outcome,) = result.outcomes
    assert outcome.outcome == "ambiguous" and "no chunk covers 0.5 of the chunk span (at most 0.40)" in outcome.reason
    assert [(p.chunk_id, p.coverage, p.parent_grade) for p in result.proposals] == [
        ("n2", 0.4, 1), ("n0", 0.3, 1), ("n1", 0.3, 1),
    ]  # fmt: skip
    counts = result.counts()
    assert (counts["ambiguous"], counts["lost"], counts["proposals_queued"], counts["new_labels"]) == (1, 0, 3, 0)
    assert counts["queries_waiting_review"] == 1 and counts["queries_lost"] == 0
    (lower,) = plan(release, spans, min_coverage=0.3).outcomes
    assert lower.outcome == "split" and len(lower.to) == 3
    (gone,) = plan(release, [(100, 500)]).outcomes  # nothing overlaps it any more: lost, and said why
    assert gone.outcome == "lost" and "no chunk overlaps the chunk span" in gone.reason


def test_an_edit_inside_a_labelled_span_keeps_the_label_as_proposals_where_its_first_and_last_words_still_are():
    release = release_of({"a": (100, 250)}, {"q": {"a": 2}})
    edited = TEXT[:160] + "AN INSERTED CLAUSE, " + TEXT[180:]  # the middle of chunk a rewritten, its edges kept
    result = plan(release, [(0, 200), (200, len(edited))], text=edited, sha="v2")
    (outcome,) = result.outcomes
    assert outcome.outcome == "ambiguous" and outcome.relocated and "text inside" in outcome.reason
    assert {p.chunk_id for p in result.proposals} == {"n0", "n1"} and not result.labels


def test_an_evidence_span_decides_which_new_chunk_inherits_instead_of_the_old_chunk():
    evidence = {("q", "a"): {"start": 70, "end": 90, "text": TEXT[70:90]}}
    result = plan(release_of({"a": (0, 100)}, {"q": {"a": 2}}, evidence), [(0, 60), (60, 100), (100, 500)])
    (outcome,) = result.outcomes
    assert outcome.anchor == "evidence" and outcome.outcome == "one-to-one" and outcome.to[0]["chunk_id"] == "n1"
    (label,) = result.labels
    assert (label.evidence.start, label.evidence.end, label.evidence.text) == (70, 90, TEXT[70:90])


def test_a_changed_document_relocates_the_labelled_text_when_it_is_still_there_else_lists_the_label_lost():
    release = release_of({"a": (50, 100), "b": (300, 350)}, {"q": {"a": 1, "b": 1}})
    changed = "A new opening paragraph. " + TEXT[:200] + TEXT[350:]  # chunk b's text is gone
    result = plan(release, [(0, 125), (125, len(changed))], text=changed, sha="v2")
    outcomes = {o.chunk_id: o for o in result.outcomes}
    assert outcomes["a"].relocated and outcomes["a"].outcome == "one-to-one" and outcomes["a"].to[0]["chunk_id"] == "n0"
    assert outcomes["b"].outcome == "lost" and "text changed" in outcomes["b"].reason
    assert result.counts()["relocated"] == 1 and result.counts()["lost"] == 1


def test_a_release_without_spans_or_a_target_without_the_documents_is_refused_with_a_clear_error():
    release = release_of({"a": (0, 100)}, {"q": {"a": 1}})
    release.chunk_spans = {}
    with pytest.raises(InputError, match=r"no meta/chunks\.jsonl"):
        plan(release, [(0, 100)])
    with pytest.raises(InputError, match="lacks 1 of the 1 labelled documents"):
        plan_remap(release_of({"a": (0, 100)}, {"q": {"a": 1}}), lambda d: None, lambda d: [], RemapPolicy())


# the command ----------------------------------------------------------------------------------------------------
DOCS = Path(__file__).resolve().parents[1] / "examples" / "corpus"


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture
def two_chunkings(docs_workspace, tmp_path):
    """The demo corpus chunked twice: markdown 600/60 (with six synthetic questions quoting their evidence and one human
    label, released as 1.0.0) and recursive 300/0 in ``other``."""
    ws = docs_workspace
    client = LLMClient(FakeProvider(quoting, prompt_style="chat"), ws, "synthesize")
    settings = SynthesizeConfig(questions=6, mine=False, critic=False, styles={"natural": 1.0})
    asyncio.run(synthesize(ws, Roles.single(client, "fake-model"), settings))
    chunk = rows.live_chunks_of(ws.db, sorted({r[1] for r in rows.live_chunk_rows(ws.db)})[0])[0]
    with ws.transaction() as db:
        rows.put_queries(db, [Query(query_id="real-1", text="how is a release versioned?", origin=QueryOrigin.real)])
        rows.add_judgments(
            db,
            [
                Judgment(
                    judgment_id="h1", query_id="real-1", chunk_id=chunk.chunk_id, grade=1,
                    source=JudgmentSource.human, reviewer="ann", status=JudgmentStatus.final,
                )
            ],
        )  # fmt: skip
    write_release(ws, "1.0.0")
    other = tmp_path / "other"
    with open_workspace(other) as target_ws:
        ingest(target_ws, load_sources([DOCS]), ChunkingConfig(chunker="recursive", size=300, overlap=0), [DOCS])
    return ws.root, other


def test_remap_projects_a_release_onto_another_chunking_and_a_later_release_there_keeps_the_labels(
    two_chunkings, capsys
):
    source, other = two_chunkings
    code, result = run_json(
        capsys, "remap", "--release", f"{source}@1.0.0", "--to-workspace", str(other), "--version", "2.0.0"
    )
    assert code == 0, result
    counts = result["counts"]
    outcomes = ("lost", "one_to_one", "split", "merged", "ambiguous")
    assert counts["labels"] == 7 and sum(counts[name] for name in outcomes) == 7
    assert counts["new_labels"] >= 7 - counts["lost"] and len(result["lost"]) == counts["lost"]
    assert result["parent"] == {
        "workspace": source.name, "name": source.name, "version": "1.0.0",
        "content_sha256": load_release(source / "releases" / "1.0.0").manifest["content_sha256"],
    }  # fmt: skip
    remapped = load_release(other / "releases" / "2.0.0")  # every file checked against the manifest
    manifest_text = (remapped.path / "manifest.json").read_text(encoding="utf-8")
    assert str(source.parent) not in manifest_text  # the parent is named, never by its path
    assert remapped.manifest["remap"]["policy"]["min_coverage"] == 0.5
    assert "meta/remap.jsonl" in remapped.manifest["files"] and len(remapped.remap_outcomes) == 7
    assert sum(len(chunks) for chunks in remapped.qrels.values()) == counts["new_labels"]
    parent = load_release(source / "releases" / "1.0.0")
    assert set(remapped.queries) <= set(parent.queries) and "real-1" in remapped.queries
    assert all(remapped.chunk_spans[c]["doc_id"] for chunks in remapped.qrels.values() for c in chunks)
    assert remapped.evidence, "the evidence spans did not come along"
    for (query_id, chunk_id), span in remapped.evidence.items():
        chunk = remapped.chunk_spans[chunk_id]
        assert chunk["start"] <= span["start"] <= span["end"] <= chunk["end"] and chunk_id in remapped.qrels[query_id]
    synthetic = [q for q, meta in remapped.query_meta.items() if meta["origin"] == "synthetic"]
    assert synthetic and all(remapped.query_meta[q]["style"] == "natural" for q in synthetic)

    code, later = run_json(capsys, "release", "--version", "2.1.0", "--workspace", str(other))
    assert code == 0 and later["same_as_parent"] and later["content_sha256"] == remapped.manifest["content_sha256"]


def released_with_a_label_on_the_longest_chunk(root, query_id: str, version: str) -> None:
    """A reviewer's grade-2 label for ``query_id`` on the workspace's longest chunk, then release ``version``."""
    with open_workspace(root) as ws:
        longest = max(
            (c for doc in {r[1] for r in rows.live_chunk_rows(ws.db)} for c in rows.live_chunks_of(ws.db, doc)),
            key=lambda c: len(c.text),
        )
        with ws.transaction() as db:
            rows.put_queries(db, [Query(query_id=query_id, text="what does a release hold?", origin=QueryOrigin.real)])
            rows.add_judgments(db, [Judgment(judgment_id=f"h-{query_id}", query_id=query_id, grade=2,
                                             chunk_id=longest.chunk_id, source=JudgmentSource.human, reviewer="ann",
                                             status=JudgmentStatus.final)])  # fmt: skip
        write_release(ws, version)


def test_remap_to_much_smaller_chunks_queues_the_labels_it_cannot_place_for_review_instead_of_dropping_them(
    two_chunkings, tmp_path, capsys
):
    from testset_builder.stages import review
    from testset_builder.store import review as review_store

    source, _ = two_chunkings
    released_with_a_label_on_the_longest_chunk(source, "real-2", "1.1.0")
    small = tmp_path / "small"
    with open_workspace(small) as ws:
        ingest(ws, load_sources([DOCS]), ChunkingConfig(chunker="recursive", size=120, overlap=0), [DOCS])
    code, result = run_json(
        capsys, "remap", "--release", f"{source}@1.1.0", "--to-workspace", str(small), "--version", "1.0.0"
    )
    assert code == 0, result
    counts = result["counts"]
    ambiguous = [row for row in result["outcomes"] if row["outcome"] == "ambiguous"]
    assert any(row["query_id"] == "real-2" for row in ambiguous)  # the human label on a 600-char chunk
    assert counts["ambiguous"] == len(ambiguous) and counts["proposals_queued"] >= len(ambiguous)
    with open_workspace(small) as ws:
        items = [i for i in review_store.queued_items(ws.db, kind="pair") if i.reason.startswith("remap from")]
        assert len(items) == counts["proposals_queued"] and {i.query_id for i in items} >= {"real-2"}
        item = next(i for i in items if i.query_id == "real-2")
        review.submit(ws, "ann", item.item_id, "grade", "k1", grade=2)  # a reviewer settles one
    code, _ = run_json(capsys, "release", "--version", "1.1.0", "--workspace", str(small))
    assert code == 0
    assert load_release(small / "releases" / "1.1.0").qrels["real-2"][item.chunk_id] == 2


def test_remap_refuses_an_existing_version_an_unknown_release_and_an_older_release_without_meta(
    two_chunkings, capsys, tmp_path
):
    source, other = two_chunkings
    args = ["--to-workspace", str(other), "--version", "2.0.0"]
    assert run_json(capsys, "remap", "--release", f"{source}@1.0.0", *args)[0] == 0
    code, error = run_json(capsys, "remap", "--release", f"{source}@1.0.0", *args)
    assert code == 1 and "already exists" in error["error"]
    code, error = run_json(capsys, "remap", "--release", f"{source}@9.9.9", *args[:2], "--version", "3.0.0")
    assert code == 1 and "9.9.9" in error["error"]
    older = tmp_path / "older" / "releases" / "1.0.0"
    shutil.copytree(source / "releases" / "1.0.0", older)
    shutil.rmtree(older / "meta")
    manifest = json.loads((older / "manifest.json").read_text(encoding="utf-8"))
    manifest["files"] = {name: sha for name, sha in manifest["files"].items() if not name.startswith("meta/")}
    (older / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    code, error = run_json(capsys, "remap", "--release", str(older), *args[:2], "--version", "3.0.0")
    assert code == 1 and "no meta/chunks.jsonl" in error["error"]


def test_a_second_remap_of_one_parent_into_one_workspace_needs_the_same_policy_and_then_stores_nothing_twice(
    two_chunkings, capsys
):
    """Another --min-coverage into the same workspace would leave the first remap's labels beside the second's (a
    chunk the stricter rule drops keeping its grade), so it is refused; the same remap again adds nothing."""
    source, other = two_chunkings
    parent = ["--release", f"{source}@1.0.0", "--to-workspace", str(other)]
    code, first = run_json(capsys, "remap", *parent, "--version", "2.0.0", "--min-coverage", "0.3")
    assert code == 0
    first_counts = first["counts"]
    with open_workspace(other, create=False) as ws:
        judged = len(list(rows.iter_judgments(ws.db)))

    code, error = run_json(capsys, "remap", *parent, "--version", "3.0.0")
    assert code == 1 and "would mix the two" in error["error"] and "min_coverage" in error["error"]
    code, again = run_json(capsys, "remap", *parent, "--version", "3.0.0", "--min-coverage", "0.3")
    assert code == 0 and again["counts"] == first_counts
    with open_workspace(other, create=False) as ws:
        assert len(list(rows.iter_judgments(ws.db))) == judged
    earlier, later = (load_release(other / "releases" / v) for v in ("2.0.0", "3.0.0"))
    assert earlier.qrels == later.qrels


def test_remap_into_a_workspace_without_the_documents_says_to_chunk_them_there_first(two_chunkings, capsys, tmp_path):
    source, _ = two_chunkings
    release = ["remap", "--release", f"{source}@1.0.0", "-v", "1.0.0"]
    empty = tmp_path / "empty"
    open_workspace(empty).close()
    code, error = run_json(capsys, *release, "--to-workspace", str(empty))
    assert code == 1 and "chunk the same corpus into it first" in error["error"]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"_id": "unrelated", "text": "Another corpus altogether."}) + "\n", encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    with open_workspace(elsewhere) as ws:
        ingest(ws, load_sources([corpus]), ChunkingConfig(chunker="recursive", size=300, overlap=0))
    code, error = run_json(capsys, *release, "--to-workspace", str(elsewhere))
    assert code == 1 and "the target workspace lacks" in error["error"] and "labelled documents" in error["error"]
    assert not (elsewhere / "releases").exists()  # refused before writing anything
    with open_workspace(elsewhere) as ws:
        assert not list(rows.iter_judgments(ws.db))


# SciFact chunked two ways ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_scifact_labelled_at_128_tokens_and_remapped_to_512_keeps_a_label_on_every_relevant_document(
    scifact_dir, tmp_path, capsys
):
    loaded = load_sources([scifact_dir])
    small, large = tmp_path / "t128", tmp_path / "t512"
    with open_workspace(small) as ws:
        ingest(ws, loaded, ChunkingConfig(chunker="tokens", size=128, overlap=0))
        texts = {}
        for line in (scifact_dir / "queries.jsonl").read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            texts[record["_id"]] = record["text"]
        with (scifact_dir / "qrels" / "test.tsv").open(encoding="utf-8") as handle:
            relevant = [
                (r["query-id"], r["corpus-id"], int(r["score"])) for r in csv.DictReader(handle, delimiter="\t")
            ]
        labels = []
        for query_id, doc_id, score in relevant:  # SciFact's human labels, on every chunk of the relevant document
            for chunk in rows.live_chunks_of(ws.db, doc_id):
                labels.append(
                    Judgment(
                        judgment_id=f"scifact-{query_id}-{chunk.chunk_id}", query_id=query_id,
                        chunk_id=chunk.chunk_id, grade=score, source=JudgmentSource.human, reviewer="scifact",
                        status=JudgmentStatus.final,
                    )
                )  # fmt: skip
        queries = [
            Query(query_id=q, text=texts[q], origin=QueryOrigin.real) for q in sorted({q for q, _, _ in relevant})
        ]
        with ws.transaction() as db:
            rows.put_queries(db, queries)
            rows.add_judgments(db, labels)
        small_chunks = len(rows.live_chunk_rows(ws.db))
        write_release(ws, "1.0.0")
    with open_workspace(large) as ws:
        ingest(ws, loaded, ChunkingConfig(chunker="tokens", size=512, overlap=64))
        large_chunks = len(rows.live_chunk_rows(ws.db))

    code, result = run_json(capsys, "remap", "--release", f"{small}@1.0.0", "--to-workspace", str(large), "-v", "1.0.0")
    assert code == 0, result
    counts = result["counts"]
    remapped = load_release(large / "releases" / "1.0.0")
    labelled_documents = {
        (query_id, remapped.chunk_spans[chunk_id]["doc_id"])
        for query_id, chunks in remapped.qrels.items()
        for chunk_id, grade in chunks.items()
        if grade >= 1
    }
    lost_documents = sorted({(q, d) for q, d, _ in relevant} - labelled_documents)
    print(
        f"\nSciFact remap 128 -> 512/64 tokens: {small_chunks} -> {large_chunks} chunks; {len(labels)} labelled chunks "
        f"of {len(relevant)} relevant (query, document) pairs; one-to-one {counts['one_to_one']}, split "
        f"{counts['split']}, merged {counts['merged']}, lost {counts['lost']}; {counts['new_labels']} new labels "
        f"({counts['new_labels_merged']} merged); relevant documents that lost their label: {len(lost_documents)}"
    )
    assert counts["labels"] == len(labels) and counts["lost"] == 0
    assert not lost_documents, f"relevant documents lost their label: {lost_documents[:5]}"
    assert counts["split"] > 0 and counts["merged"] > 0  # a real re-chunking: both happen
    assert remapped.manifest["counts"]["qrels_by_origin"]["human"] == counts["new_labels"]


def test_a_proposal_is_kept_where_another_label_places_a_lower_grade_on_the_same_chunk():
    release = release_of({"a": (0, 100), "b": (0, 300)}, {"q": {"a": 0, "b": 2}})
    result = plan(release, [(0, 100), (100, 200), (200, 300), (300, 500)])
    outcomes = {o.chunk_id: o.outcome for o in result.outcomes}
    assert outcomes == {"a": "one-to-one", "b": "ambiguous"}
    assert [(label.chunk.chunk_id, label.grade) for label in result.labels] == [("n0", 0)]
    # n0 holds a grade-0 label, but the grade-2 label around it may make it relevant: a reviewer decides
    assert sorted(p.chunk_id for p in result.proposals) == ["n0", "n1", "n2"]


def test_after_a_remap_where_every_label_was_ambiguous_a_lower_min_coverage_can_still_be_tried(tmp_path, capsys):
    source, target = tmp_path / "source", tmp_path / "target"
    with open_workspace(source) as ws:
        ingest(ws, load_sources([DOCS]), ChunkingConfig(chunker="markdown", size=600, overlap=60), [DOCS])
    released_with_a_label_on_the_longest_chunk(source, "real-1", "1.0.0")
    with open_workspace(target) as ws:
        ingest(ws, load_sources([DOCS]), ChunkingConfig(chunker="recursive", size=120, overlap=0), [DOCS])
    remap = ["remap", "--release", f"{source}@1.0.0", "--to-workspace", str(target), "--version", "1.0.0"]
    code, result = run_json(capsys, *remap)
    assert code == 1 and "queued for review" in result["error"] and "--min-coverage" in result["error"]
    code, result = run_json(capsys, *remap, "--min-coverage", "0.1")
    assert code == 0, result
    assert result["counts"]["new_labels"] >= 1 and result["counts"]["ambiguous"] == 0
