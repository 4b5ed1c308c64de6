"""Questions that discriminate: which questions every run finds first (too easy), none finds (too hard), copy their
source's rare words (leaky) or have other answers (ambiguous); a warning when a metric is near its ceiling for every
run; complete@k (every relevant chunk in the top k) beside recall@k; and each figure split by the chunks a question
needs. Each is checked against a computation written here, apart from the library's."""

from __future__ import annotations

import json
import random

import pytest
from conftest import release_human_labels

from testset_builder.cli import EXIT_OK, main
from testset_builder.metrics import evaluate
from testset_builder.metrics.diagnostics import (
    CEILING,
    RARE_SHARE,
    diagnose,
    document_frequencies,
    lexical_leakage,
    rare_limit,
)
from testset_builder.tables import Qrels, Run


def ranking(results: dict[str, float]) -> list[str]:
    """trec_eval's order: score descending, ties by chunk id descending."""
    by_id = sorted(results.items(), reverse=True)
    return [c for c, _ in sorted(by_id, key=lambda item: -item[1])]  # a stable sort keeps ties by id descending


def random_set(seed: int, queries: int = 40, runs: int = 3):
    """Random graded qrels (0 to 4 relevant chunks a query, some grade 0) and runs with tied integer scores."""
    rng = random.Random(seed)
    chunks = [f"c{i:02d}" for i in range(30)]
    qrels = {}
    for q in range(queries):
        judged = rng.sample(chunks, rng.randint(1, 6))
        qrels[f"q{q}"] = {c: rng.choice([0, 1, 1, 2]) for c in judged}
    made = []
    for r in range(runs):
        made.append(
            Run.from_dict(
                {q: {c: float(rng.randint(0, 8)) for c in rng.sample(chunks, rng.randint(0, 15))} for q in qrels},
                name=f"run{r}",
            )
        )
    return qrels, made


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("k", [1, 3, 10])
def test_complete_at_k_is_one_exactly_when_every_relevant_chunk_is_in_the_top_k(seed, k):
    qrels, runs = random_set(seed)
    for level in (1, 2):
        for run in runs:
            got = evaluate(Qrels.from_dict(qrels), run, f"complete@{k}", relevance_level=level).per_query_dict()
            results = run.to_dict()
            for q, judged in qrels.items():
                relevant = {c for c, g in judged.items() if g >= level}
                top = set(ranking(results.get(q, {}))[:k])
                expected = 1.0 if relevant and relevant <= top else 0.0
                assert got[q][f"complete@{k}"] == expected, (q, judged, results.get(q))


def test_complete_at_k_equals_recall_at_k_where_each_question_has_one_relevant_chunk():
    rng = random.Random(7)
    qrels = {f"q{i}": {f"c{rng.randint(0, 20)}": 1} for i in range(30)}
    run = Run.from_dict({q: {f"c{j}": rng.random() for j in range(21)} for q in qrels})
    means = evaluate(Qrels.from_dict(qrels), run, "recall@5,complete@5").means()
    assert means["complete@5"] == means["recall@5"]


@pytest.mark.parametrize("seed", range(4))
def test_too_easy_and_too_hard_questions_are_those_every_run_ranks_first_or_none_finds(seed):
    qrels, runs = random_set(seed, queries=60)
    # a few questions every run ranks first, so the easy side is not empty
    easy = {q: {c: 2} for q, c in (("e1", "c01"), ("e2", "c02"))}
    qrels.update(easy)
    runs = [
        Run.from_dict({**run.to_dict(), **{q: {c: 9.0, "c29": 1.0} for q, (c,) in easy.items()}}, name=run.name)
        for run in runs
    ]
    found = diagnose(Qrels.from_dict(qrels), runs, [], k=3)
    expected_easy, expected_hard = set(), set()
    for q, judged in qrels.items():
        relevant = {c for c, g in judged.items() if g >= 1}
        if not relevant:
            continue
        ranked = [ranking(run.to_dict().get(q, {})) for run in runs]
        if all(set(r[: len(relevant)]) == relevant for r in ranked):
            expected_easy.add(q)
        if all(not relevant & set(r[:3]) for r in ranked):
            expected_hard.add(q)
    assert {q for q, flags in found.flagged.items() if "too easy" in flags} == expected_easy
    assert {q for q, flags in found.flagged.items() if "too hard" in flags} == expected_hard
    assert found.too_easy == len(expected_easy) >= 2 and found.too_hard == len(expected_hard)


def test_leakage_is_the_share_of_content_words_rare_in_the_corpus_and_found_in_the_source():
    chunks = {f"c{i}": f"widgets return values from the store number {i % 7}" for i in range(300)}
    chunks["source"] = "frobnicate returns widgets; the zorblat setting tunes it"
    chunks["other"] = "zorblat appears here too, and so does frobnicate"
    question = "What does frobnicate return for widgets with zorblat?"
    asked = ["frobnicate", "return", "widgets", "zorblat"]  # its content words
    df = {w: sum(w in text.replace(";", " ").replace(",", " ").split() for text in chunks.values()) for w in asked}
    rare = [w for w in asked if df[w] <= max(1, int(RARE_SHARE * len(chunks)))]
    in_source = [w for w in rare if w in chunks["source"].replace(";", " ").split()]
    expected = len(in_source) / len(asked)
    counted, n = document_frequencies(chunks.values(), set(asked))
    assert lexical_leakage(question, chunks["source"], counted, rare_limit(n)) == pytest.approx(expected)
    assert expected == 0.5  # frobnicate and zorblat: rare, in the source; "return" is not in it, widgets is common


def test_on_a_corpus_larger_than_the_sample_rare_words_are_still_told_from_common_ones(monkeypatch):
    from testset_builder.metrics import diagnostics

    monkeypatch.setattr(diagnostics, "DF_SAMPLE", 100)  # read 100 of the 2,000 chunks
    passages = {f"c{i:04d}": "shared words" + (" halfway" if i % 2 else "") for i in range(2000)}
    passages["c0999"] += " quux"  # in one chunk of 2,000: rare, and not among those read
    asked = {"q": "shared halfway quux?"}
    found = diagnostics.leakages({"q": "c0999"}, asked, passages)
    # quux is rare and in the source; shared (every chunk) and halfway (half) are common, though in the source too
    assert found == {"q": pytest.approx(1 / 3)}


def test_a_synthetic_question_is_ambiguous_when_another_chunk_is_labelled_or_estimated_likely():
    qrels = {"labelled": {"s1": 2, "x": 1}, "estimated": {"s2": 2}, "unlikely": {"s3": 2}, "multi": {"s4": 2, "y": 2}}
    meta = {q: {"origin": "synthetic", "source_chunk_id": next(iter(c))} for q, c in qrels.items()}
    meta["multi"]["style"] = "multi"  # asks for two chunks by design
    estimates = [
        {"query-id": "estimated", "corpus-id": "z", "p_relevant": 0.7, "label": None},
        {"query-id": "unlikely", "corpus-id": "z", "p_relevant": 0.3, "label": None},
        {"query-id": "unlikely", "corpus-id": "s3", "p_relevant": 0.9, "label": 2},  # its own source
    ]
    found = diagnose(Qrels.from_dict(qrels), [], [], meta=meta, estimates=estimates)
    assert {q for q, flags in found.flagged.items() if "ambiguous" in flags} == {"labelled", "estimated"}
    assert found.ambiguous == 2 and found.synthetic == 4


def test_the_split_by_chunks_needed_adds_up_to_the_overall_mean():
    qrels, runs = random_set(11, queries=80)
    labels = Qrels.from_dict(qrels)
    evaluations = [evaluate(labels, run, "recall@10,ndcg@10,mrr") for run in runs]
    found = diagnose(labels, runs, evaluations)
    needs = {q: sum(g >= 1 for g in judged.values()) for q, judged in qrels.items()}
    sizes = {
        group: sum(
            (n == 0 if group == "none" else n >= 3 if group == "3+" else n == int(group)) for n in needs.values()
        )
        for group in found.by_chunk_count
    }
    assert {g: e["queries"] for g, e in found.by_chunk_count.items()} == sizes
    assert sum(sizes.values()) == len(qrels) and set(sizes) >= {"1", "2", "3+"}
    for evaluation in evaluations:
        for metric, mean in evaluation.means().items():
            weighted = sum(e["queries"] * e["runs"][evaluation.run_name][metric] for e in found.by_chunk_count.values())
            assert weighted / len(qrels) == pytest.approx(mean)
        complete = evaluate(labels, runs[evaluations.index(evaluation)], "complete@10").mean("complete@10")
        weighted = sum(
            e["queries"] * e["runs"][evaluation.run_name]["complete@10"] for e in found.by_chunk_count.values()
        )
        assert weighted / len(qrels) == pytest.approx(complete)


def test_the_weakest_questions_come_most_flagged_first_and_advice_follows_what_was_found():
    qrels = {"a": {"ca": 2}, "b": {"cb": 2}, "c": {"cc": 2}}
    run = Run.from_dict({"a": {"ca": 1.0}, "b": {"cb": 1.0}, "c": {"x": 1.0}}, name="only")
    meta = {"a": {"origin": "synthetic", "source_chunk_id": "ca"}}
    passages = {"ca": "the quux flag", "cb": "common words", "cc": "common words", "x": "common words"}
    passages.update({f"f{i}": "common words" for i in range(10)})
    found = diagnose(
        Qrels.from_dict(qrels), [run], [], queries={"a": "what is quux?"}, meta=meta, passages=passages,
        documents={c: f"doc-{c}" for c in passages},
    )  # fmt: skip
    assert [(w["query_id"], w["flags"]) for w in found.weakest] == [
        ("a", ["too easy", "leaky"]), ("b", ["too easy"]), ("c", ["too hard"])
    ]  # fmt: skip
    advice = " ".join(found.generate_next)
    assert "2 of 3 questions are found first by every run" in advice
    assert "1 of 3 questions have no relevant chunk" in advice
    assert "add multi-chunk questions" in advice  # every question needs one chunk
    assert f"{len(passages) - 3} of {len(passages)} documents have no question" in advice


def write_set(tmp_path, qrels: dict, runs: dict[str, dict]) -> list[str]:
    (tmp_path / "qrels.tsv").write_text(
        "".join(f"{q}\t0\t{c}\t{g}\n" for q, judged in qrels.items() for c, g in judged.items()), encoding="utf-8"
    )
    paths = []
    for name, results in runs.items():
        path = tmp_path / f"{name}.trec"
        lines = [
            f"{q} Q0 {c} {rank} {score} {name}\n"
            for q, by in results.items()
            for rank, (c, score) in enumerate(sorted(by.items(), key=lambda item: -item[1]), 1)
        ]
        path.write_text("".join(lines), encoding="utf-8")
        paths.append(str(path))
    return paths


def score_output(capsys, tmp_path, qrels, runs, *extra):
    paths = write_set(tmp_path, qrels, runs)
    args = ["score", "--qrels", str(tmp_path / "qrels.tsv"), "--metrics", "recall@10,mrr", "--no-ci", *extra]
    code = main(args + [arg for path in paths for arg in ("--run", path)])
    assert code == EXIT_OK
    return capsys.readouterr().out


def test_score_warns_when_a_metric_is_near_its_ceiling_for_every_run(capsys, tmp_path):
    qrels = {f"q{i}": {f"r{i}": 1} for i in range(40)}
    # both runs find every relevant chunk in their top 10; only "first" ranks it first everywhere
    first = {q: {c: 2.0 for c in judged} | {"x": 1.0} for q, judged in qrels.items()}
    second = {q: {"x": 2.0} | {c: 1.0 for c in judged} for q, judged in qrels.items()}
    out = score_output(capsys, tmp_path, qrels, {"first": first, "second": second})
    assert f"warning: recall@10 is {CEILING} or more for every run" in out
    assert "warning: mrr" not in out  # second's MRR is 0.5
    document = json.loads(score_output(capsys, tmp_path, qrels, {"first": first, "second": second}, "--json"))
    assert [s["metric"] for s in document["question_diagnostics"]["saturated"]] == ["recall@10"]


def test_score_does_not_warn_when_one_run_stays_below_the_ceiling(capsys, tmp_path):
    qrels = {f"q{i}": {f"r{i}": 1} for i in range(40)}
    best = {q: {c: 2.0 for c in judged} for q, judged in qrels.items()}
    # misses 3 of 40 (recall 0.925): just under the ceiling
    worse = {q: ({c: 2.0 for c in judged} if i >= 3 else {"x": 1.0}) for i, (q, judged) in enumerate(qrels.items())}
    out = score_output(capsys, tmp_path, qrels, {"best": best, "worse": worse})
    assert "saturated" not in out
    assert "questions (40): 37 too easy" in out and "; 0 too hard" in out  # best finds the 3 worse misses


def test_score_the_report_and_the_card_of_a_release_name_its_leaky_and_ambiguous_questions(tmp_path, capsys):
    """Synthetic questions made of one word found only in their source chunk leak it; one whose second chunk is
    labelled relevant too is ambiguous; a real query is neither. score --json and the report say so."""
    import re
    from pathlib import Path

    from testset_builder import api
    from testset_builder.records import Query, QueryOrigin
    from testset_builder.store import open_workspace, rows

    docs = Path(__file__).resolve().parents[1] / "examples" / "corpus"
    assert main(["chunk", str(docs), "--workspace", str(tmp_path / "ws"), "--json"]) == 0
    capsys.readouterr()
    with open_workspace(tmp_path / "ws") as ws:
        chunks = rows.live_chunk_rows(ws.db)
        texts = {c: set(re.findall(r"[a-z]{5,}", text.lower())) for c, _, text in chunks}
        seen_in = {}
        for c, found in texts.items():
            for w in found:
                seen_in.setdefault(w, []).append(c)
        unique = {c: sorted(w for w in found if seen_in[w] == [c]) for c, found in texts.items()}
        sources = [c for c, _, _ in chunks if unique[c]][:4]
        queries = [
            Query(query_id=f"s{i}", text=f"what is {unique[c][0]}?", origin=QueryOrigin.synthetic, source_chunk_id=c)
            for i, c in enumerate(sources)
        ]
        other = next(c for c, _, _ in chunks if c not in sources)
        queries.append(Query(query_id="real", text="how do I score a run", origin=QueryOrigin.real))
        labelled = {q.query_id: [q.source_chunk_id or other] for q in queries}
        labelled["s0"].append(other)  # a second chunk answers s0
        release_human_labels(ws, queries, labelled, grade=2)
    spec = f"{tmp_path / 'ws'}@1.0.0"
    run = Run.from_dict({q: {c: 1.0 for c in found} for q, found in labelled.items()}, name="perfect")
    found = api.score(spec, [run], "recall@10", resamples=200).as_dict()["question_diagnostics"]
    flagged = found["flagged"]
    assert {q for q, flags in flagged.items() if "leaky" in flags} == {"s0", "s1", "s2", "s3"}
    assert {q for q, flags in flagged.items() if "ambiguous" in flags} == {"s0"}
    assert found["synthetic"] == 4 and found["needing"] == {"1": 4, "2": 1}
    assert found["saturated"] == [{"metric": "recall@10", "lowest": 1.0}]
    card = (tmp_path / "ws" / "releases" / "1.0.0" / "README.md").read_text(encoding="utf-8")
    assert "- questions: relevant chunks a question needs: 4 need one, 1 need two" in card
    assert "of 4 synthetic questions, 4 copy their source's rare words" in card
    assert "and 1 have other chunks that answer them" in card
    page = api.report(spec, [run], out=tmp_path / "report.html").path.read_text(encoding="utf-8")
    assert 'id="questions"' in page and 'data-warning="saturated"' in page and 'data-table="by_chunk_count"' in page
    assert f"what is {unique[sources[1]][0]}?" in page  # named among the weakest
    alone = api.report(spec, [], out=tmp_path / "alone.html").path.read_text(encoding="utf-8")
    assert 'id="questions"' in alone and f"what is {unique[sources[1]][0]}?" in alone  # leaky, with no run scored
    assert 'data-warning="saturated"' not in alone and 'data-table="by_chunk_count"' not in alone
