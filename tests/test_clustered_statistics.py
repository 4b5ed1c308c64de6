"""Clustered intervals, cluster-level paired tests and set-size figures, checked by simulation and against scipy.

Every figure here is compared with an independent computation: scipy's t-test and permutation test on cluster
means (with equal cluster sizes the clustered tests reduce to them), Kish's design effect 1 + (m - 1) * ICC, the
ratio of bootstrap variances, and the detection rate of simulated sets whose true effect is the reported minimum.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from testset_builder.errors import InputError
from testset_builder.metrics import MatchSummary, MetricSpec
from testset_builder.metrics.clusters import resolve_clusters
from testset_builder.metrics.compare import compare
from testset_builder.metrics.evaluate import Evaluation
from testset_builder.metrics.power import set_size
from testset_builder.metrics.stats import (
    bootstrap_intervals,
    design_effects,
    paired_t_tests,
    randomization_tests,
    resampled_means,
)

METRIC = MetricSpec("ndcg", 10)


def evaluation(name: str, values: np.ndarray) -> Evaluation:
    n = len(values)
    return Evaluation(
        run_name=name,
        metrics=(METRIC,),
        query_ids=np.asarray([f"q{i:04d}" for i in range(n)], dtype=object),
        per_query={str(METRIC): np.asarray(values, dtype=np.float64)},
        summary=MatchSummary(n, 0, 0, 0),
    )


def clustered_null(rng, clusters: int, size: int, icc: float, sd: float = 0.1) -> np.ndarray:
    """Per-query paired differences with mean 0: a shared cluster effect plus query noise, intra-class
    correlation ``icc``."""
    shared = rng.normal(0.0, np.sqrt(icc), clusters)
    return sd * (np.repeat(shared, size) + rng.normal(0.0, np.sqrt(1.0 - icc), clusters * size))


def test_clustered_compare_keeps_false_positives_near_alpha_where_the_per_query_test_does_not():
    """50 documents x 10 questions, ICC 0.7, no true difference, 400 simulated sets through `compare`."""
    rng = np.random.default_rng(2024)
    clusters, size, icc, sets = 50, 10, 0.7, 400
    codes = np.repeat(np.arange(clusters), size)
    base = rng.random(clusters * size)
    clustered_hits = naive_hits = naive_ci_hits = clustered_ci_hits = 0
    for s in range(sets):
        candidate = evaluation("candidate", base + clustered_null(rng, clusters, size, icc))
        baseline = evaluation("baseline", base)
        for codes_or_none in (codes, None):
            row = compare(
                baseline, [candidate], resamples=1000, bootstrap_resamples=400, seed=s, clusters=codes_or_none
            )
            row = row.rows[0]
            excluded = row.ci_low > 0 or row.ci_high < 0
            if codes_or_none is None:
                naive_hits += row.significant
                naive_ci_hits += excluded
            else:
                clustered_hits += row.significant
                clustered_ci_hits += excluded
    clustered, naive = clustered_hits / sets, naive_hits / sets
    print(
        f"\nICC {icc}, {clusters} clusters x {size}: false positives at alpha 0.05, randomization test clustered "
        f"{clustered:.1%} vs per query {naive:.1%}; bootstrap interval excluding 0: clustered "
        f"{clustered_ci_hits / sets:.1%} vs per query {naive_ci_hits / sets:.1%}"
    )
    assert 0.03 <= clustered <= 0.08
    assert 0.03 <= clustered_ci_hits / sets <= 0.08
    assert naive > 0.3 and naive_ci_hits / sets > 0.3  # the per-query test is fooled by the clusters


def test_at_the_reported_minimum_detectable_difference_about_80_percent_of_simulated_sets_detect_it():
    """The effect is the reported MDE (its mean over 100 pilot sets, so one unlucky pilot does not decide); 400
    sets with that true effect go through `compare`, plain, clustered, and in only 10 clusters (where normal
    quantiles promised 80% and gave 70%: the figure uses t quantiles with 9 degrees of freedom there)."""
    rng = np.random.default_rng(7)
    sets, pilots = 400, 100
    for clusters, size, icc in ((200, 1, 0.0), (60, 5, 0.5), (10, 10, 0.6)):
        codes = None if size == 1 else np.repeat(np.arange(clusters), size)
        zeros = evaluation("a", np.zeros(clusters * size))

        def draw(effect: float, clusters=clusters, size=size, icc=icc) -> Evaluation:
            return evaluation("b", effect + 0.2 * clustered_null(rng, clusters, size, icc, sd=1.0))

        reported = [
            compare(zeros, [draw(0.0)], resamples=100, bootstrap_resamples=100, clusters=codes).set_sizes[0]
            for _ in range(pilots)
        ]
        mde = float(np.mean([size.min_detectable_difference for size in reported]))
        detected = 0
        for s in range(sets):
            result = compare(zeros, [draw(mde)], resamples=1000, bootstrap_resamples=100, seed=s, clusters=codes)
            detected += result.rows[0].significant
        rate = detected / sets
        print(f"\n{clusters} clusters x {size} (ICC {icc}): reported MDE {mde:.4f}, detected in {rate:.1%} of {sets}")
        assert 0.70 <= rate <= 0.90


def test_under_30_clusters_the_minimum_detectable_difference_uses_t_quantiles():
    rng = np.random.default_rng(5)
    codes = np.repeat(np.arange(10), 6)
    grouped = clustered_null(rng, 10, 6, 0.6)
    means = grouped.reshape(10, 6).mean(axis=1)
    t = scipy_stats.t.ppf(0.975, 9) + scipy_stats.t.ppf(0.8, 9)
    size = set_size("ndcg@10", grouped, codes)
    assert size.min_detectable_difference == pytest.approx(t * means.std(ddof=1) / np.sqrt(10), rel=1e-9)


def test_the_minimum_detectable_difference_is_the_textbook_formula_on_cluster_means():
    rng = np.random.default_rng(3)
    z = scipy_stats.norm.ppf(0.975) + scipy_stats.norm.ppf(0.8)
    plain = rng.normal(0.01, 0.15, 300)
    size = set_size("ndcg@10", plain, detect=0.02)
    assert size.min_detectable_difference == pytest.approx(z * plain.std(ddof=1) / np.sqrt(300), rel=1e-12)
    expected_n = (z * plain.std(ddof=1) / 0.02) ** 2  # n = ((z_a + z_b) sd / d)^2
    assert size.queries_needed == pytest.approx(expected_n, abs=1)
    codes = np.repeat(np.arange(40), 5)
    grouped = clustered_null(rng, 40, 5, 0.6)
    means = grouped.reshape(40, 5).mean(axis=1)
    clustered = set_size("ndcg@10", grouped, codes, detect=0.02)
    assert clustered.min_detectable_difference == pytest.approx(z * means.std(ddof=1) / np.sqrt(40), rel=1e-9)
    assert clustered.clusters_needed == pytest.approx((z * means.std(ddof=1) / 0.02) ** 2, abs=1)


def test_with_equal_clusters_the_clustered_tests_are_scipys_tests_on_cluster_means():
    rng = np.random.default_rng(11)
    codes = np.repeat(np.arange(12), 4)
    differences = clustered_null(rng, 12, 4, 0.5) + 0.03
    means = differences.reshape(12, 4).mean(axis=1)
    assert paired_t_tests(differences, codes)[0] == pytest.approx(scipy_stats.ttest_1samp(means, 0.0).pvalue, rel=1e-9)
    exact = scipy_stats.permutation_test(
        (means,), np.mean, permutation_type="samples", n_resamples=np.inf, alternative="two-sided"
    ).pvalue  # all 2^12 sign patterns
    assert randomization_tests(differences, codes, resamples=50_000, seed=1)[0] == pytest.approx(exact, abs=0.006)


def test_clustered_intervals_are_wider_on_clustered_data_by_the_design_effect():
    rng = np.random.default_rng(5)
    clusters, size, icc = 60, 8, 0.6
    codes = np.repeat(np.arange(clusters), size)
    values = 0.5 + clustered_null(rng, clusters, size, icc, sd=0.2)
    low_c, high_c = bootstrap_intervals(values, codes, resamples=4000, seed=1)
    low_p, high_p = bootstrap_intervals(values, None, resamples=4000, seed=1)
    effect = design_effects(values, codes)[0]
    kish = 1 + (size - 1) * icc  # expected design effect of equal clusters
    bootstrap_ratio = resampled_means(values, codes, 4000, 2).var() / resampled_means(values, None, 4000, 2).var()
    print(f"\ndesign effect {effect:.2f}, Kish {kish:.2f}, bootstrap variance ratio {bootstrap_ratio:.2f}")
    assert effect == pytest.approx(kish, rel=0.35)
    assert effect == pytest.approx(bootstrap_ratio, rel=0.15)
    width_ratio = (high_c - low_c)[0] / (high_p - low_p)[0]
    assert width_ratio > 1.5 and width_ratio == pytest.approx(np.sqrt(effect), rel=0.1)


def test_clustered_intervals_equal_per_query_ones_when_every_cluster_is_one_query():
    rng = np.random.default_rng(6)
    values = rng.random(500)
    singletons = np.arange(500)
    same_draws = bootstrap_intervals(values, singletons, resamples=2000, seed=3)
    plain = bootstrap_intervals(values, None, resamples=2000, seed=3)
    assert np.allclose(same_draws, plain, atol=1e-12)
    other_draws = bootstrap_intervals(values, singletons, resamples=2000, seed=4)
    assert np.allclose(other_draws, plain, atol=0.005)  # within resampling noise
    assert design_effects(values, singletons)[0] == pytest.approx(1.0, rel=1e-12)
    assert randomization_tests(values - 0.5, singletons, 2000, 1) == randomization_tests(values - 0.5, None, 2000, 1)
    # a release whose questions each come from a different document: the plain path, no codes at all
    distinct = resolve_clusters([f"q{i}" for i in range(5)], "auto", lambda q: f"doc-{q}")
    assert distinct.by == "document" and distinct.codes is None and distinct.groups == 5


def test_document_clusters_fall_back_to_the_query_and_say_so():
    documents = {"q1": "d1", "q2": "d1", "q3": "d2"}
    clusters = resolve_clusters(["q1", "q2", "q3", "real"], "document", documents.get)
    assert clusters.codes.tolist()[:2] == [clusters.codes[0]] * 2 and len(set(clusters.codes.tolist())) == 3
    assert clusters.alone == 1 and "1 queries with no known source document" in clusters.describe()
    unknown = resolve_clusters(["a", "b"], "document", None)
    assert unknown.by == "query" and "no source document known" in unknown.describe()
    assert resolve_clusters(["q1", "q2"], "query", documents.get).codes is None


def test_real_queries_that_share_relevant_documents_resample_together_transitively():
    relevant = {"q1": ["d1"], "q2": ["d1", "d2"], "q3": ["d2"], "q4": ["d9"], "q5": [], "q6": ["d7"], "q7": ["d8"]}
    names = sorted(relevant)
    shared = resolve_clusters(names, "relevant", relevant=relevant)
    codes = shared.codes.tolist()
    assert codes[0] == codes[1] == codes[2] and len(set(codes)) == 5  # q1-q2 by d1, q2-q3 by d2; the rest alone
    assert (shared.by, shared.groups, shared.alone) == ("relevant", 5, 4)
    assert "7 queries in 5 clusters" in shared.describe()
    auto = resolve_clusters(names, "auto", relevant=relevant)
    assert auto.codes is None and auto.sharing == 3  # auto stays per query, and says that three may not be independent
    assert "--cluster-by relevant" in auto.describe()


def test_a_clusters_file_groups_queries_by_the_field_the_user_names(tmp_path):
    from testset_builder.errors import InputError
    from testset_builder.export.queries import read_query_clusters

    path = tmp_path / "sessions.csv"
    path.write_text("query_id,session\nq1,s1\nq2,s1\nq3,s2\nq4,\n", encoding="utf-8")
    given = read_query_clusters(path, "session")
    assert given == {"q1": "s1", "q2": "s1", "q3": "s2"}
    clusters = resolve_clusters(["q1", "q2", "q3", "q4"], "auto", {"q1": "doc"}.get, given=given)
    assert clusters.by == "given" and clusters.groups == 3 and clusters.alone == 1  # q4 has none: alone
    with pytest.raises(InputError, match="--cluster-field"):
        read_query_clusters(path, "user")
    with pytest.raises(InputError, match="needs --clusters"):
        resolve_clusters(["q1"], "given")


def test_score_and_compare_cluster_by_a_file_or_by_shared_relevant_documents(tmp_path, capsys):
    import json

    from testset_builder.cli import main

    qrels, a, b = tmp_path / "qrels.tsv", tmp_path / "a.trec", tmp_path / "b.trec"
    qrels.write_text("".join(f"q{i} 0 d{i // 2} 1\n" for i in range(8)))  # q0-q1 share d0, q2-q3 d1, ...
    a.write_text("".join(f"q{i} Q0 d{i // 2} 1 1.0 a\n" for i in range(8)))
    b.write_text("".join(f"q{i} Q0 x{i} 1 1.0 b\n" for i in range(8)))
    clusters = tmp_path / "users.jsonl"
    clusters.write_text("".join(json.dumps({"id": f"q{i}", "user": f"u{i % 3}"}) + "\n" for i in range(8)))
    runs = [str(a), str(b)]
    assert main(["score", "--qrels", str(qrels), "--run", str(a), "--json"]) == 0
    said = json.loads(capsys.readouterr().out)["clusters"]
    assert said["by"] == "query" and said["queries_sharing_relevant_documents"] == 8
    assert main(["compare", *runs, "--qrels", str(qrels), "--cluster-by", "relevant", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["clusters"]["clusters"] == 4
    assert main(["compare", *runs, "--qrels", str(qrels), "--clusters", str(clusters), "--cluster-field", "user"]) == 0
    assert "by the clusters file: 8 queries in 3 clusters" in " ".join(capsys.readouterr().out.split())


def test_shared_relevant_clusters_are_the_same_whatever_the_hash_seed_and_refused_when_they_swallow_the_set(tmp_path):
    import subprocess
    import sys

    script = (
        "from testset_builder.metrics.clusters import resolve_clusters\n"
        "relevant = {f'q{i}': [f'd{i % 7}', f'd{(i * 3) % 11}x'] for i in range(30)}\n"
        "relevant.update({f'r{i}': [f'solo{i}'] for i in range(30)})\n"
        "print(resolve_clusters(sorted(relevant), 'relevant', relevant=relevant).codes.tolist())\n"
    )
    seen = {
        subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONHASHSEED": str(seed)},
                       capture_output=True, text=True, check=True).stdout
        for seed in (1, 2, 3, 4)
    }  # fmt: skip
    assert len(seen) == 1  # the same clusters, so the same seeded intervals, on every run
    chained = {f"q{i}": [f"d{i}", f"d{i + 1}"] for i in range(10)}  # each shares with the next: one chain
    with pytest.raises(InputError, match="joins 10 of the 10 queries into one cluster"):
        resolve_clusters(sorted(chained), "relevant", relevant=chained)
    auto = resolve_clusters(sorted(chained), "auto", relevant=chained)
    assert auto.sharing == 10 and "--cluster-by relevant" not in auto.describe()  # not suggested where it cannot work


def _joined_by_hand(query_ids, relevant):
    """Clusters by walking the pairs: a query joins every earlier query with a document in common, transitively."""
    cluster = {q: {q} for q in query_ids}
    for q in query_ids:
        for p in query_ids:
            if p < q and set(relevant.get(q, ())) & set(relevant.get(p, ())) and cluster[p] is not cluster[q]:
                merged = cluster[p] | cluster[q]
                for member in merged:
                    cluster[member] = merged
    return {q: min(cluster[q]) for q in query_ids}


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_shared_relevant_clusters_match_joining_the_queries_by_hand_from_a_mapping_or_a_qrels_table(data):
    from testset_builder.metrics.clusters import RelevantPairs
    from testset_builder.tables import Qrels

    n = data.draw(st.integers(0, 25))
    names = sorted(f"q{i:02d}" for i in range(n))
    graded = {
        q: data.draw(st.dictionaries(st.sampled_from([f"c{j}" for j in range(30)]), st.integers(0, 2), max_size=3))
        for q in [*names, "not-evaluated"]
    }
    document_of = {f"c{j}": f"doc{j // 3}" for j in range(30)}.get  # three chunks a document
    relevant = {q: {document_of(c) for c, g in by.items() if g >= 1} for q, by in graded.items()}
    expected = _joined_by_hand(names, relevant)
    pairs = RelevantPairs.from_table(Qrels.from_dict({q: by for q, by in graded.items() if by}).table, 1, document_of)
    for given_as in (relevant, pairs):
        try:
            clusters = resolve_clusters(names, "relevant", relevant=given_as)
        except InputError:  # one cluster holds more than half: refused, as the hand count says it must be
            assert max(list(expected.values()).count(r) for r in expected.values()) > n / 2
            continue
        codes = clusters.codes.tolist() if clusters.codes is not None else list(range(n))
        together = {(a, b) for a in range(n) for b in range(n) if codes[a] == codes[b]}
        assert together == {(a, b) for a in range(n) for b in range(n) if expected[names[a]] == expected[names[b]]}
        assert clusters.alone == sum(list(expected.values()).count(r) == 1 for r in expected.values())


def test_a_long_chain_of_queries_in_any_order_is_one_cluster_rooted_at_its_smallest_query():
    from testset_builder.metrics.clusters import RelevantPairs, _shared

    n = 3000
    order = np.random.default_rng(5).permutation(n)  # the chain's neighbours far apart in the evaluated order
    names = [f"q{i:05d}" for i in range(n)]
    links = {names[order[i]]: [f"d{i}", f"d{i + 1}"] for i in range(n)}  # each shares a document with the next
    keys, alone, largest = _shared(names, RelevantPairs.from_mapping(links))
    assert set(keys) == {"r:0"} and (alone, largest) == (0, n)


def test_synthetic_questions_cluster_by_document_and_logged_queries_by_session_side_by_side():
    documents = {"syn1": "doc-a", "syn2": "doc-a", "syn3": "doc-b"}.get
    sessions = {"real1": "s1", "real2": "s1", "real3": "s2"}.get
    names = ["real1", "real2", "real3", "real4", "syn1", "syn2", "syn3"]
    both = resolve_clusters(names, "auto", documents, session=sessions)
    codes = dict(zip(names, both.codes.tolist()))
    assert codes["syn1"] == codes["syn2"] != codes["syn3"] and codes["real1"] == codes["real2"] != codes["real3"]
    assert (both.by, both.groups, both.alone) == ("document and session", 5, 1)  # real4: neither, alone
    assert "queries with neither are each their own cluster" in both.describe()
    only_documents = resolve_clusters(names, "document", documents, session=sessions)  # sessions not asked for
    assert (only_documents.by, only_documents.groups) == ("document", 6)
    by_session = resolve_clusters(names, "session", documents, session=sessions)
    assert (by_session.by, by_session.groups, by_session.alone) == ("session", 6, 4)
    none_known = resolve_clusters(["q1", "q2"], "session", session=lambda q: None)
    assert none_known.codes is None and "(no session known)" in none_known.describe() and none_known.worth_saying
    nothing = resolve_clusters(["q1", "q2"], "auto", lambda q: None, session=lambda q: None)
    assert "no source document or session known" in nothing.describe()
