"""Writes ``benchmarks/RESULTS.md`` from the JSON files in ``benchmarks/results/``: what `make bench` measured, when,
on which CPU and at which load. `make bench` runs it last; run it alone to rewrite the page from the files.

    python benchmarks/results_md.py

A file `make bench` wrote holds ``benchmark``, ``title``, ``date``, ``cpu``, ``cpu_flags`` (the instruction sets that
matter for speed, :data:`SPEED_FLAGS`, it has and lacks), ``load`` and ``figures`` (what the benchmark's ``main``
returned). A file a benchmark wrote by itself (``interval_coverage.json``) holds its figures
alone; the page gives the date of its last commit and says the machine and load are not recorded.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
PAGE = HERE / "RESULTS.md"
MOST_ROWS = 60  # of one benchmark's flattened figures; the JSON file has them all


# the instruction sets that change how fast numpy, Arrow and ONNX Runtime run here: vector width (AVX2, AVX-512),
# fused multiply-add, half-precision conversion, and int8 / bf16 matrix products (VNNI, AMX)
SPEED_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx_vnni", "avx512_vnni",
    "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16",
)  # fmt: skip


def cpu_flags(cpuinfo: str | None = None) -> str:
    """Which of :data:`SPEED_FLAGS` the CPU reports (``/proc/cpuinfo``'s flags), then which it lacks: "avx2 fma ...;
    lacks amx_tile ..."; "not recorded" where the kernel does not say."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8")
        except OSError:
            return "not recorded"
    line = next((line for line in cpuinfo.splitlines() if line.startswith("flags")), None)
    if line is None:
        return "not recorded"
    reported = set(line.split(":", 1)[1].split())
    has = [flag for flag in SPEED_FLAGS if flag in reported]
    lacks = [flag for flag in SPEED_FLAGS if flag not in reported]
    if not has:
        return f"none of {' '.join(SPEED_FLAGS)}"
    return " ".join(has) + (f"; lacks {' '.join(lacks)}" if lacks else "")


def machine_line(cpu: str, flags: str | None) -> str:
    """The machine as a section names it: the CPU and its speed flags."""
    return f"{cpu} (flags: {flags or 'not recorded'})"


def cpu_model() -> str:
    """The CPU's model name as the kernel reports it, with the core count."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.1f} (5 min {five:.1f})"


def record(name: str, title: str, figures: dict) -> Path:
    """Keep one benchmark's figures with the date, the CPU and the load they were measured at."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    entry = {
        "benchmark": name,
        "title": title,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(),
        "cpu_flags": cpu_flags(),
        "load": load_average(),
        "figures": figures,
    }
    path.write_text(json.dumps(entry, indent=1, default=str) + "\n", encoding="utf-8")
    return path


def number(value) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:.4g}"


def flattened(value, prefix: str = "") -> list[tuple[str, str]]:
    """(dotted key, value) of every number or string in nested dicts; a list is given by its length."""
    if isinstance(value, dict):
        return [row for key, inner in value.items() for row in flattened(inner, f"{prefix}.{key}" if prefix else key)]
    if isinstance(value, list):
        return [(prefix, f"{len(value)} items")]
    return [(prefix, number(value))]


def coverage_table(figures: dict) -> list[str]:
    """interval_coverage.json: per collection, pool and metric, the prediction-powered interval's coverage, bias and
    width, and the coverage of the figure from the human verdicts alone."""
    lines = [
        f"{figures['draws']} draws a collection, a {figures['budget_share']:.0%} review budget, estimate "
        f"`{figures['estimate']}`. Nominal coverage is 0.95.",
        "",
        "| collection | pool | metric | PPI coverage | PPI bias | PPI width | human-only coverage |",
        "|---|---|---|---|---|---|---|",
    ]
    for collection, pools in figures["collections"].items():
        for pool, found in pools.items():
            for metric, ppi in found["ppi"].items():
                human = found.get("human", {}).get(metric, {})
                lines.append(
                    f"| {collection} | {pool} | {metric} | {number(ppi['coverage'])} | {number(ppi['bias'])} "
                    f"| {number(ppi['width'])} | {number(human.get('coverage', '-'))} |"
                )
    return lines


FORM_CHECKS = frozenset({"empty", "too short", "too long", "not a question", "copies the passage"})


def synthetic_table(figures: dict) -> list[str]:
    """synthetic.json: per collection and set (with and without the question rules, and each set's questions with
    low overlap with their source), Kendall's tau between the synthetic and the human rankings of the retrievers, and
    how many of the pairs the human labels separate significantly the set orders the same way."""
    lines = [
        f"{figures['questions_requested']} questions asked of each collection. Tau: Kendall's tau-b between the "
        "retrievers' nDCG@10 rankings, 95% bootstrap interval. Pairs: of the retriever pairs the human labels "
        "separate significantly, how many the set orders the same way (and how many it separates significantly "
        "the other way). Ceiling: the median tau between the human rankings on as many random human queries and on "
        "the rest. Rejected: questions the rules removed while the set was built (besides the checks of form); kept "
        "failing: questions in the set the rules would reject.",
        "",
        "| collection | set | questions | retrievers | tau | 95% interval | ceiling | pairs in order | other way "
        "| rejected | kept failing |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for collection, found in figures["collections"].items():
        for column, a in found["agreement"].items():
            built = found["synthesize"].get(column.split(",")[0].split("+")[0], {})
            whole_set = "," not in column
            by_rule = {k: n for k, n in built.get("by_rule", {}).items() if k not in FORM_CHECKS}
            rejected = sum(by_rule.values()) if whole_set else "-"
            failing = sum(built.get("kept_that_rules_reject", {}).values()) if whole_set else "-"
            lines.append(
                f"| {collection} | {column} | {a['questions']} | {len(found['retrievers'])} | {a['tau']:.3f} "
                f"| [{a['ci'][0]:.3f}, {a['ci'][1]:.3f}] | {found['variants'][column]['ceiling']['median']:.3f} "
                f"| {a['same_order']} of {a['human_significant_pairs']} "
                f"| {a['significant_other_way']} | {rejected} | {failing} |"
            )
    return lines


# files a benchmark writes by itself: the `make bench` name that writes it, and how its figures read best
def question_table(figures: dict) -> list[str]:
    """question_quality.json: per corpus and way of asking, the usable questions before and after the checks (hand
    grades), then the checks' precision and recall on bad questions and the model's own reading (ROC AUC)."""
    lines = [
        "Usable: hand-graded questions the chunk answers, a person would ask, with nothing dangling. Kept: those the "
        "question checks keep.",
        "",
        "| corpus | asked | questions | usable | kept by the checks | usable of those kept |",
        "|---|---|---|---|---|---|",
    ]
    for corpus, found in figures.items():
        for variant in ("one", "best-of-3", "span-first"):
            v = found[variant]
            lines.append(
                f"| {corpus} | {variant} | {v['graded']} | {v['usable_before_checks']} | {v['kept_by_checks']} | "
                f"{v['usable_after_checks']} |"
            )
    lines += [
        "",
        "| corpus | candidates graded | bad | flagged | bad flagged | precision | recall | model P(yes) AUC | "
        "judge P(2) AUC |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for corpus, found in figures.items():
        c, auc = found["checks_on_every_candidate"], found.get("model_reads_chunk_auc", {})
        lines.append(
            f"| {corpus} | {c['graded']} | {c['bad']} | {c['flagged']} | {c['bad_flagged']} | {number(c['precision'])} "
            f"| {number(c['recall'])} | {number(auc.get('answerable_p_yes'))} | {number(auc.get('judge_p_grade_2'))} |"
        )
    return lines


OWN_FILES = {
    "interval_coverage.json": ("coverage", coverage_table),
    "question_quality.json": ("questions", question_table),
}
# benchmarks `make bench` records whose figures read best as a table
TABLES = {"synthetic": synthetic_table}


def committed(path: Path) -> str:
    """The date of the last commit that changed ``path`` ("not committed" outside a git checkout or before one)."""
    import subprocess

    try:
        found = subprocess.run(
            ["git", "log", "-1", "--format=%cs", "--", path.name], cwd=path.parent, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        found = ""
    return f"committed {found}" if found else "not committed"


def section(path: Path) -> list[str]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if "figures" in data and "benchmark" in data:
        head = [
            f"## {data['title']}",
            "",
            f"`make bench BENCH={data['benchmark']}`, {data['date']}, "
            f"on {machine_line(data['cpu'], data.get('cpu_flags'))}, load {data['load']}. "
            f"File: [results/{path.name}](results/{path.name}).",
            "",
        ]
        figures, render = data["figures"], TABLES.get(data["benchmark"])
    else:
        name, render = OWN_FILES.get(path.name, (path.stem, None))
        head = [
            f"## {path.stem.replace('_', ' ')}",
            "",
            f"`make bench BENCH={name}`, {committed(path)}; the machine and load are not recorded in the file. "
            f"File: [results/{path.name}](results/{path.name}).",
            "",
        ]
        figures = data
    if render is not None:
        return head + render(figures)
    rows = flattened(figures)
    lines = head + ["| figure | value |", "|---|---|"] + [f"| {key} | {value} |" for key, value in rows[:MOST_ROWS]]
    if len(rows) > MOST_ROWS:
        lines += ["", f"{len(rows) - MOST_ROWS} more figures are in the file."]
    return lines


def page() -> str:
    lines = [
        "# Benchmark results",
        "",
        "Generated by `benchmarks/results_md.py` from `benchmarks/results/*.json`; `make bench` rewrites it. Do not",
        "edit by hand. Wall times vary with the load of a shared machine: each section says the load it ran at.",
        "",
        f"Page written {datetime.now(UTC).strftime('%Y-%m-%d')} on {machine_line(cpu_model(), cpu_flags())}, "
        f"load {load_average()}.",
    ]
    for path in sorted(RESULTS.glob("*.json")):
        lines += ["", *section(path)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> Path:
    PAGE.write_text(page(), encoding="utf-8")
    return PAGE


if __name__ == "__main__":
    print(main(sys.argv[1:]))
