"""Dense embeddings under Ray (`index --engine ray`): Ray Data actors encode each batch as the in-process engine does,
so the float16 embeddings file is the same bytes; a failure under Ray is a clear error that leaves no file; and the
`index` command builds the indexes propose and run use, then finds them cached.

Ray runs locally: one instance for the module (``ray.init(num_cpus=2)``), shut down after it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import processes_left_in_session, require

from testset_builder.cli import main
from testset_builder.config import ChunkingConfig
from testset_builder.corpus.ingest import ingest
from testset_builder.corpus.loaders import load_sources
from testset_builder.errors import EngineError
from testset_builder.retrieval import _common
from testset_builder.retrieval._common import Corpus
from testset_builder.retrieval.dense import DenseIndex, encode
from testset_builder.retrieval.ray_embed import ray_encoder
from testset_builder.store import open_workspace


@pytest.fixture(autouse=True)
def _dense_model():
    """The dense extra, imported inside a test (its import at collection would read the environment before the
    tests' offline settings are made)."""
    require("sentence_transformers")


def scifact_abstracts(scifact_dir: Path, n: int) -> tuple[list[str], list[str]]:
    records = [json.loads(line) for line in (scifact_dir / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:n]]
    return [r["_id"] for r in records], [r["text"] for r in records]


def scifact_workspace(scifact_dir: Path, root: Path, n: int) -> Path:
    """A closed workspace holding the first ``n`` SciFact abstracts, one chunk each."""
    source = root.parent / f"{root.name}-corpus.jsonl"
    lines = (scifact_dir / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:n]
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with open_workspace(root) as ws:
        ingest(ws, load_sources([source]), ChunkingConfig(chunker="prechunked"))
    return root


def index_files(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.glob("dense-*")) if directory.exists() else []


@pytest.mark.slow
def test_the_ray_engine_writes_the_same_float16_embeddings_as_the_in_process_engine(
    scifact_dir, local_ray, tmp_path, monkeypatch
):
    """Exactly equal, not merely close: each batch is encoded by one call to the same function on either side, so the
    padding (which moves the last bits of a vector) is the same; torch's thread count (two here, one on an actor)
    was measured to change nothing."""
    monkeypatch.setattr(_common, "BATCH", 50)  # 200 abstracts in four batches, shared between two actors
    corpus = Corpus.of(*scifact_abstracts(scifact_dir, 200))

    local = DenseIndex.for_corpus(tmp_path / "local", corpus)
    on_ray = DenseIndex.for_corpus(tmp_path / "ray", corpus, encode_batches=ray_encoder())

    assert on_ray.embeddings.dtype == np.float16 and on_ray.embeddings.shape == (200, 384)
    assert np.array_equal(np.asarray(on_ray.embeddings), np.asarray(local.embeddings))
    assert index_files(tmp_path / "ray") == index_files(tmp_path / "local")
    (name,) = [n for n in index_files(tmp_path / "ray") if n.endswith(".npy")]
    assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()


@pytest.mark.slow
def test_a_batch_failing_on_ray_is_an_engine_error_naming_its_first_chunk_and_leaves_no_embeddings_file(
    local_ray, tmp_path, monkeypatch
):
    monkeypatch.setattr(_common, "BATCH", 10)
    ids = [f"c{i:02}" for i in range(30)]
    corpus = Corpus.of(ids, [f"passage {i} about retrieval" for i in range(30)])

    def fails_on_passage_10(texts, model):
        if texts[0] == "passage 10 about retrieval":
            raise RuntimeError("planted failure")
        return encode(texts, model)

    with pytest.raises(EngineError) as failed:
        DenseIndex.for_corpus(tmp_path, corpus, encode_batches=ray_encoder(encode_texts=fails_on_passage_10))

    assert str(failed.value) == (
        "the Ray engine failed: encoding 10 chunks from 'c10' failed: RuntimeError: planted failure"
    )
    assert list(tmp_path.iterdir()) == [], "no embeddings file, not even a partial one"


@pytest.mark.slow
def test_index_builds_the_indexes_propose_uses_then_reports_them_cached(scifact_dir, tmp_path, capsys):
    workspace = scifact_workspace(scifact_dir, tmp_path / "ws", 120)
    command = ["index", "--workspace", str(workspace), "--retrievers", "bm25,dense", "--json"]

    assert main(command) == 0
    first = json.loads(capsys.readouterr().out)["indexes"]
    assert main(command) == 0
    second = json.loads(capsys.readouterr().out)["indexes"]
    assert main(command[:-1]) == 0
    printed = capsys.readouterr().out

    assert [(i["retriever"], i["chunks"], i["cached"]) for i in first] == [("bm25", 120, False), ("dense", 120, False)]
    assert [(i["retriever"], i["cached"]) for i in second] == [("bm25", True), ("dense", True)]
    assert [i["path"] for i in second] == [i["path"] for i in first]
    dense = first[1]
    assert dense["bytes"] == Path(dense["path"]).stat().st_size > 120 * 384 * 2
    assert "bm25: 120 chunks, cached" in printed and "dense: 120 chunks, cached" in printed


def test_index_refuses_a_ray_address_without_engine_ray(tmp_path, capsys):
    code = main(["index", "--workspace", str(tmp_path / "ws"), "--ray-address", "head:6379"])

    assert code == 1 and "--ray-address needs --engine ray" in capsys.readouterr().err


@pytest.mark.slow
def test_index_engine_ray_in_its_own_process_starts_a_private_ray_stops_it_and_writes_what_local_writes(
    scifact_dir, tmp_path
):
    local = scifact_workspace(scifact_dir, tmp_path / "local", 60)
    shutil.copytree(local, tmp_path / "ray")
    assert main(["index", "--workspace", str(local), "--retrievers", "dense"]) == 0

    command = [str(Path(sys.executable).parent / "testset-builder"), "index", "--retrievers", "dense"]
    run = subprocess.Popen(  # a session of its own: every process Ray starts for it stays in it
        [*command, "--engine", "ray", "--workspace", str(tmp_path / "ray")],
        start_new_session=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = run.communicate()

    assert run.returncode == 0 and "dense: 60 chunks, built" in out
    assert processes_left_in_session(run.pid) == [], "ray.shutdown stopped what ray.init started"
    (name,) = [n for n in index_files(local / "indexes") if n.endswith(".npy")]
    assert (tmp_path / "ray" / "indexes" / name).read_bytes() == (local / "indexes" / name).read_bytes()
