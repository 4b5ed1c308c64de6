"""Release: the policy that resolves judgments, the files a release holds, reproducibility, diff, export, push."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fake_provider import FakeProvider, question_words
from hub_server import HubServer

from testset_builder import load
from testset_builder.cli import main
from testset_builder.config import SynthesizeConfig
from testset_builder.errors import InputError
from testset_builder.export import read_qrels
from testset_builder.llm import LLMClient
from testset_builder.llm.roles import Roles
from testset_builder.metrics import evaluate
from testset_builder.records import Judgment, JudgmentSource, JudgmentStatus, Query, QueryOrigin
from testset_builder.retrieval import BM25Index
from testset_builder.stages import release as release_stage
from testset_builder.stages.release import ReleasePolicy, diff_releases, load_release, resolve, write_release
from testset_builder.stages.synthesize import synthesize
from testset_builder.store import open_workspace, rows

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def judgment(
    jid, grade, source, *, q="q", c="c", reviewer=None, status=JudgmentStatus.pending, supersedes=None, minutes=0
):
    return Judgment(
        judgment_id=jid,
        query_id=q,
        chunk_id=c,
        grade=grade,
        source=source,
        reviewer=reviewer,
        status=status,
        supersedes=supersedes,
        created_at=T0 + timedelta(minutes=minutes),
    )


# the policy ----------------------------------------------------------------------------------------------------
def test_a_human_verdict_wins_over_synthetic_and_llm_labels():
    log = [
        judgment("s", 2, JudgmentSource.synthetic_source),
        judgment("l", 2, JudgmentSource.llm),
        judgment("h", 0, JudgmentSource.human, reviewer="ann", status=JudgmentStatus.rejected, minutes=5),
    ]
    assert [(q.grade, q.origin) for q in resolve(log)] == [(0, "human")]


def test_reviewers_majority_decides_and_a_tie_goes_to_the_adjudicator_else_the_latest():
    votes = [
        judgment("a", 2, JudgmentSource.human, reviewer="ann"),
        judgment("b", 1, JudgmentSource.human, reviewer="bob", minutes=1),
        judgment("c", 2, JudgmentSource.human, reviewer="cy", minutes=2),
    ]
    assert resolve(votes)[0].grade == 2
    tie = votes[:2]
    assert resolve(tie)[0].grade == 1  # the latest verdict
    assert resolve(tie, ReleasePolicy(adjudicator="ann"))[0].grade == 2
    changed_mind = [*tie, judgment("a2", 1, JudgmentSource.human, reviewer="ann", minutes=9)]
    assert resolve(changed_mind)[0].grade == 1  # each reviewer's latest verdict is their vote


def test_unverified_llm_proposals_are_left_out_unless_asked_for_and_then_marked():
    log = [
        judgment("l1", 1, JudgmentSource.llm),
        judgment("l2", 2, JudgmentSource.llm, minutes=3),
        judgment("x", 1, JudgmentSource.llm, c="d"),
        judgment("y", 2, JudgmentSource.llm, c="d", supersedes="x"),
    ]
    assert resolve(log) == []
    included = resolve(log, ReleasePolicy(include_unverified=True))
    assert [(q.chunk_id, q.grade, q.origin) for q in included] == [
        ("c", 2, "llm-unverified"),
        ("d", 2, "llm-unverified"),
    ]


# a workspace with synthetic, real and reviewed labels ------------------------------------------------------------
def answer(request):

    words = question_words(request.prompt.rsplit("Document: ", 1)[-1])[: 3 + request.seed % 3]
    return f" how does {' '.join(words).lower()} work number {request.seed % 89}?"


@pytest.fixture
def workspace(docs_workspace):
    """The docs, six synthetic questions, and a real query with a reviewed and an unreviewed LLM proposal."""
    ws = docs_workspace
    settings = SynthesizeConfig(questions=6, styles={"natural": 1.0}, critic=False, mine=False)
    asyncio.run(synthesize(ws, Roles.single(LLMClient(FakeProvider(answer), ws, "synthesize"), "fake-model"), settings))
    chunk_ids, _ = rows.live_chunk_passages(ws.db)
    with ws.transaction() as db:
        rows.put_queries(db, [Query(query_id="real-1", text="how is ndcg computed", origin=QueryOrigin.real)])
        rows.add_judgments(
            db,
            [
                judgment("p1", 2, JudgmentSource.llm, q="real-1", c=chunk_ids[0]),
                judgment(
                    "h1",
                    1,
                    JudgmentSource.human,
                    q="real-1",
                    c=chunk_ids[0],
                    reviewer="ann",
                    status=JudgmentStatus.regraded,
                    supersedes="p1",
                    minutes=1,
                ),
                judgment("p2", 1, JudgmentSource.llm, q="real-1", c=chunk_ids[1]),
            ],
        )
    return ws


def beir_reader(folder: Path) -> tuple[dict, dict, dict]:
    """A BEIR-style loader, written as BEIR's GenericDataLoader reads: corpus and queries JSONL, qrels TSV."""
    corpus = {
        r["_id"]: {"title": r.get("title", ""), "text": r["text"]}
        for r in map(json.loads, (folder / "corpus.jsonl").read_text().splitlines())
    }
    queries = {r["_id"]: r["text"] for r in map(json.loads, (folder / "queries.jsonl").read_text().splitlines())}
    qrels: dict = {}
    for line in (folder / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        q, c, s = line.split("\t")
        qrels.setdefault(q, {})[c] = int(s)
    return corpus, queries, qrels


def test_a_release_round_trips_through_datasets_beir_and_trec(workspace, tmp_path):
    from datasets import load_dataset

    summary = write_release(workspace, "1.0.0")
    path = Path(summary.path)
    counts = summary.counts
    assert counts["qrels_by_origin"] == {"human": 1, "synthetic-source": 6, "llm-unverified": 0} and counts[
        "queries_by_origin"
    ] == {"real": 1, "synthetic": 6}
    released = load_release(path)
    qrels = load_dataset(str(path), "default", split="test", cache_dir=str(tmp_path / "hf-cache"))
    assert qrels.column_names == ["query-id", "corpus-id", "score"] and qrels.features["score"].dtype == "int64"
    assert {(r["query-id"], r["corpus-id"], r["score"]) for r in qrels} == {
        (q, c, g) for q, cs in released.qrels.items() for c, g in cs.items()
    }
    corpus = load_dataset(str(path), "corpus", split="corpus", cache_dir=str(tmp_path / "hf-cache"))
    queries = load_dataset(str(path), "queries", split="queries", cache_dir=str(tmp_path / "hf-cache"))
    assert {r["_id"]: r["text"] for r in corpus} == {k: v["text"] for k, v in released.corpus.items()}
    assert {r["_id"]: r["text"] for r in queries} == released.queries
    assert len(corpus) == len(rows.live_chunk_passages(workspace.db)[0])
    beir_corpus, beir_queries, beir_qrels = beir_reader(path / "beir")
    assert beir_corpus == released.corpus and beir_queries == released.queries and beir_qrels == released.qrels
    assert released.qrels["real-1"] == {
        rows.live_chunk_passages(workspace.db)[0][0]: 1
    }  # the reviewer's regrade, not the proposal


def test_a_release_says_where_each_chunk_lies_in_its_document_and_where_each_question_came_from(workspace):
    summary = write_release(workspace, "1.0.0")
    released = load_release(summary.path)

    assert set(released.chunk_spans) == set(released.corpus)
    for chunk_id, span in released.chunk_spans.items():
        document = rows.get_document(workspace.db, span["doc_id"])
        assert document.text[span["start"] : span["end"]] == released.corpus[chunk_id]["text"]
    assert released.query_meta["real-1"] == {"origin": "real"} and released.source_document("real-1") is None
    synthetic = [q for q, meta in released.query_meta.items() if meta["origin"] == "synthetic"]
    assert len(synthetic) == 6
    for query_id in synthetic:
        source = released.query_meta[query_id]["source_chunk_id"]
        assert released.source_document(query_id) == rows.get_chunk(workspace.db, source).doc_id


def test_trec_qrels_of_a_release_score_identically_with_pytrec_eval_and_ours(workspace):
    import pytrec_eval

    path = Path(write_release(workspace, "1.0.0").path)
    released = load_release(path)
    ids, passages = rows.live_chunk_passages(workspace.db)
    run = BM25Index(ids, passages).search(list(released.queries), list(released.queries.values()), k=20)
    trec_qrels = read_qrels(path / "qrels.trec")
    ours = evaluate(trec_qrels, run, "ndcg@10,recall@10,map").per_query_dict()
    theirs = pytrec_eval.RelevanceEvaluator(trec_qrels.to_dict(), {"ndcg_cut", "recall", "map"}).evaluate(run.to_dict())
    for query_id, values in theirs.items():
        assert ours[query_id]["ndcg@10"] == pytest.approx(values["ndcg_cut_10"], abs=1e-12)
        assert ours[query_id]["recall@10"] == pytest.approx(values["recall_10"], abs=1e-12)
        assert ours[query_id]["map"] == pytest.approx(values["map"], abs=1e-12)


def test_two_releases_of_the_same_state_are_byte_identical_and_a_flipped_grade_changes_hash_and_diff(workspace, capsys):
    first, second = write_release(workspace, "1.0.0"), write_release(workspace, "1.0.1")
    assert first.content_sha256 == second.content_sha256 and second.same_as_parent and second.parent_version == "1.0.0"
    a, b = (
        json.loads((Path(first.path) / "manifest.json").read_text()),
        json.loads((Path(second.path) / "manifest.json").read_text()),
    )
    assert a["files"] == b["files"]  # every parquet, JSONL, TSV and TREC file: same bytes
    synthetic_label = next(j for j in rows.iter_judgments(workspace.db) if j.source is JudgmentSource.synthetic_source)
    with workspace.transaction() as db:
        rows.add_judgments(
            db,
            [
                judgment(
                    "flip",
                    1,
                    JudgmentSource.human,
                    q=synthetic_label.query_id,
                    c=synthetic_label.chunk_id,
                    reviewer="bob",
                    status=JudgmentStatus.regraded,
                    supersedes=synthetic_label.judgment_id,
                )
            ],
        )
    third = write_release(workspace, "1.1.0")
    assert third.content_sha256 != first.content_sha256 and not third.same_as_parent and third.parent_version == "1.0.1"
    changes = diff_releases(load_release(first.path), load_release(third.path))
    assert changes.qrels_regraded == [(synthetic_label.query_id, synthetic_label.chunk_id, 2, 1)]
    assert not changes.qrels_added and not changes.qrels_removed and not changes.queries_added
    assert main(["diff", "1.0.0", "1.1.0", "--workspace", str(workspace.root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["qrels_regraded"] == [
        [synthetic_label.query_id, synthetic_label.chunk_id, 2, 1]
    ]
    assert main(["diff", "1.0.0", "1.0.1", "--workspace", str(workspace.root)]) == 0
    assert "no change" in capsys.readouterr().out


def test_versions_are_semantic_and_immutable(workspace, capsys):
    write_release(workspace, "1.0.0")
    with pytest.raises(InputError, match="already exists and releases are immutable"):
        write_release(workspace, "1.0.0")
    with pytest.raises(InputError, match="not semantic"):
        write_release(workspace, "v2")
    for almost in ("1.0.0\n", "1.0.0 ", "01.0.0", "1.0"):  # a trailing newline once made a second 1.0.0 directory
        with pytest.raises(InputError, match="not semantic"):
            write_release(workspace, almost)
    assert sorted(p.name for p in workspace.releases_dir.iterdir()) == ["1.0.0"]
    assert main(["release", "--version", "1.0.0", "--workspace", str(workspace.root)]) == 1
    assert "immutable" in capsys.readouterr().err


def test_a_crash_while_writing_leaves_no_half_release(workspace, monkeypatch):
    import testset_builder.stages.release.writer as writer

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("simulated crash")

    monkeypatch.setattr(writer, "write_hf", crash)
    with pytest.raises(KeyboardInterrupt):
        write_release(workspace, "1.0.0")
    assert not (workspace.releases_dir / "1.0.0").exists() and not list(workspace.releases_dir.glob(".partial-*"))
    assert release_stage.existing_versions(workspace) == []
    monkeypatch.undo()
    assert write_release(workspace, "1.0.0").version == "1.0.0"


def test_a_tampered_release_is_refused_when_loaded(workspace):
    path = Path(write_release(workspace, "1.0.0").path)
    with (path / "beir" / "qrels" / "test.tsv").open("a") as handle:
        handle.write("q\tc\t2\n")
    with pytest.raises(InputError, match="does not match the sha256"):
        load(path)


def test_unverified_proposals_can_be_released_marked(workspace):
    summary = write_release(workspace, "0.1.0", ReleasePolicy(include_unverified=True))
    assert summary.counts["qrels_by_origin"]["llm-unverified"] == 1
    manifest = json.loads((Path(summary.path) / "manifest.json").read_text())
    assert (
        manifest["policy"]["include_unverified"]
        and manifest["lineage"]["prompts"][0]["name"] == "synthesize/completion-natural"
    )
    card = (Path(summary.path) / "README.md").read_text()
    assert "config_name: default" in card and "text-retrieval" in card and "1 llm-unverified" in card


def test_score_and_export_use_a_release_directly(workspace, tmp_path, capsys):
    main(["release", "--version", "1.0.0", "--workspace", str(workspace.root), "--json"])
    capsys.readouterr()
    path = workspace.releases_dir / "1.0.0"
    released = load_release(path)
    ids, passages = rows.live_chunk_passages(workspace.db)
    from testset_builder.export import write_trec_run

    write_trec_run(
        BM25Index(ids, passages).search(list(released.queries), list(released.queries.values()), k=10),
        tmp_path / "bm25.trec",
    )
    run = str(tmp_path / "bm25.trec")
    scored = ["score", "--run", run, "--json", "--no-ci"]
    assert main([*scored, "--release", f"{workspace.root}@1.0.0"]) == 0
    clustered = json.loads(capsys.readouterr().out)
    assert main([*scored, "--release", f"{workspace.root}@1.0.0", "--cluster-by", "query"]) == 0
    by_release = json.loads(capsys.readouterr().out)
    assert main([*scored, "--qrels", str(path / "qrels.trec"), "--cluster-by", "query"]) == 0
    from_file = json.loads(capsys.readouterr().out)
    about_release = by_release.pop("synthetic_audit")  # what the release says of its unchecked synthetic labels
    # only the release knows which questions are synthetic and their sources: leakage and ambiguity need them
    questions, from_qrels = by_release.pop("question_diagnostics"), from_file.pop("question_diagnostics")
    assert questions["synthetic"] > 0 and from_qrels["synthetic"] == 0
    assert (
        questions["too_easy"] == from_qrels["too_easy"] and questions["by_chunk_count"] == from_qrels["by_chunk_count"]
    )
    assert from_file == by_release  # the same figures from the release or its qrels file
    assert about_release["unchecked"] > 0 and "synthetic labels unchecked" in about_release["statement"]
    # only the release knows which document each question came from: its questions cluster by it
    assert (
        clustered["clusters"]["by"] == "document"
        and clustered["clusters"]["clusters"]
        == len({released.source_document(q) or q for q in released.qrels})
        < by_release["clusters"]["clusters"]
    )
    for fmt, expected in {
        "hf": "hf/qrels/test-*.parquet",
        "beir": "qrels/test.tsv",
        "trec": "qrels.trec",
        "jsonl": "qrels.jsonl",
    }.items():
        assert (
            main(
                [
                    "export",
                    "--version",
                    "1.0.0",
                    "--format",
                    fmt,
                    "--out",
                    str(tmp_path / fmt),
                    "--workspace",
                    str(workspace.root),
                ]
            )
            == 0
        )
        (exported,) = (tmp_path / fmt).glob(expected)
        if fmt == "hf":
            import pyarrow.parquet as pq

            table = pq.read_table(exported).to_pylist()
            got = {}
            for row in table:
                got.setdefault(row["query-id"], {})[row["corpus-id"]] = row["score"]
        else:
            got = read_qrels(exported).to_dict()
        assert got == released.qrels, fmt  # the labels themselves, not only a file of the right name
    assert (
        main(
            [
                "export",
                "--version",
                "1.0.0",
                "--format",
                "hf",
                "--out",
                str(tmp_path / "hf"),
                "--workspace",
                str(workspace.root),
            ]
        )
        == 1
    )


def test_push_uploads_the_release_and_tags_the_commit_on_the_hub(workspace, monkeypatch, capsys):
    import huggingface_hub.constants

    write_release(workspace, "1.0.0")
    # offline as the environment says (huggingface_hub reads it once, at its import, which may precede this test)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    assert (
        main(["push", "--version", "1.0.0", "--repo-id", "acme/docs-testset", "--workspace", str(workspace.root)]) == 1
    )
    assert "HF_HUB_OFFLINE is set" in capsys.readouterr().err
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # the test hub is on 127.0.0.1
    with HubServer(token="hf_test_PLANTED_token") as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_TOKEN", "hf_test_PLANTED_token")
        assert (
            main(
                [
                    "push",
                    "--version",
                    "1.0.0",
                    "--repo-id",
                    "acme/docs-testset",
                    "--workspace",
                    str(workspace.root),
                    "--private",
                    "--json",
                ]
            )
            == 0
        )
        result = json.loads(capsys.readouterr().out)
        pulled = load("acme/docs-testset@v1.0.0")  # downloaded at the tag, every file checked against the manifest
        assert pulled.qrels == load_release(workspace.releases_dir / "1.0.0").qrels and pulled.version == "1.0.0"
        monkeypatch.setenv("HF_TOKEN", "wrong")
        assert (
            main(["push", "--version", "1.0.0", "--repo-id", "acme/docs-testset", "--workspace", str(workspace.root)])
            == 1
        )
        assert "401" in capsys.readouterr().err
    assert (
        hub.repos["acme/docs-testset"]["type"] == "dataset"
        and hub.repos["acme/docs-testset"]["visibility"] == "private"
    )
    (commit,) = hub.commits
    manifest = json.loads((workspace.releases_dir / "1.0.0" / "manifest.json").read_text())
    assert set(commit["files"]) == set(manifest["files"]) | {"manifest.json", "README.md"}
    (qrels_file,) = (workspace.releases_dir / "1.0.0" / "hf" / "qrels").glob("test-*.parquet")
    assert commit["files"][f"hf/qrels/{qrels_file.name}"] == qrels_file.read_bytes()
    assert "config_name: default" in hub.validated[0]["content"]
    assert hub.tags["v1.0.0"]["revision"] == commit["oid"] == result["commit"] and result["tag"] == "v1.0.0"
    assert all(
        "PLANTED" not in str(p.read_bytes()) for p in (workspace.releases_dir / "1.0.0").rglob("*") if p.is_file()
    )


# import, baseline, bump -------------------------------------------------------------------------------------------
def test_a_beir_folder_imports_as_human_labels_and_releases_the_same_qrels(scifact_dir, tmp_path, capsys):
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    qrels = read_qrels(scifact_dir / "qrels" / "test.tsv").to_dict()
    chosen = sorted(qrels, key=int)[:10]
    relevant = {d for q in chosen for d in qrels[q]}
    with (scifact_dir / "corpus.jsonl").open(encoding="utf-8") as source:
        lines = [line for i, line in enumerate(source) if json.loads(line)["_id"] in relevant or i < 100]
    (folder / "corpus.jsonl").write_text("".join(lines), encoding="utf-8")
    texts = {q["_id"]: q["text"] for q in map(json.loads, (scifact_dir / "queries.jsonl").open(encoding="utf-8"))}
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": texts[q]}) + "\n" for q in chosen), encoding="utf-8"
    )
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q in chosen for d, g in qrels[q].items()),
        encoding="utf-8",
    )
    workspace = tmp_path / "ws"
    assert main(["import", str(folder), "--workspace", str(workspace), "--version", "1.0.0", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (
        report["documents"] == len(lines)
        and report["labels"] == sum(len(qrels[q]) for q in chosen)
        and report["release"]["counts"]["qrels_by_origin"]["human"] == report["labels"]
    )
    released = load_release(workspace / "releases" / "1.0.0")
    assert released.qrels == {q: qrels[q] for q in chosen} and set(released.corpus) == {
        json.loads(line)["_id"] for line in lines
    }
    assert main(["import", str(folder), "--workspace", str(workspace), "--json"]) == 0  # again: nothing new
    assert json.loads(capsys.readouterr().out)["new_labels"] == 0
    # the release itself (MTEB layout) imports into another workspace with the same labels
    assert (
        main(
            [
                "import",
                str(workspace / "releases" / "1.0.0"),
                "--workspace",
                str(tmp_path / "ws2"),
                "--version",
                "1.0.0",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["kind"] == "hf"
    assert load_release(tmp_path / "ws2" / "releases" / "1.0.0").qrels == released.qrels


def test_trec_qrels_import_needs_known_chunks_and_the_query_texts(workspace, tmp_path, capsys):
    ids, _ = rows.live_chunk_passages(workspace.db)
    (tmp_path / "q.trec").write_text(f"t1 0 {ids[0]} 3\nt1 0 {ids[1]} 0\n", encoding="utf-8")
    (tmp_path / "q.tsv").write_text("id\ttext\nt1\twhat is recall\n", encoding="utf-8")
    assert main(["import", str(tmp_path / "q.trec"), "--workspace", str(workspace.root)]) == 1
    assert "--queries" in capsys.readouterr().err
    assert (
        main(
            [
                "import",
                str(tmp_path / "q.trec"),
                "--workspace",
                str(workspace.root),
                "--queries",
                str(tmp_path / "q.tsv"),
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["clamped_grades"] == 1
    (tmp_path / "bad.trec").write_text("t1 0 nope 1\n", encoding="utf-8")
    assert (
        main(
            [
                "import",
                str(tmp_path / "bad.trec"),
                "--workspace",
                str(workspace.root),
                "--queries",
                str(tmp_path / "q.tsv"),
            ]
        )
        == 1
    )
    assert "unknown chunk" in capsys.readouterr().err


def test_bump_picks_the_next_version_and_a_baseline_scores_against_latest(workspace, tmp_path, capsys):
    assert main(["release", "--bump", "minor", "--workspace", str(workspace.root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == "0.1.0"
    assert main(["release", "--bump", "patch", "--workspace", str(workspace.root)]) == 0  # nothing changed
    assert "nothing changed since 0.1.0: no release written" in " ".join(capsys.readouterr().out.split())
    assert not (workspace.root / "releases" / "0.1.1").exists()
    assert main(["release", "--bump", "patch", "--force", "--workspace", str(workspace.root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == "0.1.1"
    assert main(["release", "--workspace", str(workspace.root)]) == 1
    spec = f"{workspace.root}@latest"
    assert main(["baseline", "--release", spec, "--out", str(tmp_path / "bm25.trec"), "--k", "10"]) == 0
    assert (
        main(
            [
                "score",
                "--release",
                spec,
                "--run",
                str(tmp_path / "bm25.trec"),
                "--json",
                "--no-ci",
                "--metrics",
                "recall@10",
            ]
        )
        == 0
    )
    scored = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert 0.0 < scored["metrics"]["recall@10"]["mean"] <= 1.0


@pytest.mark.slow
def test_the_whole_public_scifact_imports_with_its_queries_that_share_a_text_kept_apart(scifact_dir, tmp_path, capsys):
    texts = {q["_id"]: q["text"] for q in map(json.loads, (scifact_dir / "queries.jsonl").open(encoding="utf-8"))}
    assert texts["870"] == texts["871"] and texts["85"] == texts["86"]  # the public data has such pairs
    workspace = tmp_path / "ws"
    assert main(["import", str(scifact_dir), "--workspace", str(workspace), "--version", "1.0.0", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    expected = read_qrels(scifact_dir / "qrels" / "test.tsv").to_dict()
    assert report["documents"] == 5183 and report["labels"] == sum(len(v) for v in expected.values()) == 339
    released = load_release(workspace / "releases" / "1.0.0")
    assert released.qrels == expected and len(released.queries) == 300
    assert all(released.queries[q] == texts[q] for q in released.queries)


def test_two_workspaces_releases_of_one_version_load_their_own_rows_through_datasets_in_one_process(tmp_path):
    import datasets

    from testset_builder.records import Chunk, Document, Judgment, JudgmentSource, JudgmentStatus, Query, QueryOrigin

    expected = {}
    for name, size in (("team-a", 3), ("team-b", 5)):
        with open_workspace(tmp_path / name) as ws:
            with ws.transaction() as db:
                ids = [f"{name}-{i}" for i in range(size)]
                rows.put_documents(db, [Document(doc_id=i, text=f"text of {i}") for i in ids])
                rows.put_chunks(
                    db,
                    [Chunk(chunk_id=i, doc_id=i, text=f"text of {i}", start=0, end=len(f"text of {i}")) for i in ids],
                )
                rows.put_queries(db, [Query(query_id="q", text="which text?", origin=QueryOrigin.real)])
                label = Judgment(
                    judgment_id="j", query_id="q", chunk_id=ids[0], grade=2, source=JudgmentSource.human, reviewer="r",
                    status=JudgmentStatus.final,
                )  # fmt: skip
                rows.add_judgments(db, [label])
            write_release(ws, "1.0.0")
        expected[name] = ids
    for name, ids in expected.items():  # the same folder name, 1.0.0, and the same configs: still their own rows
        corpus = datasets.load_dataset(str(tmp_path / name / "releases" / "1.0.0"), "corpus", split="corpus")
        assert sorted(corpus["_id"]) == ids
