"""The Hugging Face dataset layout of a release (MTEB retrieval): parquet files and a dataset card.

Configs: ``corpus`` (split ``corpus``: ``_id``, ``title``, ``text``), ``queries`` (split ``queries``: ``_id``,
``text``), ``default`` (split ``test``: qrels ``query-id``, ``corpus-id``, ``score`` as int) — what
``datasets.load_dataset(DIR, "default")`` and MTEB's retrieval loader read — and ``judgments`` (the qrels with each
one's ``origin``). Parquet is written without timestamps or pandas metadata, so the same rows give the same bytes.
:func:`read_hf` reads such a directory back from its own files (the dataset card's ``configs``), never from a cache.

Each data file's name carries the release's content hash (``hf/corpus-<sha12>.parquet``): the ``datasets`` library
caches a local folder's build under the folder's name and the data files' names, not their content, so without it
two workspaces' ``releases/1.0.0`` loaded in one process gave the first one's rows for both.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from ..errors import InputError

HF_LAYOUT = {  # config -> (split, data file without its content tag)
    "corpus": ("corpus", "hf/corpus"),
    "queries": ("queries", "hf/queries"),
    "default": ("test", "hf/qrels/test"),
    "judgments": ("test", "hf/judgments/test"),
}


def hf_files(content_sha256: str) -> dict[str, tuple[str, str]]:
    """config -> (split, data file path) of a release whose content hash is ``content_sha256``."""
    tag = content_sha256[:12]
    return {config: (split, f"{stem}-{tag}.parquet") for config, (split, stem) in HF_LAYOUT.items()}


def write_parquet(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd", write_statistics=False, store_schema=False)


def write_hf(root: Path, corpus: list[dict], queries: list[dict], qrels: list, content_sha256: str) -> None:
    files = hf_files(content_sha256)
    write_parquet(
        pa.table(
            {
                "_id": [d["_id"] for d in corpus],
                "title": [d["title"] for d in corpus],
                "text": [d["text"] for d in corpus],
            }
        ),
        root / files["corpus"][1],
    )
    write_parquet(
        pa.table({"_id": [q["_id"] for q in queries], "text": [q["text"] for q in queries]}),
        root / files["queries"][1],
    )
    ids = pa.array([q.query_id for q in qrels], pa.string())
    chunks = pa.array([q.chunk_id for q in qrels], pa.string())
    scores = pa.array([q.grade for q in qrels], pa.int64())
    write_parquet(pa.table({"query-id": ids, "corpus-id": chunks, "score": scores}), root / files["default"][1])
    origins = pa.array([q.origin for q in qrels], pa.string())
    write_parquet(
        pa.table({"query-id": ids, "corpus-id": chunks, "score": scores, "origin": origins}),
        root / files["judgments"][1],
    )


def size_category(n: int) -> str:
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return label
    return "1M<n<10M"


def dataset_card(name: str, manifest: dict, license_id: str) -> str:
    counts = manifest["counts"]
    front = {
        "license": license_id,
        "task_categories": ["text-retrieval"],
        "task_ids": ["document-retrieval"],
        "language": manifest.get("languages") or ["en"],  # detected from the corpus
        "size_categories": [size_category(counts["corpus"])],
        "pretty_name": name,
        "tags": ["retrieval", "beir", "mteb", "testset-builder"],
        "configs": [
            {"config_name": config, "data_files": [{"split": split, "path": path}]}
            for config, (split, path) in hf_files(manifest["content_sha256"]).items()
        ],
    }
    lineage = manifest["lineage"]
    models = ", ".join(f"{m['provider']} {m['model']}" for m in lineage["models"]) or "none"
    prompts = ", ".join(f"{p['name']} ({p['sha256'][:12]})" for p in lineage["prompts"]) or "none"
    origin = ", ".join(f"{n} {o}" for o, n in counts["qrels_by_origin"].items() if n) or "none"
    grades = ", ".join(f"grade {g}: {n}" for g, n in counts["qrels_by_grade"].items())
    return (
        "---\n" + yaml.safe_dump(front, sort_keys=False, allow_unicode=True) + "---\n\n"
        f"# {name} {manifest['version']}\n\n"
        "A retrieval test set made with [testset-builder](https://pypi.org/project/testset-builder/): queries, a "
        "corpus of "
        "chunks, and graded relevance labels (0 irrelevant, 1 relevant, 2 highly relevant).\n\n"
        "## Contents\n\n"
        f"- corpus: {counts['corpus']} chunks; queries: {counts['queries']} "
        f"({counts['queries_by_origin'].get('synthetic', 0)} synthetic, "
        f"{counts['queries_by_origin'].get('real', 0)} real); qrels: {counts['qrels']} ({grades})\n"
        f"- where the labels come from: {origin}\n"
        f"{_audit_line(counts)}{_held_line(counts, manifest.get('policy') or {})}"
        f"{_questions_line(counts.get('questions'))}"
        f"{_estimates_line(counts.get('estimates'))}"
        f"- content sha256: `{manifest['content_sha256']}`; parent version: {manifest['parent_version'] or 'none'}\n\n"
        "## How it was made\n\n"
        f"- policy: {'; '.join(manifest['policy']['rules'])}\n"
        f"- models: {models}\n- prompts: {prompts}\n"
        f"- reviewers: {', '.join(lineage['reviewers']) or 'none'}{_agreement(lineage)}\n"
        f"{_adjudication(lineage.get('adjudication'))}"
        f"- chunker configs: {', '.join(c[:12] for c in lineage['chunker_configs']) or 'unknown'}\n\n"
        "## Loading\n\n"
        '```python\nfrom datasets import load_dataset\nqrels = load_dataset(PATH, "default", split="test")\n'
        'corpus = load_dataset(PATH, "corpus", split="corpus")\n'
        'queries = load_dataset(PATH, "queries", split="queries")\n```\n\n'
        "BEIR files are in `beir/`, TREC qrels in `qrels.trec`, and `manifest.json` lists every file's sha256 and "
        "the lineage.\n"
    )


def _audit_line(counts: dict) -> str:
    """What the audit says of the synthetic labels nobody checked (a release made before the audit says nothing)."""
    audit = (counts.get("checked_by_human") or {}).get("synthetic_audit")
    return f"- synthetic labels: {audit['statement']}\n" if audit and audit["unchecked"] else ""


def _held_line(counts: dict, policy: dict) -> str:
    """The synthetic questions left out because no reviewer kept them (``release.hold_unreviewed``)."""
    held = (counts.get("checked_by_human") or {}).get("unreviewed_held_back", 0)
    if not held or policy.get("hold_unreviewed") is False or "hold_unreviewed" not in policy:
        return ""
    if policy["hold_unreviewed"]:
        return f"- synthetic questions held back: {held} no reviewer kept; every synthetic label released was checked\n"
    return f"- synthetic questions held back: {held} no reviewer kept, written by a weak generator\n"


def _questions_line(profile: dict | None) -> str:
    """The card's line on the questions: the relevant chunks each needs, the synthetic ones that copy their source's
    rare words or have other answers, the documents without one (a release made before it says nothing)."""
    if not profile or not profile["questions"]:
        return ""
    names = {"none": "none", "1": "one", "2": "two", "3+": "three or more"}
    needs = ", ".join(f"{n} need {names[group]}" for group, n in profile["needing"].items())
    parts = [f"relevant chunks a question needs: {needs}"]
    if profile["synthetic"]:
        parts.append(
            f"of {profile['synthetic']} synthetic questions, {profile['leaky']} copy their source's rare words (a "
            f"term-matching retriever finds them easily) and {profile['ambiguous']} have other chunks that answer them"
        )
    if profile["documents"]:
        parts.append(f"{profile['documents_without_question']} of {profile['documents']} documents have no question")
    return f"- questions: {'; '.join(parts)} (reported, not filtered: `testset-builder score` says more)\n"


def _estimates_line(estimates: dict | None) -> str:
    if not estimates:
        return ""
    return (
        f"- estimated labels: `{estimates['file']}` gives P(relevant) for {estimates['pairs']} pairs of "
        f"{estimates['queries']} queries ({estimates['estimated_only']} have no human label; {estimates['drawn']} "
        f"were drawn for review with known probabilities, {estimates['drawn_answered']} answered), for "
        "prediction-powered scoring (`testset-builder score --release`)\n"
    )


def _adjudication(settled: dict | None) -> str:
    """The card's line on how disagreements were settled: the policy by name, and its counts."""
    if not settled or not (settled["adjudicated"] or settled["open"]):
        return ""
    who = settled.get("adjudicator")
    by = ", ".join(f"{n} by {admin}" for admin, n in settled["by"].items())
    ties = (
        f"ties to {who}'s own grade where {who} graded the pair, else to the latest grade"
        if who
        else "ties to the latest grade"
    )
    return (
        f"- adjudication: a pair an admin settled takes the settled grade; other disagreements go to the majority, "
        f"{ties}. Settled by an admin: {settled['adjudicated']} pairs{f' ({by})' if by else ''}, "
        f"{settled['self_settled']} of them self-settled (the admin had graded the pair too). Left open: "
        f"{settled['majority']} decided by majority, {settled['tie_to_adjudicator']} ties given to "
        f"{who or 'the adjudicator'}'s own grade, {settled['tie_to_latest']} ties to the latest grade\n"
    )


def _agreement(lineage: dict) -> str:
    figures = lineage.get("review_agreement") or {}
    parts = []
    if figures.get("krippendorff_alpha_ordinal") is not None:
        parts.append(f"Krippendorff's alpha (ordinal) {figures['krippendorff_alpha_ordinal']:.3f}")
    if figures.get("mean_pairwise_weighted_kappa") is not None:
        parts.append(f"mean pairwise weighted kappa {figures['mean_pairwise_weighted_kappa']:.3f}")
    if figures.get("llm_vs_human_weighted_kappa") is not None:
        parts.append(
            f"LLM judge against reviewers: weighted kappa {figures['llm_vs_human_weighted_kappa']:.3f} on "
            f"{figures['llm_vs_human_pairs']} pairs"
        )
    return f" ({'; '.join(parts)})" if parts else ""


def data_files(folder: Path) -> dict[str, list[Path]]:
    """Config name -> data files, from the dataset card's YAML ``configs`` (else the release layout's paths)."""
    card = folder / "README.md"
    configs: dict[str, list[Path]] = {}
    if card.exists():
        text = card.read_text(encoding="utf-8")
        if text.startswith("---\n"):
            try:
                front = yaml.safe_load(text.split("---\n", 2)[1]) or {}
            except yaml.YAMLError as error:
                raise InputError(f"the dataset card's YAML header is not valid ({error})", path=card) from None
            for config in front.get("configs", []) if isinstance(front, dict) else []:
                files = config.get("data_files", [])
                paths = [
                    f["path"] if isinstance(f, dict) else f for f in (files if isinstance(files, list) else [files])
                ]
                configs[config["config_name"]] = [p for pattern in paths for p in sorted(folder.glob(pattern))]
    for name, (_, stem) in HF_LAYOUT.items():  # no card: the release layout, tagged or not
        configs.setdefault(name, sorted(folder.glob(f"{stem}*.parquet")))
    return configs


def read_rows(files: list[Path], columns: tuple[str, ...]) -> list[dict]:
    """Rows of parquet or JSONL data files; a file that cannot be read, or lacks a column, is named."""
    import pyarrow.json as pajson

    out: list[dict] = []
    for file in files:
        try:
            table = pq.read_table(file) if file.suffix == ".parquet" else pajson.read_json(file)
        except (pa.ArrowException, OSError) as error:
            raise InputError(f"cannot read this data file ({str(error).splitlines()[0]})", path=file) from None
        missing = [c for c in columns if c not in table.column_names]
        if missing:
            found = ", ".join(table.column_names)
            raise InputError(f"no column {' or '.join(repr(c) for c in missing)} (it has {found})", path=file)
        out.extend(table.select(list(columns) + [c for c in table.column_names if c not in columns]).to_pylist())
    return out


def read_hf(folder: str | Path) -> tuple[dict[str, dict], dict[str, str], dict[str, dict[str, int]]]:
    """An MTEB-layout dataset directory: corpus (``_id`` -> title and text), queries (``_id`` -> text) and qrels."""
    folder = Path(folder)
    files = data_files(folder)
    missing = [name for name in ("corpus", "queries", "default") if not files.get(name)]
    if missing:
        raise InputError(
            f"not an MTEB-layout dataset: no data files for the config(s) {', '.join(missing)}", path=folder
        )
    corpus = {
        str(r["_id"]): {"title": r.get("title") or "", "text": r["text"]}
        for r in read_rows(files["corpus"], ("_id", "text"))
    }
    queries = {str(r["_id"]): r["text"] for r in read_rows(files["queries"], ("_id", "text"))}
    qrels: dict[str, dict[str, int]] = {}
    for row in read_rows(files["default"], ("query-id", "corpus-id", "score")):
        qrels.setdefault(str(row["query-id"]), {})[str(row["corpus-id"])] = int(row["score"])
    return corpus, queries, qrels
