"""Synthesize's critic and mining by the relevance estimate (no LLM call) when the judge is the embedded local model,
by the LLM judge when it is a real one; ``synthesize.relevance_by`` forces either."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from fake_provider import FakeProvider, digit_completion, question_words

from testset_builder.cli import main
from testset_builder.config import SynthesizeConfig, override, resolve_config
from testset_builder.corpus.sampling import SourceChunk
from testset_builder.errors import InputError
from testset_builder.labels.prior import PRIOR, PRIOR_LEXICAL
from testset_builder.llm import LLMClient
from testset_builder.llm.local_provider import LocalProvider
from testset_builder.llm.roles import Roles
from testset_builder.retrieval import dense_available
from testset_builder.retrieval.indexes import WorkspaceIndexes, retriever_names
from testset_builder.stages.synthesize import synthesize
from testset_builder.stages.synthesize.critic import critic_by_estimate, source_estimates
from testset_builder.stages.synthesize.generation import Slot
from testset_builder.stages.synthesize.mining import MINED_RELEVANT
from testset_builder.store import estimates as stored_estimates
from testset_builder.store import review as review_store
from testset_builder.store import rows

LOCAL = "local:gemma-3-270m@sha256:0123456789abcdef"  # how the embedded model's provider names itself
EMBEDDED = LocalProvider.abilities  # what it declares itself: weak, a small context, on this machine
OFF_TOPIC = "how do bananas ripen in cold storage?"


def is_judge_request(request) -> bool:
    return request.prompt.rstrip().endswith("Relevance:")


def questions(off_topic_every: int = 0):
    """Questions from the passage's own words (every ``off_topic_every``-th about bananas; :data:`FUSION_QUESTION` of
    a passage on fusion); the judge says relevant."""

    def answer(request):
        if is_judge_request(request):
            return digit_completion({"2": 0.8, "0": 0.2})
        if off_topic_every and request.seed % off_topic_every == 0:
            return " " + OFF_TOPIC
        passage = request.prompt.rsplit("Document: ", 1)[-1].rsplit("Document A: ", 1)[-1]
        if "reciprocal rank fusion" in passage:
            return " " + FUSION_QUESTION
        picked = question_words(passage)[: 3 + request.seed % 4]
        return f" how does {' '.join(picked).lower()} work in practice?"

    return answer


def run(workspace, provider, **settings):
    client = LLMClient(provider, workspace, "synthesize")
    return asyncio.run(synthesize(workspace, Roles.single(client, "fake-model"), SynthesizeConfig(**settings)))


def prior_label() -> str:
    return f"estimate ({(PRIOR if dense_available() else PRIOR_LEXICAL).name.replace(':', ' ', 1)})"


OPENING = (
    "# Fusion\n\nHow does reciprocal rank fusion merge the rankings of several retrievers? It sums one over sixty "
    "plus each rank. "
)
FUSION_QUESTION = "how does reciprocal rank fusion merge rankings of retrievers?"
CORPUS = {  # a.md and b.md open alike and then part ways (not near-duplicates): each answers the other's questions
    "a.md": OPENING + "It needs no score calibration, so lexical and dense lists combine without tuning, and a "
    "chunk that both retrievers place high rises to the top of the fused list even when neither ranks it first.",
    "b.md": OPENING + "Teams deploying hybrid search often pick it as their baseline because there is a single "
    "constant to choose and published experiments show that sixty works across many benchmark collections.",
    "c.md": "# Gardens\n\nTomatoes planted against a south-facing wall ripen earlier in cool summers, and watering "
    "them deeply twice a week keeps their fruit from splitting after a sudden heavy storm in late August. Pinching out "
    "side shoots sends the plant's energy into fewer, larger trusses.",
    "d.md": "# Bread\n\nA sourdough starter fed with rye flour at room temperature doubles within eight hours; "
    "bakers keep a small portion in the refrigerator between bakes and refresh it the evening before mixing. A longer, "
    "colder proof gives the loaf a more sour taste and a more open crumb.",
}


@pytest.fixture
def fusion_workspace(tmp_path):
    """Four one-chunk documents, two of which answer the same questions."""
    from testset_builder.config import ChunkingConfig
    from testset_builder.corpus.ingest import ingest
    from testset_builder.corpus.loaders import load_sources
    from testset_builder.store import open_workspace

    folder = tmp_path / "corpus"
    folder.mkdir()
    for name, text in CORPUS.items():
        (folder / name).write_text(text, encoding="utf-8")
    with open_workspace(tmp_path / "ws") as ws:
        ingest(ws, load_sources([folder]), ChunkingConfig(chunker="markdown", size=2000, overlap=0), [folder])
        yield ws


def test_synthesize_with_the_embedded_judge_mines_by_estimate_without_judge_calls(fusion_workspace):
    ws = fusion_workspace
    provider = FakeProvider(questions(), identity=LOCAL, abilities=EMBEDDED)
    settings = {"questions": 4, "styles": {"natural": 1.0}, "mine_depth": 2, "dedupe": False}
    summary = run(ws, provider, **settings)  # a.md and b.md give the same question, kept for each
    assert summary.made == 4 and summary.mined_by == summary.critic_by == prior_label()
    assert not any(is_judge_request(r) for r in provider.history)
    assert summary.calls == len(provider.history) == summary.generated
    assert not [j for j in rows.iter_judgments(ws.db) if j.source.value == "llm"]
    mined = set(stored_estimates.candidate_pairs(ws.db))
    estimates = stored_estimates.estimates(ws.db)
    assert len(mined) == summary.mining.pairs > 0 and mined <= set(estimates)
    likely = {pair for pair in mined if estimates[pair].p_relevant >= MINED_RELEVANT}
    queue = review_store.queued_items(ws.db, kind="pair")  # (the questions queued are the audit's)
    assert {(i.query_id, i.chunk_id) for i in queue} == likely and len(likely) == summary.mining.queued
    doc_of = {c: Path(d).stem for c, d, *_ in rows.live_chunk_rows(ws.db)}
    source_doc = {q: doc_of[rows.get_query(ws.db, q).source_chunk_id] for q, _ in mined}
    assert {(source_doc[q], doc_of[c]) for q, c in likely} == {("a", "b"), ("b", "a")}  # each finds its twin
    assert summary.questions_with_extra_relevant == 2
    assert all(i.reason == "estimated relevant (mining)" and 1.0 <= i.priority <= 2.0 for i in queue)
    again = run(ws, provider, **settings)
    assert again.calls == 0 and again.already_made == 4 and again.mining.queued == 0


def test_estimate_critic_removes_a_question_unrelated_to_its_source(docs_workspace):
    provider = FakeProvider(questions(off_topic_every=2))
    summary = run(
        docs_workspace,
        provider,
        questions=4,
        styles={"natural": 1.0},
        mine=False,
        relevance_by="estimate",
        dedupe=False,
    )
    off_topic = sum(r.seed % 2 == 0 for r in provider.history)
    assert off_topic > 0 and summary.removed["critic"] == off_topic and summary.critic_by == prior_label()
    texts = [t for (t,) in docs_workspace.db.execute("SELECT text FROM queries")]
    assert len(texts) == summary.made == 4 and OFF_TOPIC not in texts
    assert not any(is_judge_request(r) for r in provider.history)


def test_a_multi_question_needs_each_source_above_the_bar(docs_workspace):
    ids, passages = rows.live_chunk_passages(docs_workspace.db)
    indexes = WorkspaceIndexes(docs_workspace, retriever_names("auto"))
    model = PRIOR if "dense" in indexes.indexes else PRIOR_LEXICAL
    first, second = (SourceChunk(c, "doc", passages[i]) for i, c in enumerate(ids[:2]))
    words = " ".join(question_words(first.text)[:6]).lower()
    slot = Slot(0, "multi", (first, second), 0, text=f"how does {words} work?")
    on_first, on_second = source_estimates(model, indexes, [slot])[0]
    bar = (on_first + on_second) / 2
    assert on_first > on_second
    assert critic_by_estimate(model, indexes, [slot], bar).removed == 1  # the second source is below the bar
    assert critic_by_estimate(model, indexes, [slot], on_second).kept == [slot]


def test_a_remote_judge_still_mines_with_llm_calls(docs_workspace):
    provider = FakeProvider(questions())  # identity fake:test: not the embedded model
    summary = run(docs_workspace, provider, questions=3, styles={"natural": 1.0}, mine_depth=2)
    assert summary.critic_by == summary.mined_by == "llm judge fake:fake-model"
    judged = [r for r in provider.history if is_judge_request(r)]
    assert summary.mining.judged == summary.mining.pairs > 0 and len(judged) == 3 + summary.mining.pairs
    assert summary.calls == len(provider.history) and summary.questions_with_extra_relevant == 3
    forced = run(
        docs_workspace, FakeProvider(questions(), identity=LOCAL, abilities=EMBEDDED), questions=3, seed=1,
        styles={"natural": 1.0}, mine_depth=2, relevance_by="llm",
    )  # fmt: skip
    assert forced.mined_by == "llm judge local:fake-model" and forced.mining.judged == forced.mining.pairs > 0


def test_relevance_by_is_auto_estimate_or_llm():
    config = resolve_config("quickstart")
    assert config.synthesize.relevance_by == "auto"
    assert override(config, {"synthesize.relevance_by": "estimate"}).synthesize.relevance_by == "estimate"
    with pytest.raises(InputError, match=r"synthesize\.relevance_by"):
        override(config, {"synthesize.relevance_by": "sometimes"})


def test_summary_says_which_judge_mined(docs_workspace, tmp_path, capsys):
    from fault_server import FaultServer

    def answer(body: dict) -> str:
        if body.get("response_format"):
            return json.dumps({"rationale": "the passage answers it", "score": 3})
        words = question_words(body["messages"][-1]["content"].rsplit("Passage", 1)[-1])[:4]
        return f"how does {' '.join(words).lower()} work?"

    root = str(docs_workspace.root)
    with FaultServer(answer=answer) as server:
        config = tmp_path / "remote.yaml"
        config.write_text(
            f"generator: {{kind: openai, model: gpt-4o-mini, base_url: '{server.openai_url}'}}\n"
            "synthesize: {styles: {natural: 1.0}, mine_depth: 2}\n",
            encoding="utf-8",
        )
        args = ["synthesize", "--workspace", root, "--config", str(config), "-n", "2"]
        assert main([*args, "--relevance-by", "estimate"]) == 0
        by_estimate = capsys.readouterr().out
        sent = len(server.requests)
        assert main([*args, "--seed", "1", "--json"]) == 0
        by_judge = json.loads(capsys.readouterr().out)
    assert sent == 2  # the two questions; nothing judged
    assert f"critic: {prior_label()}" in by_estimate and f"mining by {prior_label()}:" in by_estimate
    assert by_judge["mined_by"] == by_judge["critic_by"] == "llm judge openai:gpt-4o-mini"
    assert by_judge["mining"]["judged"] == by_judge["mining"]["pairs"] > 0


def test_a_question_its_source_does_not_answer_is_doubted_and_queued_for_review_before_the_rest(docs_workspace):
    from testset_builder.stages.synthesize.doubt import DOUBTED_PRIORITY

    provider = FakeProvider(questions(off_topic_every=2))
    summary = run(docs_workspace, provider, questions=4, styles={"natural": 1.0}, mine=False, critic=False)
    texts = {q: t for q, t in docs_workspace.db.execute("SELECT query_id, text FROM queries")}
    off_topic = {q for q, t in texts.items() if t == OFF_TOPIC}
    assert off_topic and len(texts) == summary.made == 4  # nothing removed: the critic is off
    queued_questions = review_store.queued_items(docs_workspace.db, kind="question")
    queued = {i.query_id: i for i in queued_questions if not i.reason.startswith("audit:")}
    assert set(queued) == off_topic and summary.doubted == len(off_topic)  # the on-topic ones are not doubted
    assert all(i.reason.startswith("doubted: ") and i.priority == DOUBTED_PRIORITY for i in queued.values())
    assert review_store.doubted_questions(docs_workspace.db) == dict.fromkeys(sorted(off_topic), False)
    # no doubted question is drawn for the audit
    assert not {i.query_id for i in queued_questions if i.reason.startswith("audit:")} & off_topic


def test_a_doubted_question_is_held_back_from_a_release_until_a_reviewer_keeps_it(docs_workspace, capsys):
    from testset_builder.stages import review
    from testset_builder.store import review as store

    ws = docs_workspace
    summary = run(ws, FakeProvider(questions(off_topic_every=2)), questions=4, styles={"natural": 1.0}, mine=False)
    doubted = sorted(store.doubted_questions(ws.db))
    assert summary.doubted == len(doubted) > 0
    assert main(["release", "-w", str(ws.root), "--version", "1.0.0", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)["counts"]
    assert first["queries"] == 4 - len(doubted)  # held back, and the manifest says so
    assert first["checked_by_human"]["doubted_held_back"] == len(doubted)
    assert first["checked_by_human"]["qrels_by_origin"]["synthetic-source"] == 0  # nobody checked a question yet

    for i, query_id in enumerate(doubted):
        review.submit(ws, "ann", store.question_item_id(query_id), "keep_question", f"k{i}")
    assert main(["release", "-w", str(ws.root), "--version", "1.1.0", "--json"]) == 0
    second = json.loads(capsys.readouterr().out)["counts"]
    assert second["queries"] == 4 and second["checked_by_human"]["doubted_held_back"] == 0
    assert second["checked_by_human"]["doubted_answered"] == len(doubted)
    assert second["checked_by_human"]["qrels_by_origin"]["synthetic-source"] == len(doubted)  # their labels, checked
