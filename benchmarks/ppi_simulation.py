"""The prediction-powered figures' own design, drawn many times: bias, spread, standard errors and coverage that ten
draws of the workflow check cannot tell from noise (its draws share every system, so a cell moves in steps of a
tenth).

It reads a pool the workflow check built (``benchmarks/.cache/workflow/<collection>-pooled[-knowing|-shared-task]``,
from ``workflow_check.py``; run that first) and does, per draw, what the commands do, in process: the estimates as
`propose` stored them (the prior fitted without the collection), a Poisson draw of a tenth of the pool with `select`'s
inclusion probabilities, the refit on the drawn verdicts as `estimate` makes it (cross-validated, each query scored by
the model of its fold, one column per pooled system) unless ``--no-refit``, and each system's prediction-powered and
human-only figures by :mod:`testset_builder.metrics.ppi`, against its figure on the pool's complete labels.

    python benchmarks/ppi_simulation.py --domain npl --pool knowing --draws 40
    python benchmarks/ppi_simulation.py --domain npl --pool plain --systems bm25,hybrid-0.5 --no-refit

Per metric and system: the mean error (bias), the errors' spread, the mean standard error and the share of draws
whose 95% interval holds the figure; and for nDCG@10, the error by how many relevant pairs a query's pool holds.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import estimate_transfer as transfer
import workflow_check as workflow

from testset_builder.export import read_qrels, read_run
from testset_builder.metrics import ppi
from testset_builder.retrieval.pool import RUN_PREFIX
from testset_builder.stages import estimate, selection
from testset_builder.store import estimates as stored
from testset_builder.store import open_workspace, rows

METRICS = {"precision": 10, "ndcg": 10, "recall": 100}
BANDS = ((0, 0), (1, 4), (5, 9), (10, 19), (20, 10**9))  # a query's relevant pairs in the pool, for nDCG's errors


class Pool:
    """What the workflow check's base workspace holds: the pooled pairs, their stored estimates and features (each
    pooled system's column besides), `select`'s inclusion probabilities for a tenth of the pool, and the truth."""

    def __init__(self, root: Path, folder: Path, systems: list[str] | None):
        qrels = read_qrels(folder / "qrels" / "test.tsv").to_dict()
        top = max((g for by in qrels.values() for g in by.values()), default=1)
        with open_workspace(root / "base") as ws:
            estimates = stored.estimates(ws.db)
            pooled = sorted(stored.candidate_pairs(ws.db))
            best = rows.best_ranks_by(ws.db, RUN_PREFIX)
            features, _, _ = estimate._workspace_features(ws, pooled)
            ranked = list(rows.ranks_by(ws.db, RUN_PREFIX))
            discounts, scores = estimate.system_discounts(ranked), estimate.system_scores(ranked)
        self.keys = [pair for pair in pooled if pair in estimates and pair in features]
        self.p = np.array([estimates[pair].p_relevant for pair in self.keys])
        ranks = [min(selection.best_rank(estimates[pair]), best.get(pair, math.inf)) for pair in self.keys]
        self.pi = selection.inclusion_probabilities(self.p, round(len(self.keys) / 10), 0.2, ranks)  # as workflow
        self.grade = np.array([transfer.tool_grade(qrels.get(q, {}).get(c, 0), top) for q, c in self.keys])
        self.label = (self.grade >= 1).astype(int)
        matrix = np.vstack([features[pair] for pair in self.keys])
        self.systems, self.matrix = estimate.with_systems(matrix, self.keys, discounts, pooled, scores, features)
        position = {pair: i for i, pair in enumerate(self.keys)}
        self.runs: dict[str, dict[tuple[str, str], int]] = {}
        found = sorted((root / "runs").glob("*.trec"))
        unknown = sorted(set(systems or ()) - {path.stem for path in found})
        if unknown:
            held = ", ".join(path.stem for path in found)
            raise SystemExit(f"no run {', '.join(unknown)} in {root / 'runs'}; it holds {held}")
        for path in found:
            if systems and path.stem not in systems:
                continue
            depth = max(METRICS.values())
            self.runs[path.stem] = {
                (q, c): rank for q, c, _, rank in read_run(path).ranked_rows() if rank <= depth and (q, c) in position
            }
        self.relevant_in_query: dict[str, int] = {}
        for (query_id, _), label in zip(self.keys, self.label):
            self.relevant_in_query[query_id] = self.relevant_in_query.get(query_id, 0) + int(label)

    def pairs(self, ranks, drawn: np.ndarray, p: np.ndarray) -> list[ppi.PooledPair]:
        out = []
        for i, (q, c) in enumerate(self.keys):
            given = bool(drawn[i])
            label = int(self.label[i]) if given else None
            grade = int(self.grade[i]) if given else None
            probability = float(self.pi[i]) if given else None
            out.append(ppi.PooledPair(q, ranks.get((q, c)), float(p[i]), probability, label, float(self.pi[i]), grade))
        return out

    def complete(self, ranks) -> list[ppi.PooledPair]:
        """Every pair labelled for sure: the figures the intervals aim at."""
        return [
            ppi.PooledPair(q, ranks.get((q, c)), float(self.label[i]), 1.0, int(self.label[i]), 1.0, int(self.grade[i]))
            for i, (q, c) in enumerate(self.keys)
        ]

    def truth(self, ranks) -> dict[str, float]:
        return {m: ppi.estimate(self.complete(ranks), m, k, "human").estimate for m, k in METRICS.items()}

    def refitted(self, drawn: np.ndarray, prior: estimate.RelevanceModel) -> tuple[np.ndarray, str]:
        """P(relevant) after `estimate` refits on the drawn verdicts (each fold's queries by its fold's model)."""
        index = np.flatnonzero(drawn)
        fitted = estimate.fitted_on(
            self.matrix, self.keys, index, self.label[index].astype(float), 1.0 / self.pi[index], prior, self.systems
        )
        p, _ = fitted.scored()
        return np.round(p, 6), fitted.validation.reason.split(":")[0]


def by_query(pairs: list[ppi.PooledPair], metric: str, k: int) -> dict[str, float]:
    """Each query's part of the prediction-powered figure (the figure is their mean): its expected figure under the
    recalibrated estimates plus its drawn verdicts' corrections, over the answerable shares' weights."""
    pairs, groups, labelled = ppi._grouped(pairs)
    calibration = ppi._Calibration.of(pairs, groups, labelled)
    drawn = set(labelled)
    out = {}
    for query_id, members in groups.items():
        known, p = calibration.estimates[query_id]
        gains = np.array([ppi._weight(metric, pairs[i].rank, k) for i in members])
        total = 0.0
        for a, weight in calibration.answerable_of(query_id):
            base, uncertain, values, _ = ppi.query_outcomes(
                metric, k, p, known, gains, [pairs[i] for i in members], calibration.share(query_id), a
            )
            value = base
            for row, j in enumerate(uncertain):
                if members[j] in drawn:
                    value += (float(values[row, ppi._outcome(metric, pairs[members[j]])]) - base) / pairs[
                        members[j]
                    ].probability
            total += weight * value
        out[query_id] = total
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", default="npl")
    parser.add_argument("--pool", choices=("plain", "knowing", "shared-task"), default="knowing")
    parser.add_argument("--draws", type=int, default=40)
    parser.add_argument("--systems", default="", help="comma-separated run names (default: every pooled run)")
    parser.add_argument("--no-refit", action="store_true", help="keep propose's estimates (no `estimate` after review)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--queries", type=int, default=60, help="as the workflow check was given (its prior's fit)")
    args = parser.parse_args(argv)
    folders = transfer.domains_found([args.domain])
    root = workflow.CACHE / f"{args.domain}-pooled{'' if args.pool == 'plain' else '-' + args.pool}"
    if not folders or not (root / "base").exists():
        print(f"ppi simulation: no pool at {root}; run workflow_check.py --domains {args.domain} first; skipped")
        return {}
    started = time.perf_counter()
    pool = Pool(root, folders[0], [s for s in args.systems.split(",") if s] or None)
    prior = workflow.held_out_prior(folders[0], args.queries)
    truth = {system: pool.truth(ranks) for system, ranks in pool.runs.items()}
    found: dict[tuple[str, str, str], list[tuple[float, float, bool]]] = {}  # estimate, standard error, covered
    errors: dict[str, list[tuple[int, float]]] = {}  # system -> (query's relevant pairs, nDCG@10 error) per draw
    refits: dict[str, int] = {}
    exact_by_query: dict[str, dict[str, float]] = {}
    rng = np.random.default_rng(args.seed)
    for _ in range(args.draws):
        drawn = rng.random(len(pool.keys)) < pool.pi
        p = pool.p
        if not args.no_refit:
            p, decided = pool.refitted(drawn, prior)
            refits[decided] = refits.get(decided, 0) + 1
        for system, ranks in pool.runs.items():
            pairs = pool.pairs(ranks, drawn, p)
            for metric, k in METRICS.items():
                for use in ("ppi", "human"):
                    interval = ppi.estimate(pairs, metric, k, use)
                    covered = interval.low is not None and interval.low <= truth[system][metric] <= interval.high
                    found.setdefault((system, metric, use), []).append(
                        (interval.estimate, interval.std_error or 0.0, bool(covered), interval.low is not None)
                    )
            if system not in exact_by_query:
                exact_by_query[system] = by_query(pool.complete(ranks), "ndcg", 10)
            exact = exact_by_query[system]
            for query_id, value in by_query(pairs, "ndcg", 10).items():
                errors.setdefault(system, []).append((pool.relevant_in_query[query_id], value - exact[query_id]))
    print(
        f"\n{args.domain}, {args.pool} pool: {len(pool.keys)} pairs, {pool.pi.sum():.0f} verdicts expected a draw, "
        f"{args.draws} draws, {len(pool.runs)} systems ({time.perf_counter() - started:.0f} s)"
        + (f"; the refit: {', '.join(f'{n} {why}' for why, n in sorted(refits.items()))}" if refits else "")
    )
    out: dict = {}
    for metric in METRICS:
        for use in ("ppi", "human"):
            z, hits, cells = [], [], []
            bounded = any(found[(system, metric, use)][0][3] for system in pool.runs)  # human-only ratios: none
            for system in pool.runs:
                values = np.array(found[(system, metric, use)], dtype=float)
                error = values[:, 0] - truth[system][metric]
                if not bounded:
                    cells.append(f"{system} {error.mean():+.3f} ({error.std():.3f})")
                    continue
                usable = values[:, 1] > 0  # a zero-width interval has no ratio; it counts in the coverage
                z.extend(error[usable] / values[usable, 1])
                hits.extend(values[:, 2])
                cells.append(
                    f"{system} {error.mean():+.3f} ({error.std():.3f} / {values[:, 1].mean():.3f}, "
                    f"{values[:, 2].mean():.2f})"
                )
            if not bounded:
                out[f"{metric} {use}"] = {"coverage": None, "rms_z": None}
                print(f"  {metric}@{METRICS[metric]} {use:<5} no interval")
                print("    bias (spread): " + "; ".join(cells))
                continue
            z = np.array(z)
            coverage = float(np.mean(hits))
            rms = float(np.sqrt(np.mean(z**2))) if len(z) else float("nan")
            out[f"{metric} {use}"] = {"coverage": coverage, "rms_z": rms}
            print(f"  {metric}@{METRICS[metric]} {use:<5} coverage {coverage:.2f}, rms error / SE {rms:.2f}")
            print("    bias (spread / SE, coverage): " + "; ".join(cells))
    print("  nDCG@10's mean error per query, by the relevant pairs its pool holds (the figure is the queries' mean):")
    for system, pairs in errors.items():
        parts = []
        for low, high in BANDS:
            inside = [e for r, e in pairs if low <= r <= high]
            if inside:
                share = len(inside) / len(pairs)
                parts.append(f"{low}-{high if high < 10**9 else '...'}: {np.mean(inside):+.3f} x {share:.2f}")
        print(f"    {system}: " + "; ".join(parts))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
