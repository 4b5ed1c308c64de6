"""A small `score` starts fast: its process imports what scoring needs and nothing else, and its plain command lines
skip Typer's parsing without changing what the command receives, prints or returns."""

from __future__ import annotations

import functools
import json
import subprocess
import sys

import pytest
import typer
import typer.main
from conftest import EXAMPLES, imported_by

from testset_builder.cli import EXIT_BAD_INPUT, EXIT_OK, main
from testset_builder.cli import scoring as scoring_commands
from testset_builder.cli.direct import declared_options, direct_call

QRELS = str(EXAMPLES / "qrels.tsv")
BM25 = str(EXAMPLES / "bm25.trec")
DENSE = str(EXAMPLES / "dense.trec")

# modules a score of runs against qrels never uses: the ML stack, the LLM and web clients, the data-set libraries,
# the config and record models (pydantic), the other commands and every stage
NOT_FOR_SCORING = (
    "pandas", "scipy", "sklearn", "torch", "transformers", "sentence_transformers", "onnxruntime", "datasets",
    "huggingface_hub", "openai", "anthropic", "httpx", "fastapi", "jinja2", "pydantic", "testset_builder.config",
    "testset_builder.records", "testset_builder.stages", "testset_builder.store", "testset_builder.llm",
    "testset_builder.retrieval", "testset_builder.cli.corpus", "testset_builder.cli.labels",
    "testset_builder.cli.pipeline", "testset_builder.cli.releases", "testset_builder.cli.reviewing",
    "testset_builder.export.logs", "testset_builder.export.review_tools",
)  # fmt: skip


def write_set(folder, queries: int = 60, runs: int = 2) -> tuple[str, list[str]]:
    """Qrels and runs of ``queries`` queries: enough that the intervals use normal quantiles (scipy's t quantiles
    serve sets of fewer than :data:`~testset_builder.metrics.power.T_BELOW` queries)."""
    qrels = folder / "qrels.trec"
    qrels.write_text("".join(f"q{q} 0 d{q} 1\nq{q} 0 d{q + 1} 2\n" for q in range(queries)))
    paths = []
    for r in range(runs):
        path = folder / f"run{r}.trec"
        lines = (f"q{q} Q0 d{q + d * (r + 1)} {d + 1} {10 - d} run{r}\n" for q in range(queries) for d in range(10))
        path.write_text("".join(lines))
        paths.append(str(path))
    return str(qrels), paths


@pytest.mark.parametrize("output", [["--json"], []])
def test_a_score_process_imports_none_of_the_modules_scoring_does_not_need(output, tmp_path):
    qrels, runs = write_set(tmp_path)
    code, modules = imported_by(["score", "--qrels", qrels, *runs, *output])
    assert code == EXIT_OK
    assert "testset_builder.metrics" in modules and "testset_builder.cli.scoring_bodies" in modules  # it did score
    heavy = [m for m in modules if any(m == name or m.startswith(f"{name}.") for name in NOT_FOR_SCORING)]
    assert heavy == []


# what a plain `score --json` line never needs: the command-line parser, the terminal's tables, the plugins' scan
NOT_FOR_A_PLAIN_JSON_SCORE = ("typer", "click", "rich", "pydantic", "importlib.metadata", "testset_builder.cli.scoring")


def test_a_plain_json_score_imports_neither_typer_nor_rich_nor_the_plugin_scan(tmp_path):
    qrels, runs = write_set(tmp_path)
    code, modules = imported_by(["score", "--qrels", qrels, "--run", runs[0], "--run", runs[1], "--json"])
    assert code == EXIT_OK and "testset_builder.cli.scoring_bodies" in modules
    loaded = [m for m in modules if any(m == name or m.startswith(f"{name}.") for name in NOT_FOR_A_PLAIN_JSON_SCORE)]
    assert loaded == []


def test_a_plain_line_and_typers_parse_of_it_print_the_same_bytes_and_exit_codes(tmp_path):
    qrels, runs = write_set(tmp_path)
    for tail in (["--json"], [], ["--json", "--metrics", "nope"], ["--metrics", "nope"]):
        plain = ["score", "--qrels", qrels, "--run", runs[0], "--run", runs[1], "--resamples", "200", *tail]
        spelled = ["score", f"--qrels={qrels}", *plain[3:]]  # click's spelling: parsed by Typer
        done = [subprocess.run([sys.executable, "-m", "testset_builder", *argv], capture_output=True, text=True)
                for argv in (plain, spelled)]  # fmt: skip
        assert [(d.returncode, d.stdout, d.stderr) for d in done[1:]] == [
            (d.returncode, d.stdout, d.stderr) for d in done[:1]
        ]


@pytest.mark.parametrize("name", ["score", "compare", "baseline", "report"])
def test_the_table_of_plain_options_says_what_the_declarations_say(name):
    from testset_builder.cli.plain_options import OPTIONS

    stored = OPTIONS[name]
    declared = [option.row() for option in declared_options(getattr(scoring_commands, name))]
    assert stored == declared, "testset_builder/cli/plain_options.py is out of date: run `make reference`"


def test_a_command_of_another_module_still_finds_every_command():
    code, modules = imported_by(["--help"])
    assert code == EXIT_OK
    assert "testset_builder.cli.corpus" in modules and "testset_builder.cli.reviewing" in modules


def typer_arguments(function, name: str, args: list[str]) -> dict:
    """What Typer calls ``function`` with for ``testset-builder NAME ARGS``: the command's signature registered on
    an app of its own, whose callback keeps its arguments."""
    received: dict = {}

    @functools.wraps(function)
    def keep(**arguments):
        received.update(arguments)

    app = typer.Typer()
    app.callback()(lambda: None)
    app.command(name)(keep)
    typer.main.get_command(app).main([name, *args], standalone_mode=False)
    return received


PLAIN_LINES = [
    ("score", ["--qrels", "q.tsv", "--runs", "runs/*.trec", "--metrics", "mrr", "--json"]),
    ("score", ["a.trec", "b.trec", "--qrels", "q.tsv", "--run", "x.trec", "--run", "y.trec", "--no-ci"]),
    ("score", ["--release", "ws@latest", "--run", "x", "--resamples", "200", "--seed", "007", "--detect", "0.05"]),
    ("score", ["--qrels", "q", "--run", "x", "--alpha", "1", "--ci", "--cluster-by", "relevant", "--details"]),
    ("score", ["--qrels", "q", "--per-query", "o.csv", "--target-recall", "0.8", "--relevance-level", "2"]),
    ("compare", ["a.trec", "b.trec", "--qrels", "q", "--fail-if-worse", "ndcg@10:0.01", "--fail-if-worse", "mrr:0"]),
    ("compare", ["a.trec", "b.trec", "c.trec", "--release", "ws@1.0.0", "--test", "t", "--clusters", "c.jsonl"]),
    ("baseline", ["--release", "ws@latest", "--out", "bm25.trec", "--k", "5", "--retriever", "dense"]),
    ("report", ["--release", "ws@latest", "--run", "x.trec", "--out", "r.html", "--json"]),
]  # fmt: skip


@pytest.mark.parametrize("name, args", PLAIN_LINES)
def test_a_plain_line_gives_the_command_the_arguments_typer_would(name, args):
    function = getattr(scoring_commands, name)
    assert direct_call(declared_options(function), args) == typer_arguments(function, name, args)


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["-h"],
        ["--qrels=q.tsv", "--run", "x"],  # click's own spelling
        ["-q", "q.tsv", "-r", "x"],  # short options
        ["--run", "x", "--", "-odd.trec"],
        ["--qrels", "q", "--qrels", "p"],  # a repeat: the last one wins in click
        ["--run", "x", "--resamples", "99"],  # below the option's bound
        ["--run", "x", "--seed", "-1"],
        ["--run", "x", "--alpha", "1e-3"],
        ["--run", "x", "--no-such-option"],
        ["--run"],
        ["--json", "--json"],
    ],
)
def test_any_other_line_is_left_to_typer(args):
    assert direct_call(declared_options(scoring_commands.score), args) is None


def test_a_required_argument_missing_is_left_to_typer():
    assert direct_call(declared_options(scoring_commands.compare), ["--qrels", "q.tsv"]) is None
    assert direct_call(declared_options(scoring_commands.baseline), ["--out", "x.trec"]) is None


def test_a_line_typer_parses_and_the_same_line_spelled_plainly_print_the_same_document(capsys):
    plain = ["score", "--qrels", QRELS, "--run", BM25, "--run", DENSE, "--resamples", "200", "--json"]
    assert main(plain) == EXIT_OK
    direct = capsys.readouterr().out
    assert main(["score", f"--qrels={QRELS}", *plain[3:]]) == EXIT_OK  # click's spelling: parsed by Typer
    assert json.loads(capsys.readouterr().out) == json.loads(direct)


def test_an_out_of_bounds_value_gets_typers_message_and_exit_code(capsys):
    assert main(["score", "--qrels", QRELS, "--run", BM25, "--resamples", "50"]) == EXIT_BAD_INPUT
    assert "--resamples" in capsys.readouterr().err


def test_the_library_resolves_every_name_it_lists():
    from testset_builder import api

    assert [name for name in api.__all__ if not hasattr(api, name)] == []
