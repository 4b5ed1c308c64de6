"""Synthesize: sampling, filters and labels with a scripted provider; the real local model on SciFact chunks."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from pathlib import Path

import pytest
from conftest import answered_requests
from fake_provider import FakeProvider, digit_completion, passage_of, question_words, shared_words_grade

from testset_builder.cli import main
from testset_builder.config import ChunkingConfig, SynthesizeConfig
from testset_builder.corpus.ingest import ingest
from testset_builder.corpus.loaders import load_sources
from testset_builder.corpus.sampling import (
    SourceChunk,
    allocate_styles,
    eligible_chunks,
    skip_reason,
    slot_seed,
    stratified_sample,
)
from testset_builder.errors import InputError, ProviderError
from testset_builder.llm import LLMClient
from testset_builder.llm.roles import Roles
from testset_builder.prompts import load_prompt
from testset_builder.questions import NearDuplicates, clean, lexical_overlap, validation_problem
from testset_builder.stages.synthesize import synthesize
from testset_builder.store import open_workspace, rows
from testset_builder.store import review as review_store

DOCS = Path(__file__).resolve().parents[1] / "examples" / "corpus"
LONG = (
    "Recall at k counts the relevant chunks that a retriever returns among its first k results for a query. It ignores "
    "their order inside the cut-off, which is why teams pair it with nDCG when ranking quality matters to readers."
)


# sampling and filters -----------------------------------------------------------------------------------------
def test_short_boilerplate_and_duplicate_chunks_are_not_sampled():
    chunks = [
        SourceChunk("a#1", "a", LONG),
        SourceChunk("a#2", "a", "Too short."),
        SourceChunk("b#1", "b", "| 1 | 2 | 3 |\n" * 40),
        SourceChunk(
            "b#2", "b", "Copyright 2024. All rights reserved.\nPrivacy policy | Terms of use | Cookie settings\n" * 5
        ),
        SourceChunk("c#1", "c", LONG),
    ]
    kept, skipped = eligible_chunks(chunks, {"a#1": "g", "c#1": "g"}, min_chars=100)
    assert [c.chunk_id for c in kept] == ["a#1"] and skipped == {"short": 1, "boilerplate": 2, "duplicate": 1}
    assert skip_reason(LONG, 100) is None


def test_the_sample_spreads_over_documents_is_seeded_and_honours_the_cap():
    chunks = [SourceChunk(f"big#{i}", "big", LONG) for i in range(20)] + [
        SourceChunk(f"d{j}#0", f"d{j}", LONG) for j in range(4)
    ]
    sample = stratified_sample(chunks, 8, seed=1)
    assert len(sample) == 8 and {c.doc_id for c in sample} == {"big", "d0", "d1", "d2", "d3"}
    assert [c.doc_id for c in sample].count("big") == 4 and sample == stratified_sample(chunks, 8, seed=1)
    assert stratified_sample(chunks, 8, seed=2) != sample
    capped = stratified_sample(chunks, 20, seed=1, per_document_cap=2)
    assert len(capped) == 6 and [c.doc_id for c in capped].count("big") == 2


def test_styles_are_allocated_exactly_in_proportion():
    labels = allocate_styles(
        [f"c{i}" for i in range(10)], {"natural": 0.4, "keyword": 0.2, "paraphrase": 0.2, "multi": 0.2}, seed=0
    )
    assert len(labels) == 10 and {s: labels.count(s) for s in set(labels)} == {
        "natural": 4,
        "keyword": 2,
        "paraphrase": 2,
        "multi": 2,
    }
    assert len(allocate_styles([f"c{i}" for i in range(7)], {"natural": 1, "keyword": 1}, seed=0)) == 7


def test_generated_questions_are_cleaned_and_validated():
    assert clean('  1. "What is recall@k?"\nextra line') == "What is recall@k?"
    assert clean("Relevant Query: how is ndcg computed") == "how is ndcg computed"
    passage = "Recall at k counts the relevant chunks a retriever returns among its first k results."
    assert validation_problem("", passage, "natural") == "empty"
    assert validation_problem("recall?", passage, "natural") == "too short"
    assert validation_problem("recall " * 50, passage, "keyword") == "too long"
    assert validation_problem("the relevant chunks in results", passage, "natural") == "not a question"
    assert validation_problem("recall at k counts the relevant chunks", passage, "keyword") == "copies the passage"
    assert validation_problem("recall at k meaning", passage, "keyword") is None
    assert validation_problem("how does recall at k treat order?", passage, "natural") is None


def test_near_duplicate_questions_are_caught_and_overlap_is_measured():
    seen = NearDuplicates()
    assert (
        seen.add("How is nDCG computed?")
        and not seen.add("how is ndcg computed")
        and seen.add("What does MRR measure?")
    )
    assert lexical_overlap("how does recall treat order", "recall ignores order") == pytest.approx(2 / 3, abs=1e-4)
    assert lexical_overlap("what is it?", "anything") == 0.0


# the stage with a scripted provider ---------------------------------------------------------------------------
def scripted(bad_every: int = 0, relevant_others: bool = False):
    """Questions built from the passage's words; the judge grades a pair 2 when they share words, else 0."""
    count = {"n": 0}

    def answer(request):
        prompt = request.prompt
        grade = shared_words_grade(prompt, relevant_others)
        if grade is not None:
            return grade
        count["n"] += 1
        if bad_every and count["n"] % bad_every == 0:
            return "???"
        picked = [w for w in question_words(passage_of(prompt))][: 3 + request.seed % 4]
        if "Search Keywords:" in prompt:
            return " " + " ".join(picked[:3]).lower()
        return f" how does {' '.join(picked).lower()} work in practice number {request.seed % 97}?"

    return answer


@pytest.fixture
def workspace(docs_workspace):
    return docs_workspace


def run(workspace, provider, **settings):
    client = LLMClient(provider, workspace, "synthesize")
    return asyncio.run(synthesize(workspace, Roles.single(client, "fake-model"), SynthesizeConfig(**settings)))


def test_synthesize_makes_exactly_the_questions_asked_and_labels_their_sources(workspace):
    provider = FakeProvider(scripted())
    summary = run(workspace, provider, questions=10, mine=False)
    assert summary.made == 10 and summary.shortfall is None and sum(summary.styles.values()) == 10
    queries = [rows.get_query(workspace.db, q) for (q,) in workspace.db.execute("SELECT query_id FROM queries")]
    assert len(queries) == 10 and all(q.origin.value == "synthetic" for q in queries)
    labels = [j for j in rows.iter_judgments(workspace.db) if j.source.value == "synthetic-source"]
    assert len(labels) == summary.source_labels == sum(len(q.metadata["source_chunk_ids"]) for q in queries)
    assert all(j.grade == 2 and j.status.value == "final" for j in labels)
    multi = [q for q in queries if q.style == "multi"]
    assert multi and all(len(q.metadata["source_chunk_ids"]) == 2 for q in multi)
    for query in queries:
        assert 0.0 <= query.metadata["lexical_overlap"] <= 1.0
        lineage = query.lineage
        assert (
            lineage.prompt_name == f"synthesize/completion-{query.style}"
            and lineage.prompt_sha256 == load_prompt(lineage.prompt_name).sha256
        )
        assert lineage.seed is not None and lineage.temperature == 0.7
    removed = summary.removed  # the scripted critic may refuse a multi question whose second passage shares no word
    assert (removed["validation"], removed["round_trip"], removed["near_duplicate"]) == (0, 0, 0)
    assert summary.generated == 10 + removed["critic"] + summary.surplus


def test_a_rerun_of_the_same_settings_calls_nothing_and_stores_nothing_twice(workspace):
    provider = FakeProvider(scripted())
    first = run(workspace, provider, questions=8)
    calls = len(provider.history)
    judgments = workspace.db.execute("SELECT COUNT(*) FROM judgments").fetchone()[0]
    again = run(workspace, provider, questions=8)
    assert len(provider.history) == calls and again.calls == 0
    assert again.made == 0 and again.already_made == 8 and again.styles == first.styles
    stored = {q for (q,) in workspace.db.execute("SELECT query_id FROM queries WHERE origin = 'synthetic'")}
    assert sorted(again.query_ids) == sorted(first.query_ids) and set(first.query_ids) == stored  # the same eight
    assert workspace.db.execute("SELECT COUNT(*) FROM judgments").fetchone()[0] == judgments
    other_seed = run(workspace, provider, questions=8, seed=5, mine=False)
    assert other_seed.made + other_seed.already_made == 8 and other_seed.made > 0


@pytest.mark.parametrize("questions", [8, 60])  # a sample of the chunks, and every chunk the corpus has
def test_a_document_added_to_the_corpus_leaves_the_other_questions_as_they_were(tmp_path, questions):
    """Each chunk's place in the sample and each slot's style come from its own id, so one new file costs the
    questions of its own chunks and a few at the sample's edges, not a new sample (which a reviewer would pay for)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for source in (Path(__file__).resolve().parents[1] / "examples" / "corpus").iterdir():
        (docs / source.name).write_bytes(source.read_bytes())
    chunking = ChunkingConfig(chunker="markdown", size=600, overlap=60)
    settings = {"questions": questions, "mine": False, "critic": False}
    with open_workspace(tmp_path / "ws") as ws:
        ingest(ws, load_sources([docs]), chunking, [docs])
        before = run(ws, FakeProvider(scripted()), **settings)
        (docs / "added.md").write_text(
            "# Warm-up\n\nA warm-up pass loads the index and the encoder once before the first timed query, so "
            "the first latency measured is not the cost of reading files from disk. Without it, the first query "
            "of every benchmark run pays for opening the index, mapping its pages into memory and compiling the "
            "encoder's graph, and the mean latency reported is dominated by that one slow query. The warm-up "
            "queries are not scored and not timed; their results are thrown away.\n",
            encoding="utf-8",
        )
        ingest(ws, load_sources([docs]), chunking, [docs])
        after = run(ws, FakeProvider(scripted()), **settings)
    kept = set(before.query_ids) & set(after.query_ids)
    assert len(kept) >= len(before.query_ids) - 1, (len(kept), len(before.query_ids))  # one at the sample's edge
    assert after.made <= 2 and after.calls <= 2 and after.already_made >= len(kept)


def test_questions_made_with_other_styles_are_asked_again_as_they_were_made(workspace, monkeypatch):
    """A workspace whose questions another version sampled (styles given otherwise): the next run gives each
    question's slot its question's style, so it asks nothing again and makes the same set."""
    import testset_builder.stages.synthesize.stage as stage

    real = stage.allocate_styles

    def otherwise(keys, weights, seed, fixed=None):
        return real(list(reversed(keys)), weights, seed + 99)

    monkeypatch.setattr(stage, "allocate_styles", otherwise)
    provider = FakeProvider(scripted())
    before = run(workspace, provider, questions=60, mine=False, critic=False)
    monkeypatch.setattr(stage, "allocate_styles", real)
    calls = len(provider.history)
    after = run(workspace, provider, questions=60, mine=False, critic=False)
    assert len(provider.history) == calls and after.calls == 0
    assert sorted(after.query_ids) == sorted(before.query_ids) and after.made == 0


def test_filters_count_what_they_remove_and_more_chunks_are_sampled_to_keep_the_count(workspace):
    settings = {"mine": False, "styles": {"natural": 1.0}, "candidates": 1}
    summary = run(workspace, FakeProvider(scripted(bad_every=3)), questions=12, **settings)
    assert summary.made == 12 and summary.rounds >= 2
    assert summary.removed["validation"] == summary.validation_reasons["empty"] > 0
    assert summary.generated == 12 + sum(summary.removed.values()) + summary.surplus


def first_try_rejected(always_bad: set[str] | None = None):
    """A generator whose first question for a passage is empty (a rule rejects it), and whose later ones are good;
    passages holding a word of ``always_bad`` get an empty question every time."""
    tried: dict[str, int] = {}
    good = scripted()

    def answer(request):
        passage = passage_of(request.prompt)
        tried[passage] = tried.get(passage, 0) + 1
        if tried[passage] == 1 or any(word in passage for word in always_bad or ()):
            return "???"
        return good(request)

    return answer


def test_a_rejected_question_is_asked_again_of_its_chunk_with_a_fresh_seed(workspace):
    provider = FakeProvider(first_try_rejected())
    settings = {"mine": False, "critic": False, "styles": {"natural": 1.0}, "candidates": 2}
    summary = run(workspace, provider, questions=6, **settings)
    assert summary.made == 6 and summary.rounds == 1 and summary.chunks_sampled == 6
    assert summary.retried == 6 and summary.generated == 12
    assert summary.removed["validation"] == 6 and summary.validation_reasons == {"empty": 6}
    asked: dict[str, list[int]] = {}
    for request in provider.history:
        asked.setdefault(passage_of(request.prompt), []).append(request.seed)
    assert len(asked) == 6 and all(len(set(seeds)) == 2 for seeds in asked.values())
    retries = {slot_seed(first, "candidate", "1") for first, _ in asked.values()}
    assert retries == {second for _, second in asked.values()}
    kept = {rows.get_query(workspace.db, q).lineage.seed for q in summary.query_ids}
    assert kept == retries  # each question's lineage names the seed of the try that was kept
    calls = len(provider.history)
    again = run(workspace, provider, questions=6, **settings)
    assert len(provider.history) == calls and again.calls == 0 and again.already_made == 6


def test_a_chunk_rejected_every_try_is_given_up_and_another_chunk_sampled(workspace):
    provider = FakeProvider(first_try_rejected(always_bad={"the"}))
    settings = {"mine": False, "critic": False, "styles": {"natural": 1.0}, "candidates": 3, "max_rounds": 5}
    summary = run(workspace, provider, questions=3, **settings)
    asked: dict[str, int] = {}
    for request in provider.history:
        asked[passage_of(request.prompt)] = asked.get(passage_of(request.prompt), 0) + 1
    hopeless = [p for p in asked if "the" in p]
    assert hopeless and all(asked[p] == 3 for p in hopeless)
    assert all(asked[p] == 2 for p in asked if "the" not in p)
    assert summary.generated == sum(asked.values()) and summary.retried == summary.generated - summary.chunks_sampled
    assert summary.made == min(3, len(asked) - len(hopeless)) > 0


def test_question_rules_can_be_turned_off_to_measure_them_and_the_checks_of_form_stay(workspace):
    def pointing(request):
        """Natural questions that point at what only the chunk shows."""
        answer = scripted()(request)
        if isinstance(answer, str) and answer.startswith(" how does"):
            return " what does this function return in this case?"
        return answer

    settings = {"mine": False, "critic": False, "styles": {"natural": 1.0}, "max_rounds": 1, "dedupe": False}
    kept = run(workspace, FakeProvider(pointing), questions=4, question_rules=False, **settings)
    assert kept.made == 4 and kept.removed["validation"] == 0
    rejected = run(workspace, FakeProvider(pointing), questions=4, seed=3, **settings)
    assert rejected.made == 0 and rejected.validation_reasons == {"no referent": rejected.generated}
    passage = "Recall at k counts the relevant chunks a retriever returns among its first k results."
    assert validation_problem("what does this return in this case?", passage, "natural", rules=False) is None
    assert validation_problem("recall?", passage, "natural", rules=False) == "too short"


def test_asking_for_more_than_the_corpus_holds_says_why_fewer(workspace, tmp_path, capsys):
    eligible = run(workspace, FakeProvider(scripted()), questions=1, mine=False, critic=False).chunks_eligible
    summary = run(workspace, FakeProvider(scripted()), questions=500, mine=False, critic=False, seed=9)
    assert summary.made + summary.already_made < 500 and summary.chunks_sampled == eligible
    assert "every one of the" in summary.shortfall and "eligible chunks was used" in summary.shortfall


def test_the_critic_removes_questions_the_source_does_not_answer(workspace):
    def unanswerable(request):
        if request.prompt.rstrip().endswith("Relevance:"):
            return digit_completion({"0": 0.9, "1": 0.1})
        return scripted()(request)

    summary = run(workspace, FakeProvider(unanswerable), questions=4, mine=False, max_rounds=2)
    assert summary.made == 0 and summary.removed["critic"] == summary.generated and "critic" in summary.shortfall


def test_a_failed_critic_judgment_holds_the_question_back_without_counting_it_removed_and_a_rerun_retries(workspace):
    failing = {"on": True}

    def flaky_judge(request):
        if request.prompt.rstrip().endswith("Relevance:") and failing["on"]:
            raise ProviderError("fake", "the judge's endpoint is down", status=400)
        return scripted()(request)

    provider = FakeProvider(flaky_judge)
    summary = run(workspace, provider, questions=3, mine=False, max_rounds=1)
    assert summary.removed["critic"] == 0 and summary.critic_failed == summary.generated > 0
    assert summary.made == 0 and summary.incomplete and "held back by failed critic judgments" in summary.shortfall
    failing["on"] = False
    again = run(workspace, provider, questions=3, mine=False, max_rounds=1)
    assert again.critic_failed == 0 and again.made + again.removed["critic"] == summary.critic_failed


def test_failed_generations_say_why_in_the_summary_and_in_runs_line(workspace):
    """A model server that dies mid-run: the stage's line names the error, not only that it fell short."""
    from testset_builder.api.stages import _made

    def dead(request):
        raise ProviderError("local", "the model server at 127.0.0.1:8080 refused the connection", status=None)

    summary = run(workspace, FakeProvider(dead), questions=3, mine=False, max_rounds=1)
    assert summary.generation_failed > 0 and summary.incomplete and summary.retryable
    assert "refused the connection" in summary.failure
    line = _made(summary.as_dict())
    assert f"{summary.generation_failed} generations failed: " in line and "refused the connection" in line


def test_duplicate_twins_of_a_source_get_the_same_label(tmp_path):
    (tmp_path / "corpus").mkdir()
    for name in ("a.md", "copy-of-a.md"):
        (tmp_path / "corpus" / name).write_text("# Recall\n\n" + LONG, encoding="utf-8")
    with open_workspace(tmp_path / "ws") as ws:
        ingest(
            ws,
            load_sources([tmp_path / "corpus"]),
            ChunkingConfig(chunker="markdown", size=2000, overlap=0),
            [tmp_path / "corpus"],
        )
        summary = run(ws, FakeProvider(scripted()), questions=1, mine=False, critic=False, styles={"natural": 1.0})
        labels = [j for j in rows.iter_judgments(ws.db)]
    assert summary.chunks_skipped == {"duplicate": 1} and summary.twin_labels == 1
    assert len(labels) == 2 and {j.rationale.split(" of ")[0] for j in labels} == {"source chunk", "exact duplicate"}


def test_mining_queues_other_relevant_chunks_for_review_and_counts_the_questions_that_gained_them(workspace):
    summary = run(workspace, FakeProvider(scripted(relevant_others=True)), questions=4, mine_depth=2)
    mining = summary.mining
    assert mining.judged == mining.pairs > 0 and summary.questions_with_extra_relevant == 4
    queue = review_store.queued_items(workspace.db, kind="pair")
    assert len(queue) == mining.queued == mining.grades[1] + mining.grades[2]
    synthetic = {q for (q,) in workspace.db.execute("SELECT query_id FROM queries")}
    sources = {
        (j.query_id, j.chunk_id) for j in rows.iter_judgments(workspace.db) if j.source.value == "synthetic-source"
    }
    assert {r.query_id for r in queue} <= synthetic and not sources & {(r.query_id, r.chunk_id) for r in queue}


def test_round_trip_keeps_only_questions_whose_source_bm25_ranks_in_the_top_k(workspace):
    from testset_builder.retrieval import BM25Index

    kept = run(
        workspace,
        FakeProvider(scripted()),
        questions=6,
        mine=False,
        critic=False,
        round_trip_k=1,
        styles={"natural": 1.0},
        max_rounds=2,
    )
    ids, passages = rows.live_chunk_passages(workspace.db)
    bm25 = BM25Index(ids, passages)
    queries = [rows.get_query(workspace.db, q) for (q,) in workspace.db.execute("SELECT query_id FROM queries")]
    assert queries and all(
        bm25.search([q.query_id], [q.text], k=1).to_dict()[q.query_id].keys() == {q.source_chunk_id} for q in queries
    )
    assert kept.made + kept.removed["round_trip"] == kept.generated - kept.surplus

    def off_topic(request):
        return " bananas ripen faster near apples?"

    removed = run(
        workspace,
        FakeProvider(off_topic),
        questions=3,
        mine=False,
        critic=False,
        round_trip_k=1,
        seed=3,
        max_rounds=1,
        dedupe=False,
    )
    assert removed.made == 0 and removed.removed["round_trip"] == removed.generated > 0


def test_synthesize_on_an_empty_workspace_says_to_chunk_first(tmp_path):
    with open_workspace(tmp_path / "empty") as ws, pytest.raises(InputError, match="run `testset-builder chunk"):
        run(ws, FakeProvider(scripted()), questions=1)


def test_the_synthesize_command_overrides_the_config_and_reports_json(workspace, tmp_path, capsys):
    from fault_server import FaultServer

    bad = main(["synthesize", "--workspace", str(workspace.root), "--styles", "natural:1", "--json"])
    assert bad == 1 and "name=share" in capsys.readouterr().err
    unknown = main(["synthesize", "--workspace", str(workspace.root), "--styles", "poetry=1", "--json"])
    assert unknown == 1 and "styles" in capsys.readouterr().err

    def question(body: dict) -> str:
        digest = "".join(chr(97 + int(c, 16)) for c in hashlib.sha256(body["prompt"].encode()).hexdigest()[:6])
        return f"What does passage {digest} of seed {body.get('seed')} describe?"

    with FaultServer(answer=question) as server:
        config = tmp_path / "team.yaml"
        config.write_text(
            f"generator: {{kind: openai, model: base, base_url: '{server.openai_url}', prompt_style: completion}}\n"
            "synthesize: {questions: 9, styles: {keyword: 1.0}, mine: true, critic: true}\n",
            encoding="utf-8",
        )
        args = ["--config", str(config), "--questions", "3", "--styles", "natural=1", "--no-mine", "--no-critic"]
        code = main(["synthesize", "--workspace", str(workspace.root), *args, "--json"])
        report = json.loads(capsys.readouterr().out)
        prompts = [r["body"]["prompt"] for r in server.requests]
    assert code == 0 and report["requested"] == 3 and report["made"] == 3 and report["styles"] == {"natural": 3}
    assert report["mining"]["pairs"] == 0 and report["removed"]["critic"] == 0 and not report["incomplete"]
    natural = load_prompt("synthesize/completion-natural").sections["prompt"].split("{", 1)[0]
    assert len(prompts) == report["calls"] == 3 and all(p.startswith(natural) for p in prompts)


# the real local model ------------------------------------------------------------------------------------------
def test_the_local_model_synthesizes_questions_from_real_scifact_chunks_end_to_end(scifact_dir, local_server, tmp_path):
    from testset_builder.llm.local_provider import LocalProvider

    folder = tmp_path / "scifact"
    folder.mkdir()
    with (scifact_dir / "corpus.jsonl").open(encoding="utf-8") as source:
        (folder / "corpus.jsonl").write_text("".join(line for _, line in zip(range(60), source)), encoding="utf-8")
    with open_workspace(tmp_path / "ws") as ws:
        ingest(ws, load_sources([folder]), ChunkingConfig(chunker="recursive", size=1000, overlap=100), [folder])
        client = LLMClient(LocalProvider(local_server), ws, "synthesize", max_in_flight=2)
        settings = SynthesizeConfig(
            questions=4, styles={"natural": 0.5, "keyword": 0.25, "multi": 0.25}, mine_depth=2, max_rounds=6
        )
        summary = asyncio.run(synthesize(ws, Roles.single(client, "gemma-3-270m"), settings))
        made = summary.made + summary.already_made
        queries = [rows.get_query(ws.db, q) for (q,) in ws.db.execute("SELECT query_id FROM queries")]
        assert made == len(queries) and (made == 4 or summary.shortfall)
        assert made >= 1 and summary.generated >= made and summary.calls > 0
        for query in queries:
            assert (
                query.text
                and validation_problem(query.text, rows.get_chunk(ws.db, query.source_chunk_id).text, query.style)
                is None
            )
            assert (
                query.lineage.provider == "local:gemma-3-270m@sha256:a5fd3b62230aa5ec"
                and query.lineage.model == "gemma-3-270m"
                and query.lineage.prompt_name.startswith("synthesize/completion-")
            )
        # the embedded judge is near chance: the estimate criticises and mines, with no judge call
        assert summary.critic_by == summary.mined_by and summary.mined_by.startswith("estimate (prior ")
        assert summary.mining.pairs > 0 and summary.mining.judged == 0 and summary.mining.calls == 0
        assert not [r for r in answered_requests(ws.root / "testset.db") if "Relevance:" in r]
        assert not [j for j in rows.iter_judgments(ws.db) if j.source.value == "llm"]
        again = asyncio.run(
            synthesize(
                ws, Roles.single(LLMClient(LocalProvider(local_server), ws, "synthesize"), "gemma-3-270m"), settings
            )
        )
        assert again.calls == 0 and again.already_made == made


def test_synthesize_with_batch_goes_one_step_per_run_and_finishes_from_the_cache(
    workspace, tmp_path, monkeypatch, capsys
):
    from batch_server import BatchServer

    def answer(body):
        content = body["messages"][-1]["content"]
        if "Rate the passage" in content:
            return json.dumps({"rationale": "answers it", "score": 3})
        words = question_words(content.rsplit("Passage", 1)[-1])[:4]
        return f"how does {' '.join(words).lower()} work?"

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-batch")
    with BatchServer(polls_until_done=1, answer=answer) as server:
        config = tmp_path / "openai.yaml"
        config.write_text(f"llm:\n  provider: {{kind: openai, model: gpt-4o-mini, base_url: '{server.openai_url}'}}\n")
        argv = [
            "synthesize",
            "--workspace",
            str(workspace.root),
            "--config",
            str(config),
            "--questions",
            "3",
            "--styles",
            "natural=1",
            "--batch",
            "--json",
        ]
        steps = []
        for _ in range(6):
            assert main(argv) in (0, 3)
            report = json.loads(capsys.readouterr().out)
            if report["batch_id"] is None:
                break
            steps.append(report["batch_step"])
            assert main(["resume", "--workspace", str(workspace.root), "--config", str(config), "--json"]) == 0
            capsys.readouterr()
    assert steps == ["questions, round 1", "answerability critic", "mining other chunks"]
    assert (
        report["made"] + report["already_made"] == 3 and report["calls"] == 0 and report["cache_hits"] > 0
    )  # stored before mining
    assert report["mining"]["judged"] == report["mining"]["pairs"] > 0


def test_a_synthesize_run_killed_with_sigkill_resumes_without_paying_twice_and_gives_the_same_set(
    tmp_path, monkeypatch
):
    import os
    import sqlite3
    import subprocess
    import sys
    import time

    from fault_server import FaultServer

    def answer(body):
        passage = body["messages"][-1]["content"].rsplit("Passage", 1)[-1]
        return f"how does {' '.join(re.findall(r'[A-Za-z]{5,}', passage)[:4]).lower()} work?"

    def answered(db_path: Path) -> set[str]:
        try:
            db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
            try:
                return {r[0] for r in db.execute("SELECT request_sha256 FROM llm_calls WHERE response IS NOT NULL")}
            finally:
                db.close()
        except sqlite3.OperationalError:
            return set()

    def queries(root: Path) -> set[tuple[str, str]]:
        with open_workspace(root, create=False) as ws:
            return {(r[0], r[1]) for r in ws.db.execute("SELECT query_id, text FROM queries")}

    env = {**os.environ, "OPENAI_API_KEY": "sk-test-kill"}
    with FaultServer(answer=answer, latency=0.15) as server:
        config = tmp_path / "openai.yaml"
        config.write_text(
            f"llm:\n  provider: {{kind: openai, model: gpt-4o-mini, base_url: '{server.openai_url}'}}\n  limits: "
            f"{{max_in_flight: 2}}\n"
        )
        for name in ("clean", "killed"):
            with open_workspace(tmp_path / name) as ws:
                ingest(ws, load_sources([DOCS]), ChunkingConfig(chunker="markdown", size=600, overlap=60), [DOCS])
        command = [
            sys.executable,
            "-m",
            "testset_builder",
            "synthesize",
            "--config",
            str(config),
            "--questions",
            "10",
            "--styles",
            "natural=1",
            "--no-critic",
            "--no-mine",
            "--json",
        ]
        subprocess.run([*command, "--workspace", str(tmp_path / "clean")], check=True, env=env, capture_output=True)
        server.requests.clear()
        job = subprocess.Popen(
            [*command, "--workspace", str(tmp_path / "killed")],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while len(answered(tmp_path / "killed" / "testset.db")) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        job.kill()
        job.wait()
        time.sleep(0.5)
        done_before_kill = answered(tmp_path / "killed" / "testset.db")
        assert 4 <= len(done_before_kill) < 10 and not queries(tmp_path / "killed")
        sent_before_kill = len(server.requests)
        subprocess.run([*command, "--workspace", str(tmp_path / "killed")], check=True, env=env, capture_output=True)
    resent = len(server.requests) - sent_before_kill
    assert resent == len(answered(tmp_path / "killed" / "testset.db")) - len(
        done_before_kill
    )  # only the unanswered ones
    assert queries(tmp_path / "killed") == queries(tmp_path / "clean") and len(queries(tmp_path / "clean")) == 10


@pytest.mark.slow
def test_the_same_corpus_config_and_seed_give_byte_identical_questions_in_processes_with_other_hash_seeds_and_load(
    tmp_path, local_server
):
    """Two processes (PYTHONHASHSEED 1 and 2), each with its own llama-server, the second while a CPU burner runs."""
    import os
    import subprocess
    import sys

    def run(name: str, hash_seed: str) -> list[tuple[str, str]]:
        workspace = tmp_path / name
        cli = [sys.executable, "-m", "testset_builder"]
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        chunk = [*cli, "chunk", str(DOCS), "--workspace", str(workspace), "--chunker", "markdown", "--size", "600"]
        subprocess.run([*chunk, "--overlap", "60"], check=True, env=env, capture_output=True)
        made = [*cli, "synthesize", "-n", "6", "--no-mine", "--config", "quickstart", "--workspace", str(workspace)]
        subprocess.run(made, check=True, env=env, capture_output=True)
        with open_workspace(workspace) as ws:
            return sorted((q, t) for q, t in ws.db.execute("SELECT query_id, text FROM queries"))

    quiet = run("quiet", "1")
    burner = subprocess.Popen([sys.executable, "-c", "while True: sum(i * i for i in range(10_000))"])
    try:
        loaded = run("loaded", "2")
    finally:
        burner.kill()
    assert len(quiet) == 6 and quiet == loaded
