"""Coverage of production traffic: the share of logged requests (and of likely failures) that have a test question
on their subject, and the topics with the most uncovered traffic to write questions for next."""

from __future__ import annotations

import json

import numpy as np
import pytest

from testset_builder.metrics.coverage import SAME_TOPIC, leader_topics, traffic_coverage

DIMENSIONS = 12


def near(direction: int, rng, spread: float = 0.05) -> np.ndarray:
    """A unit vector close to the ``direction``-th axis: a query on that topic."""
    vector = np.zeros(DIMENSIONS)
    vector[direction] = 1.0
    vector += rng.normal(0, spread, DIMENSIONS)
    return vector / np.linalg.norm(vector)


def constructed_log():
    """Four topics (axes 0-3), two of them with a test question; each query's frequency and failure known."""
    rng = np.random.default_rng(7)
    log = [  # (text, topic, frequency, likely failure)
        ("recall a", 0, 5, False), ("recall b", 0, 2, True),
        ("bm25 a", 1, 3, False),
        ("password a", 2, 6, True), ("password b", 2, 2, False), ("password c", 2, 1, True),
        ("export a", 3, 3, False), ("export b", 3, 1, False),
    ]  # fmt: skip
    vectors = np.array([near(topic, rng) for _, topic, _, _ in log])
    questions = np.array([near(0, rng), near(1, rng), near(1, rng)])
    return log, vectors, questions


def test_covered_traffic_and_failures_are_the_shares_of_the_topics_with_a_test_question():
    log, vectors, questions = constructed_log()
    texts, topics = [t for t, *_ in log], [topic for _, topic, _, _ in log]
    frequency, failed = [f for *_, f, _ in log], [x for *_, x in log]
    found = traffic_coverage(texts, vectors, frequency, failed, questions)
    covered = [topic in (0, 1) for topic in topics]
    assert found.traffic == sum(frequency) and found.logged_queries == len(log)
    assert found.covered_traffic == sum(f for f, c in zip(frequency, covered) if c)
    assert found.covered_queries == sum(covered)
    assert found.failed_traffic == sum(f for f, x in zip(frequency, failed) if x)
    assert found.covered_failed_traffic == sum(f for f, x, c in zip(frequency, failed, covered) if x and c)
    assert (found.topics, found.uncovered_topics) == (4, 2)
    assert found.test_questions == len(questions)


def test_generate_next_lists_the_uncovered_topics_most_traffic_first_with_their_most_asked_queries():
    log, vectors, questions = constructed_log()
    texts = [t for t, *_ in log]
    found = traffic_coverage(texts, vectors, [f for *_, f, _ in log], [x for *_, x in log], questions, examples=2)
    listed = [(t.examples, t.uncovered_traffic, t.uncovered_failures, t.queries) for t in found.generate_next]
    assert listed == [
        (["password a", "password b"], 6 + 2 + 1, 6 + 1, 3),  # its likely failures: a and c
        (["export a", "export b"], 3 + 1, 0, 2),
    ]


def test_with_no_test_question_nothing_is_covered_and_every_topic_is_listed():
    log, vectors, _ = constructed_log()
    none = np.zeros((0, DIMENSIONS))
    found = traffic_coverage([t for t, *_ in log], vectors, [f for *_, f, _ in log], [False] * len(log), none)
    assert found.covered_traffic == 0 and found.uncovered_topics == found.topics == 4
    assert found.traffic_share == 0.0 and found.failure_share is None  # no likely failure in the log


def test_a_topic_is_led_by_its_most_asked_query_and_holds_only_queries_on_its_subject():
    rng = np.random.default_rng(3)
    vectors = np.array([near(0, rng), near(1, rng), near(0, rng), near(2, rng), near(1, rng)])
    topic = leader_topics(vectors, [2, 0, 1, 3, 4])
    assert topic[2] == topic[0] == 0 and topic[1] == topic[4] == 1 and topic[3] == 2
    opposite = np.array([[1.0, 0.0], [np.cos(1.2), np.sin(1.2)]])  # cosine below SAME_TOPIC: two topics
    assert np.cos(1.2) < SAME_TOPIC and leader_topics(opposite, [0, 1]).tolist() == [0, 1]


# On a workspace, with the real dense encoder: `release` measures it, `score` and `report` show it ---------------
SYNTHETIC = ["how is recall at 10 computed?", "what does BM25 do when it ranks documents?"]
LOGGED = [  # (query, times asked, thumbs down): two subjects with a test question, two without
    ("how do you compute recall at 10?", 5, False),
    ("what is recall@10 and how is it calculated", 2, False),
    ("how does BM25 score a document?", 3, False),
    ("how do I reset my password?", 6, True),
    ("I forgot my password, how can I change it?", 2, False),
    ("how can I export my data as CSV?", 3, False),
    ("download my data as a spreadsheet", 1, False),
]


def logged_and_released(ws, tmp_path):
    from testset_builder.records import Judgment, JudgmentSource, JudgmentStatus, Query, QueryOrigin
    from testset_builder.stages.logs.importer import import_logs
    from testset_builder.store import rows

    chunks = [c for c, *_ in rows.live_chunk_rows(ws.db)]
    questions = [
        Query(query_id=f"s{i}", text=text, origin=QueryOrigin.synthetic, source_chunk_id=chunks[i], style="natural")
        for i, text in enumerate(SYNTHETIC)
    ]
    labels = [
        Judgment(judgment_id=f"src{i}", query_id=f"s{i}", chunk_id=chunks[i], grade=2,
                 source=JudgmentSource.synthetic_source, status=JudgmentStatus.final)
        for i in range(len(SYNTHETIC))
    ]  # fmt: skip
    with ws.transaction() as db:
        rows.put_queries(db, questions)
        rows.add_judgments(db, labels)
    records = [
        {"query": text, "retrieved": chunks[:2], **({"thumbs": "down"} if down else {})}
        for text, times, down in LOGGED
        for _ in range(times)
    ]
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    import_logs(ws, log)
    run = tmp_path / "run.trec"
    run.write_text("".join(f"s{i} Q0 {chunks[i]} 1 1.0 mine\n" for i in range(len(SYNTHETIC))), encoding="utf-8")
    return run


def test_release_measures_the_traffic_its_questions_cover_and_score_and_report_show_it(
    docs_workspace, tmp_path, capsys
):
    from testset_builder import api
    from testset_builder.cli import main
    from testset_builder.config import Config
    from testset_builder.retrieval.dense import dense_available

    if not dense_available():
        pytest.skip("coverage embeds queries with the dense extra")
    ws = docs_workspace
    run = logged_and_released(ws, tmp_path)
    made = api.release(Config(workspace=ws.root), workspace=ws)
    found = made.coverage
    traffic = sum(times for _, times, _ in LOGGED)
    assert (found["traffic"], found["covered_traffic"]) == (traffic, 5 + 2 + 3)
    assert (found["failed_traffic"], found["covered_failed_traffic"]) == (6, 0)  # the thumbed-down question
    assert (found["topics"], found["uncovered_topics"]) == (4, 2)
    assert [t["examples"][0] for t in found["generate_next"]] == [
        "how do I reset my password?",
        "how can I export my data as CSV?",
    ]
    assert not (made.path / "meta" / "coverage.json").exists()  # its examples are unreviewed: kept in the workspace

    assert main(["score", "--release", f"{ws.root}@{made.version}", "--run", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["coverage"]["covered_traffic"] == found["covered_traffic"]
    assert main(["score", "--release", f"{ws.root}@{made.version}", "--run", str(run)]) == 0
    printed = capsys.readouterr().out
    assert "generate for these next" in printed and '"how do I reset my password?"' in printed
    out = tmp_path / "report.html"
    assert main(["report", "--release", f"{ws.root}@{made.version}", "--run", str(run), "--out", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert 'data-table="generate_next"' in page and "how can I export my data as CSV?" in page


def test_without_the_dense_encoder_release_says_coverage_was_not_measured_and_why(
    docs_workspace, tmp_path, monkeypatch
):
    from testset_builder import api
    from testset_builder.config import Config
    from testset_builder.metrics.coverage import traffic_coverage_lines

    monkeypatch.setattr("testset_builder.retrieval.dense.dense_available", lambda: False)
    logged_and_released(docs_workspace, tmp_path)
    found = api.release(Config(workspace=docs_workspace.root), workspace=docs_workspace).coverage
    assert "dense" in found["unavailable"] and "traffic" not in found
    assert traffic_coverage_lines(found)[0].startswith("production traffic covered: not measured (it needs the dense")


def test_release_measures_coverage_again_when_the_log_grew_though_the_test_set_did_not(
    docs_workspace, tmp_path, monkeypatch
):
    from testset_builder import api
    from testset_builder.config import Config
    from testset_builder.stages.logs.importer import import_logs

    monkeypatch.setattr("testset_builder.retrieval.dense.dense_available", lambda: False)  # no encoding needed here
    logged_and_released(docs_workspace, tmp_path)
    config = Config(workspace=docs_workspace.root)
    first = api.release(config, workspace=docs_workspace)
    unchanged = api.release(config, workspace=docs_workspace)
    assert unchanged.coverage["fingerprint"] == first.coverage["fingerprint"]
    (tmp_path / "more.jsonl").write_text(json.dumps({"query": "how do I delete my account?"}) + "\n", encoding="utf-8")
    import_logs(docs_workspace, tmp_path / "more.jsonl")
    grown = api.release(config, workspace=docs_workspace)
    assert not grown.new and grown.version == first.version
    assert grown.coverage["fingerprint"] != first.coverage["fingerprint"]
