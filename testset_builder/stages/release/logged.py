"""What a release carries of production logs, for the queries it releases that were logged: ``meta/logs.jsonl``
(each one's frequency, feedback and clicks, its failure-first draw, its failure tag once reviewers gave one, and its
session, numbered for the release, which ``score`` resamples by) and
``runs/production.trec`` (what the live system retrieved for it, ranked as logged). From them alone, ``report``
computes the online signals: how often a thumbs-down was a retrieval failure, clicks against labels, and the
logged system's recall on the labelled queries, weighted by 1 / pi to describe the whole log."""

from __future__ import annotations

from pathlib import Path

from ...errors import InputError
from ...export import read_run
from ...store import logs as stored_logs
from ...tables import Run

LOGS_META = "meta/logs.jsonl"
PRODUCTION_RUN = "runs/production.trec"
PRODUCTION = "production"  # the run's tag


def logged_rows(db, query_ids: list[str], tags: dict[str, str]) -> list[dict]:
    """One row per released query that was logged (canonical: keys sorted later, by id), with its tag if any, and its
    session numbered afresh for this release (``s1``, ``s2``, ... in the order of the queries' ids): what scoring
    resamples by, with nothing that links a session to its id or to another release."""
    rows, numbers = [], {}
    for row in stored_logs.release_rows(db, query_ids):
        if row["session"] is not None:
            row["session"] = numbers.setdefault(row["session"], f"s{len(numbers) + 1}")
        entry = {
            "_id": row["query_id"], "frequency": row["frequency"], "thumbs_up": row["thumbs_up"],
            "thumbs_down": row["thumbs_down"], "cited": row["cited"], "clicked": row["clicked"],
            "rating": round(row["rating_sum"] / row["ratings"], 6) if row["ratings"] else None,
            "probability": row["probability"], "drawn": None if row["drawn"] is None else bool(row["drawn"]),
            "duplicate_of": row["duplicate_of"], "failure": tags.get(row["query_id"]), "session": row["session"],
        }  # fmt: skip
        rows.append({k: v for k, v in entry.items() if v is not None})
    return rows


def production_run_text(db, query_ids: list[str]) -> str:
    """The logged retrieval of the released queries as a TREC run (score 1 / rank keeps the logged order), each chunk
    once a query at its best rank (a workspace imported before repeats were folded may hold one twice)."""
    wanted = set(query_ids)
    lines = []
    for query_id, ranked in sorted(stored_logs.production_run(db).items()):
        if query_id not in wanted:
            continue
        seen = set()
        for rank, chunk_id, _ in ranked:  # by rank
            if chunk_id not in seen:
                seen.add(chunk_id)
                lines.append(f"{query_id} Q0 {chunk_id} {rank} {1.0 / rank!r} {PRODUCTION}\n")
    return "".join(lines)


def read_production_run(path: Path) -> tuple[Run | None, str | None]:
    """A release's production run and a note on how it was read. It only ever informs the online signals, so it
    never stops a release from loading: a run repeating a pair (as releases written before repeats were folded
    may) keeps each chunk at its best score, and one that cannot be read at all is left out, with the reason."""
    try:
        return read_run(path, "trec"), None
    except InputError as error:
        first = str(error)
    best: dict[str, dict[str, float]] = {}
    rows = 0
    try:
        for line in path.read_text(encoding="utf-8").splitlines():
            parts = line.split()
            if not parts:
                continue
            query_id, _, chunk_id, _, score, _ = parts
            rows += 1
            held = best.setdefault(query_id, {})
            held[chunk_id] = max(float(score), held.get(chunk_id, float("-inf")))
        run = Run.from_dict(best, name=PRODUCTION)
    except (ValueError, OSError, InputError):
        return None, f"{PRODUCTION_RUN} was left out, it cannot be read: {first}"
    return run, f"{PRODUCTION_RUN} lists {rows - run.num_rows} chunks twice for a query; each kept at its best rank"
