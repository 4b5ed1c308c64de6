"""Metrics speed and memory against pytrec_eval and ranx, measured in the same run.

100,000 queries x 100 retrieved chunks, ~5 graded relevant chunks per query (about half of them retrieved), scores
rounded to 4 decimals so ties occur. Each contender runs in its own process (so peak memory is its own), first on a
small file to warm up (imports, numba compilation for ranx), then timed end to end: read the TREC qrels and run
from disk and compute recall@10, precision@10, MRR, nDCG@10, MAP and hit rate@5. The scoring-only time (inputs
already in memory) is reported too.

Then whole processes, as a user runs them from a shell, at two sizes: the 100,000-query run, and 20 runs of 50
queries (a small job, where start-up is most of the time): ``testset-builder score --json`` with its bootstrap
intervals, recall@k curve and set-size line, and with ``--no-ci``, against a Python script that reads the same
files and scores them with pytrec_eval, and one with ranx. The small job has two more, which score nothing. The
read floor: a script that imports numpy, reads the files and looks up each retrieved chunk's grade, the least any
Python scorer of these files does. The import floor: a script that imports numpy and the parts of Arrow
testset-builder reads and ranks with, and does nothing else, the least a scorer built on Arrow does. Bytecode is
cached as an installed package's is (``PYTHONPYCACHEPREFIX`` under the cache folder), and each command runs once
before it is timed.

    python benchmarks/metrics_speed.py [--queries 100000] [--depth 100] [--repeat 3] [--small-only]

``--repeat N`` runs each contender N times (a fresh process each, interleaved) and keeps its fastest end-to-end
run: on a shared machine the minimum is the least disturbed figure. ``--small-only`` times the small job alone.
Each whole-process row keeps its time over pytrec_eval's (``time_vs_pytrec_eval``: at most 1 is the goal for the
small job) and the load average it ran at.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _proc import high_water_mb

CACHE = Path(__file__).resolve().parent / ".cache"
OURS = "recall@10,precision@10,mrr,ndcg@10,map,hit_rate@5"
TREC = ["recall.10", "P.10", "recip_rank", "ndcg_cut.10", "map", "success.5"]
FLOORS = ("python read floor", "numpy + Arrow import floor")  # the small job's floors: timed, scoring nothing
RANX = ["recall@10", "precision@10", "mrr", "ndcg@10", "map", "hit_rate@5"]


def generate(queries: int, depth: int, directory: Path, seed: int = 0) -> tuple[Path, Path]:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    directory.mkdir(parents=True, exist_ok=True)
    qrels_path, run_path = directory / "qrels.trec", directory / "run.trec"
    if qrels_path.exists() and run_path.exists():
        return qrels_path, run_path
    rng = np.random.default_rng(seed)
    pool = 1_000_000
    docs = rng.integers(0, pool, size=(queries, depth))
    docs.sort(axis=1)
    docs += np.arange(depth)  # distinct within a row: sorted values shifted by position
    for row in range(0, queries, 10_000):  # shuffle each row so doc order is not score order
        block = docs[row : row + 10_000]
        rng.permuted(block, axis=1, out=block)
    scores = np.round(np.sort(rng.random((queries, depth)) * 30, axis=1)[:, ::-1], 4)
    qids = np.repeat(np.char.add("q", np.arange(queries).astype(str)), depth)
    write = pacsv.WriteOptions(include_header=False, delimiter=" ", quoting_style="none")
    run = pa.table(
        {
            "q": qids,
            "q0": np.full(queries * depth, "Q0"),
            "d": np.char.add("d", docs.ravel().astype(str)),
            "rank": np.tile(np.arange(1, depth + 1), queries),
            "s": scores.ravel(),
            "tag": np.full(queries * depth, "bench"),
        }
    )
    pacsv.write_csv(run, run_path, write)
    n_rel = rng.integers(1, 10, size=queries)
    rows = np.repeat(np.arange(queries), n_rel)
    retrieved = rng.random(len(rows)) < 0.5
    judged = np.where(
        retrieved,
        docs[rows, rng.integers(0, depth, size=len(rows))],
        pool + depth + rng.integers(0, pool, size=len(rows)),
    )
    grades = rng.choice([0, 1, 1, 2, 2], size=len(rows))
    qrels = pa.table(
        {
            "q": np.char.add("q", rows.astype(str)),
            "it": np.zeros(len(rows), int),
            "d": np.char.add("d", judged.astype(str)),
            "g": grades,
        }
    )
    keys = qrels.group_by(["q", "d"]).aggregate([("g", "max")]).rename_columns(["q", "d", "g"])  # one grade per pair
    keys = keys.append_column("it", pa.array(np.zeros(keys.num_rows, int))).select(["q", "it", "d", "g"])
    pacsv.write_csv(keys, qrels_path, write)
    return qrels_path, run_path


def contender(name: str, qrels_path: str, run_path: str, warm_qrels: str, warm_run: str) -> dict:
    """Runs inside a fresh process: warm up, then time end to end from files."""

    if name == "testset-builder":
        from testset_builder.export import read_qrels, read_run
        from testset_builder.metrics import build_grade_matrix, parse_metrics, required_depth, score_matrix

        specs = parse_metrics(OURS)

        def load(q, r):
            return read_qrels(q), read_run(r)

        def score(qrels, run):
            return score_matrix(build_grade_matrix(qrels, run, depth=required_depth(specs)), specs).means()

    elif name == "pytrec_eval":
        import pytrec_eval

        def load(q, r):
            with open(q) as qh, open(r) as rh:
                return pytrec_eval.parse_qrel(qh), pytrec_eval.parse_run(rh)

        def score(qrels, run):
            per_query = pytrec_eval.RelevanceEvaluator(qrels, set(TREC)).evaluate(run)
            return {m: float(np.mean([v[m.replace(".", "_")] for v in per_query.values()])) for m in TREC}

    elif name == "ranx":
        import warnings

        warnings.simplefilter("ignore")
        import ranx

        def load(q, r):
            return ranx.Qrels.from_file(q, kind="trec"), ranx.Run.from_file(r, kind="trec")

        def score(qrels, run):
            return {k: float(v) for k, v in ranx.evaluate(qrels, run, RANX, make_comparable=True).items()}

    else:
        raise ValueError(name)
    score(*load(warm_qrels, warm_run))
    start = time.perf_counter()
    loaded = load(qrels_path, run_path)
    loaded_at = time.perf_counter()
    means = score(*loaded)
    end = time.perf_counter()
    return {
        "name": name,
        "end_to_end_s": end - start,
        "load_s": loaded_at - start,
        "score_s": end - loaded_at,
        "peak_rss_mb": high_water_mb(),
        "means": means,
    }


def measure(name: str, paths: tuple[Path, Path], warm: tuple[Path, Path]) -> dict:
    here = str(Path(__file__).resolve().parent)
    arguments = ", ".join(repr(str(a)) for a in (name, paths[0], paths[1], warm[0], warm[1]))
    code = (
        f"import json, sys; sys.path.insert(0, {here!r}); from metrics_speed import contender; "
        f"print(json.dumps(contender({arguments})))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        return {
            "name": name,
            "error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}",
        }
    return json.loads(done.stdout.strip().splitlines()[-1])


SCRIPTS = {  # whole-process contenders: read the qrels and every run named, print each run's means as JSON
    "pytrec_eval": """
import glob, json, sys
import pytrec_eval
metrics = {TREC!r}
with open(sys.argv[1]) as handle:
    evaluator = pytrec_eval.RelevanceEvaluator(pytrec_eval.parse_qrel(handle), set(metrics))
out = {{}}
for path in sorted(glob.glob(sys.argv[2])):
    with open(path) as handle:
        per_query = evaluator.evaluate(pytrec_eval.parse_run(handle))
    out[path] = {{m: sum(v[m.replace(".", "_")] for v in per_query.values()) / len(per_query) for m in metrics}}
print(json.dumps(out))
""",
    # not a scorer: the least any Python scorer of these files does (import numpy, read every file, look up each
    # retrieved chunk's grade); its time is the floor under every contender's whole process
    "python read floor": """
import glob, json, sys
import numpy as np
with open(sys.argv[1], "rb") as handle:
    words = handle.read().split()
grades = {{(words[i], words[i + 2]): int(words[i + 3]) for i in range(0, len(words), 4)}}
out = {{}}
for path in sorted(glob.glob(sys.argv[2])):
    with open(path, "rb") as handle:
        words = handle.read().split()
    scores = np.array(words[4::6]).astype(np.float64)
    found = np.fromiter((grades.get(pair, 0) for pair in zip(words[0::6], words[2::6])), np.int8, len(scores))
    out[path] = int(found.sum())
print(json.dumps(out))
""",
    # not a scorer: Python importing the libraries testset-builder's score reads and ranks with (numpy, and Arrow's
    # CSV reader and compute functions), reading nothing; its time is the floor under that design's whole process
    "numpy + Arrow import floor": """
import json
import numpy, pyarrow, pyarrow.compute, pyarrow.csv
print(json.dumps({{}}))
""",
    "ranx": """
import glob, json, sys, warnings
warnings.simplefilter("ignore")
import ranx
qrels = ranx.Qrels.from_file(sys.argv[1], kind="trec")
out = {{}}
for path in sorted(glob.glob(sys.argv[2])):
    run = ranx.Run.from_file(path, kind="trec")
    out[path] = {{k: float(v) for k, v in ranx.evaluate(qrels, run, {RANX!r}, make_comparable=True).items()}}
print(json.dumps(out))
""",
}


def _environment() -> dict:
    """The environment a user's installed package runs in: bytecode cached (here under the cache folder)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(CACHE / "pycache")
    return env


def process_commands(qrels: Path, runs: str, floor: bool = False) -> dict[str, list[str]]:
    """Each whole-process contender's command line for the qrels and the runs (a glob); the read floor with
    ``floor`` (the small job: at 10 million lines its word lists would not fit in memory)."""
    ours = [sys.executable, "-m", "testset_builder", "score", "--qrels", str(qrels), "--runs", runs]
    ours += ["--metrics", OURS, "--json"]
    commands = {"testset-builder score": ours, "testset-builder --no-ci": [*ours, "--no-ci"]}
    for name, script in SCRIPTS.items():
        if name in FLOORS and not floor:
            continue
        commands[name] = [sys.executable, "-c", script.format(TREC=TREC, RANX=RANX), str(qrels), runs]
    return commands


def time_process(command: list[str]) -> tuple[float, dict | str]:
    """Wall time of one whole process, and its JSON output (or its last error line)."""
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=_environment())
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return elapsed, lines[-1] if lines else f"exit {done.returncode}"
    return elapsed, json.loads(done.stdout)


def _means_of(name: str, output: dict) -> list[list[float]] | None:
    """Each run's six means, in OURS' order, from a whole-process contender's output (None for the read floor,
    which scores nothing)."""
    if name in FLOORS:
        return None
    if name.startswith("testset-builder"):
        reports = output.get("runs", [output])
        return [[r["metrics"][m]["mean"] for m in OURS.split(",")] for r in reports]
    names = TREC if name == "pytrec_eval" else RANX
    return [[by_path[m] for m in names] for _, by_path in sorted(output.items())]


def processes(label: str, qrels: Path, runs: str, repeat: int, floor: bool = False) -> dict[str, dict]:
    """Time every whole-process contender ``repeat`` times (interleaved, after one untimed run each), keep each
    one's fastest, print the table with ratios to pytrec_eval, and check the means agree. By contender's name (so
    RESULTS.md lists each one's time and ratio)."""
    commands = process_commands(qrels, runs, floor)
    for command in commands.values():
        time_process(command)  # warm: bytecode written, files in the page cache
    best: dict[str, dict] = {}
    for _ in range(max(1, repeat)):
        for name, command in commands.items():
            elapsed, output = time_process(command)
            failed, kept = isinstance(output, str), best.get(name)
            if kept is None or ("error" in kept and not failed) or (not failed and elapsed < kept["seconds"]):
                best[name] = {"name": name, "seconds": elapsed}  # a finished run beats a failed one, then the fastest
                if failed:
                    best[name]["error"] = output
                else:
                    best[name]["means"] = _means_of(name, output)
    reference = best.get("pytrec_eval", {})
    if "seconds" in reference and "error" not in reference:
        for r in best.values():
            if "error" not in r:
                r["time_vs_pytrec_eval"] = r["seconds"] / reference["seconds"]
    load = os.getloadavg()[0]
    for r in best.values():
        r["load"] = load
    print(f"\n{label}, whole process (fastest of {max(1, repeat)}; load average {load:.1f} on {os.cpu_count()} cores):")
    print(f"{'contender':<26}{'seconds':>10}{'vs pytrec_eval':>16}")
    for r in best.values():
        if "error" in r:
            print(f"{r['name']:<26} failed: {r['error']}")
            continue
        ratio = reference["seconds"] / r["seconds"] if "seconds" in reference and "error" not in reference else None
        said = f"{ratio:>15.2f}x" if ratio else f"{'':>16}"
        how = "" if r is reference or not ratio else f"  ({'faster' if ratio >= 1 else 'slower'})"
        print(f"{r['name']:<26}{r['seconds']:>10.2f}{said}{how}")
    if "means" in reference:
        for name in ("testset-builder score", "testset-builder --no-ci"):
            if "means" not in best[name]:
                continue  # it failed: said in the table
            gap = np.max(np.abs(np.subtract(best[name]["means"], reference["means"])))
            if gap > 1e-9:
                raise SystemExit(f"{name}'s means differ from pytrec_eval's by {gap}")
        print("  testset-builder's means equal pytrec_eval's within 1e-9 for every run")
    for r in best.values():
        r.pop("means", None)  # checked above; the figures keep the times
    ours = best.get("testset-builder score", {})
    if "time_vs_pytrec_eval" in ours:
        print(f"  testset-builder score takes {ours['time_vs_pytrec_eval']:.2f}x pytrec_eval's time")
    return best


def small_set(directory: Path, runs: int = 20, queries: int = 50) -> tuple[Path, str]:
    """The small job: ``runs`` runs of ``queries`` queries (100 results, ~5 graded labels a query), cached."""
    from many_runs_speed import write_set

    if not (directory / "qrels.trec").exists():
        directory.mkdir(parents=True, exist_ok=True)
        write_set(directory, runs=runs, queries=queries)
    return directory / "qrels.trec", str(directory / "runs" / "*.trec")


def small_job(repeat: int) -> dict[str, dict]:
    """The small job's whole processes, five times at least (each is cheap)."""
    return processes("20 runs x 50 queries", *small_set(CACHE / "metrics-20x50"), max(5, repeat), floor=True)


def _fastest(runs: list[dict]) -> dict:
    """The run with the least end-to-end time (an error only if every run failed)."""
    finished = [r for r in runs if "error" not in r]
    return min(finished, key=lambda r: r["end_to_end_s"]) if finished else runs[0]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=100_000)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--contenders", default="testset-builder,pytrec_eval,ranx")
    parser.add_argument("--repeat", type=int, default=1, help="runs per contender; the fastest is reported")
    parser.add_argument("--small-only", action="store_true", help="only the small job's whole processes")
    args = parser.parse_args(argv)
    if args.small_only:
        return {"small_job": small_job(args.repeat)}
    print(f"generating {args.queries:,} queries x {args.depth} results (cached in {CACHE}) ...", flush=True)
    paths = generate(args.queries, args.depth, CACHE / f"metrics-{args.queries}x{args.depth}")
    warm = generate(200, 20, CACHE / "metrics-warmup", seed=1)
    names = args.contenders.split(",")
    rounds = [[measure(name, paths, warm) for name in names] for _ in range(max(1, args.repeat))]
    results = [_fastest([r[i] for r in rounds]) for i in range(len(names))]
    ours = next(r for r in results if r["name"] == "testset-builder")
    print(
        f"\n{'contender':<16}{'end to end s':>14}{'load s':>10}{'score s':>10}{'peak MB':>10}"
        f"{'our speed-up':>14}{'our memory':>12}"
    )
    for r in results:
        if "error" in r:
            print(f"{r['name']:<16} failed: {r['error']}")
            continue
        print(
            f"{r['name']:<16}{r['end_to_end_s']:>14.2f}{r['load_s']:>10.2f}{r['score_s']:>10.2f}{r['peak_rss_mb']:>10.0f}"
            f"{r['end_to_end_s'] / ours['end_to_end_s']:>13.1f}x{ours['peak_rss_mb'] / r['peak_rss_mb']:>11.2f}x"
        )
    for r in results:
        if "error" not in r:
            print(f"  {r['name']} means: " + ", ".join(f"{k}={v:.6f}" for k, v in r["means"].items()))
    ours_by_name = dict(zip(TREC, RANX)) | {name: name for name in RANX}  # each contender's names for our metrics
    # trec_eval is the reference: its means must be ours to 1e-9. ranx orders tied scores its own way (trec_eval
    # breaks ties by chunk id), and this data has ties (scores rounded to 4 decimals), so its means may differ in
    # the seventh decimal: reported, and held to 1e-6
    allowed = {"pytrec_eval": 1e-9}
    disagreements, differences = [], []
    for r in results:
        if "error" in r or r is ours:
            continue
        for metric, value in r["means"].items():
            gap = abs(value - ours["means"][ours_by_name[metric]])
            line = f"{r['name']} {metric}: {value!r} vs ours {ours['means'][ours_by_name[metric]]!r}"
            if gap > allowed.get(r["name"], 1e-6):
                disagreements.append(line)
            elif gap > 1e-9:
                differences.append(line)
    if disagreements:  # a speed figure means nothing if the answers differ
        raise SystemExit("contenders disagree:\n  " + "\n  ".join(disagreements))
    print("  pytrec_eval's means equal ours within 1e-9; ranx's within 1e-6 (its own order of tied scores)")
    for line in differences:
        print(f"    {line}")
    whole = processes(f"{args.queries:,} queries x {args.depth}", paths[0], str(paths[1]), args.repeat)
    small = small_job(args.repeat)
    return {"metrics_speed": results, "whole_process": whole, "small_job": small}


if __name__ == "__main__":
    main()
