"""benchmarks/RESULTS.md says on which machine each figure was measured: the CPU and the instruction sets that
change how fast the tool runs there (a figure from a CPU with AVX-512 VNNI or AMX does not carry to one without)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import results_md

ZEN3 = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu sse4_2 avx fma f16c avx2 sha_ni vaes\n"
XEON = "processor\t: 0\nflags\t\t: sse4_2 avx avx2 fma f16c avx512f avx512bw avx512vl avx512_vnni amx_tile amx_int8\n"


@pytest.mark.parametrize("cpuinfo", [ZEN3, XEON])
def test_the_flags_say_which_speed_flags_the_cpu_has_and_which_it_lacks(cpuinfo):
    reported = set(cpuinfo.split("flags", 1)[1].split(":", 1)[1].split())
    said = results_md.cpu_flags(cpuinfo)
    has, _, lacks = said.partition("; lacks ")
    assert has.split() == [f for f in results_md.SPEED_FLAGS if f in reported]
    assert lacks.split() == [f for f in results_md.SPEED_FLAGS if f not in reported]
    assert "sha_ni" not in said  # only the flags that matter for speed


def test_a_kernel_that_lists_no_flags_is_said_not_to_have_recorded_them():
    assert results_md.cpu_flags("processor\t: 0\n") == "not recorded"


def test_every_figure_a_benchmark_records_carries_the_cpu_flags_onto_the_page(tmp_path, monkeypatch):
    monkeypatch.setattr(results_md, "RESULTS", tmp_path)
    monkeypatch.setattr(results_md, "cpu_flags", lambda cpuinfo=None: results_md.SPEED_FLAGS[0])
    path = results_md.record("metrics", "metrics: a title", {"seconds": 1.5})
    assert json.loads(path.read_text())["cpu_flags"] == results_md.SPEED_FLAGS[0]
    line = next(line for line in results_md.section(path) if line.startswith("`make bench BENCH=metrics`"))
    assert f"(flags: {results_md.SPEED_FLAGS[0]})" in line


def test_a_file_recorded_before_the_flags_were_says_they_are_not_recorded(tmp_path):
    path = tmp_path / "old.json"
    entry = {"benchmark": "old", "title": "old", "date": "then", "cpu": "some CPU", "load": "1", "figures": {"a": 1}}
    path.write_text(json.dumps(entry))
    assert any("some CPU (flags: not recorded)" in line for line in results_md.section(path))
