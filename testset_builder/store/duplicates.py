"""The duplicate index in the workspace (migrations 14 and 16): per chunk its text sha256 and normalised-text sha256
(indexed over live chunks), its LSH band keys in ``chunk_lsh`` (one row a key, the key as the 8 little-endian bytes
it has in a signature's ``band_keys``, the table one B-tree ordered by key; rows of a removed chunk stay, every read
joins the live chunks), and ``chunk_dedup_pending``: chunks stored and signed (their band keys and sketch) whose
duplicate edges are not yet in ``chunk_duplicates`` (an ingest killed before grouping them leaves them there; the
next one groups them). A pending chunk's keys are copied into ``chunk_lsh`` by SQL alone when it is grouped
(:func:`index_pending_keys`). Writes take an open transaction's connection."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from .batched import rows_in

_SEPARATOR = "\x1f"


def put_signatures(db: sqlite3.Connection, signatures: Iterable[dict]) -> None:
    """Mark chunks pending with their signatures (signature records: band keys and sketch). Their keys reach
    ``chunk_lsh`` when they are grouped (:func:`index_pending_keys`), not one Python tuple a key here: at 16 keys a
    chunk, that was a tenth of a first load's time."""
    db.executemany(
        "INSERT OR REPLACE INTO chunk_dedup_pending (chunk_id, band_keys, sketch) VALUES (?, ?, ?)",
        [(r["chunk_id"], r["band_keys"], r.get("sketch", b"")) for r in signatures],
    )


KEY_BYTES = 8


def index_pending_keys(db: sqlite3.Connection) -> None:
    """Copy every pending chunk's band keys into ``chunk_lsh``, a row a key (``substr`` of its ``band_keys``), in
    key order (a first load appends to the B-tree; SQLite's sorter may use a thread a core: at 1 GB, 26M keys sorted
    in 31 s rather than 41). A key already there for the chunk is kept (a chunk signed again with the same text);
    one whose text changed under its id (a prechunked document's chunk) gets its new keys beside the old (a stale
    key only adds a candidate that the Jaccard check rejects)."""
    longest = db.execute("SELECT COALESCE(MAX(length(band_keys)), 0) FROM chunk_dedup_pending").fetchone()[0]
    if not longest:
        return
    bands = longest // KEY_BYTES
    with _sorting_threads(db):
        db.execute(
            f"WITH RECURSIVE band(n) AS (VALUES (0) UNION ALL SELECT n + 1 FROM band WHERE n < {bands - 1}) "
            "INSERT OR IGNORE INTO chunk_lsh (key, chunk_id) "
            f"SELECT substr(p.band_keys, {KEY_BYTES} * band.n + 1, {KEY_BYTES}), p.chunk_id "
            f"FROM chunk_dedup_pending p CROSS JOIN band WHERE {KEY_BYTES} * band.n < length(p.band_keys) ORDER BY 1, 2"
        )


@contextmanager
def _sorting_threads(db: sqlite3.Connection) -> Iterator[None]:
    """SQLite's sorter (ORDER BY, CREATE INDEX) may use a helper thread a core while inside (PRAGMA threads)."""
    threads = db.execute("PRAGMA threads").fetchone()[0]
    db.execute(f"PRAGMA threads = {min(os.cpu_count() or 1, 8)}")
    try:
        yield
    finally:
        db.execute(f"PRAGMA threads = {int(threads)}")


def live_chunks_over(db: sqlite3.Connection, count: int) -> bool:
    """Whether more than ``count`` chunks are live (reads at most ``count + 1`` index entries)."""
    sql = "SELECT COUNT(*) FROM (SELECT 1 FROM chunks WHERE removed_at IS NULL LIMIT ?)"
    return db.execute(sql, (int(count) + 1,)).fetchone()[0] > count


def pending_count(db: sqlite3.Connection) -> int:
    return db.execute("SELECT COUNT(*) FROM chunk_dedup_pending").fetchone()[0]


_LIVE_PENDING = "FROM chunk_dedup_pending p CROSS JOIN chunks c USING (chunk_id) WHERE c.removed_at IS NULL"


def live_pending(db: sqlite3.Connection) -> list[tuple[str, str]]:
    """(chunk_id, normalised sha256) of the live pending chunks. CROSS JOIN fixes the order: from the few pending
    chunks to theirs (left to itself, SQLite scanned every live chunk through the hash index)."""
    return db.execute(f"SELECT p.chunk_id, c.normalised_sha256 {_LIVE_PENDING}").fetchall()


def live_pending_count(db: sqlite3.Connection) -> int:
    """How many live chunks are pending, signed or not."""
    return db.execute(f"SELECT COUNT(*) {_LIVE_PENDING}").fetchone()[0]


def pending_key_entries(db: sqlite3.Connection) -> np.ndarray:
    """The band keys of the live pending chunks as one uint64 array, an entry a key: the key's low 32 bits above the
    pending row's rowid (below 2**32). A later copy of a normalised text (a live chunk with the same one and a
    smaller rowid exists) is left out: in a first load, the one caller, that first chunk is pending and stands for
    it (same keys and shingles; the exact buckets join the copies), as in the reference. Read a slice at a time into
    an array sized beforehand: 8 bytes a key, once."""
    size = db.execute(f"SELECT COALESCE(SUM(length(p.band_keys)), 0) {_LIVE_PENDING}").fetchone()[0]
    copies = _later_copies(db)
    entries, filled = np.empty(size // 8, dtype="<u8"), 0
    cursor = db.execute(f"SELECT p.rowid, p.band_keys {_LIVE_PENDING}")
    while rows := cursor.fetchmany(50_000):
        rowids = np.array([rowid for rowid, _ in rows], dtype="<u8")
        kept = np.flatnonzero(~np.isin(rowids, copies)).tolist()
        keys = np.frombuffer(b"".join(rows[i][1] for i in kept), dtype="<u8")
        owners = np.repeat(rowids[kept], [len(rows[i][1]) // 8 for i in kept])
        entries[filled : filled + len(keys)] = (keys << np.uint64(32)) | owners
        filled += len(keys)
    return entries[:filled]


def _later_copies(db: sqlite3.Connection) -> np.ndarray:
    """The pending rowids of the live chunks whose normalised text a live chunk of smaller rowid has (sorted)."""
    sql = (
        "SELECT p.rowid FROM (SELECT normalised_sha256 AS digest, MIN(rowid) AS first FROM chunks "
        "WHERE removed_at IS NULL AND normalised_sha256 IS NOT NULL GROUP BY normalised_sha256 HAVING COUNT(*) > 1) d "
        "CROSS JOIN chunks c ON c.normalised_sha256 = d.digest AND c.removed_at IS NULL AND c.rowid > d.first "
        "CROSS JOIN chunk_dedup_pending p ON p.chunk_id = c.chunk_id"
    )
    return np.sort(np.array([rowid for (rowid,) in db.execute(sql)], dtype="<u8"))


def pending_sketches(db: sqlite3.Connection, rows: int) -> np.ndarray:
    """The sketches of the pending rows by rowid, ``(rows, 68)`` uint8 (rowids from ``rows`` up are not read):
    each bin minimum's low 8 of its stored 16 bits, then the shingle count's 4 bytes. Minima equal in 16 bits are
    equal in 8, so :func:`~..corpus.dedup.jaccard_upper_bounds` stays an exact bound, looser by a differing bin's
    1/256 chance to agree, in half the memory. A row without a sketch gets the largest shingle count there is: its
    bound is 1, it is never ruled out; so does a rowid with no row."""
    sketches = np.full((rows, 68), 0xFF, dtype=np.uint8)
    cursor = db.execute("SELECT rowid, sketch FROM chunk_dedup_pending WHERE rowid < ? AND length(sketch) = 132",
                        (rows,))  # fmt: skip
    while batch := cursor.fetchmany(50_000):
        rowids = np.array([rowid for rowid, _ in batch], dtype=np.int64)
        full = np.frombuffer(b"".join(blob for _, blob in batch), dtype="<u2").reshape(-1, 66)
        sketches[rowids, :64] = full[:, :64].astype(np.uint8)  # the low byte
        sketches[rowids, 64:] = np.ascontiguousarray(full[:, 64:]).view(np.uint8)
    return sketches


def pending_ids(db: sqlite3.Connection, rowids: Sequence[int]) -> dict[int, str]:
    """Pending row -> its chunk id (rows as :func:`pending_key_entries` names them)."""
    return dict(rows_in(db, "SELECT rowid, chunk_id FROM chunk_dedup_pending WHERE rowid IN ({marks})", rowids))


def clear_pending(db: sqlite3.Connection) -> None:
    db.execute("DELETE FROM chunk_dedup_pending")


def live_by_normalised(db: sqlite3.Connection, hashes: Sequence[str]) -> dict[str, list[str]]:
    """normalised sha256 -> live chunk ids, for the hashes given."""
    sql = "SELECT normalised_sha256, chunk_id FROM chunks WHERE normalised_sha256 IN ({marks}) AND removed_at IS NULL"
    return _grouped(rows_in(db, sql, hashes))


def live_by_text(db: sqlite3.Connection, hashes: Sequence[str]) -> dict[str, list[str]]:
    sql = "SELECT text_sha256, chunk_id FROM chunks WHERE text_sha256 IN ({marks}) AND removed_at IS NULL"
    return _grouped(rows_in(db, sql, hashes))


def _grouped(rows: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for digest, chunk_id in rows:
        found.setdefault(digest, []).append(chunk_id)
    return found


def exact_buckets(db: sqlite3.Connection) -> list[list[str]]:
    """Every normalised hash two or more live chunks share: their ids. The shared hashes come from the index alone
    (it covers the query); only their chunks are then looked up (reading a chunk row for every index entry took 14 s
    at 1.6M chunks, the hashes alone 0.4 s)."""
    sql = (
        "SELECT normalised_sha256 FROM chunks WHERE removed_at IS NULL AND normalised_sha256 IS NOT NULL "
        "GROUP BY normalised_sha256 HAVING COUNT(*) > 1"
    )
    shared = [digest for (digest,) in db.execute(sql)]
    return list(live_by_normalised(db, shared).values())


def pending_keys(db: sqlite3.Connection) -> list[bytes]:
    """The distinct band keys of the pending chunks, as ``chunk_lsh`` holds them (8 bytes each)."""
    keys = set()
    for (packed,) in db.execute("SELECT band_keys FROM chunk_dedup_pending"):
        keys.update(packed[i : i + KEY_BYTES] for i in range(0, len(packed), KEY_BYTES))
    return sorted(keys)


def pending_band_keys(db: sqlite3.Connection, rowids: Sequence[int]) -> dict[int, np.ndarray]:
    """Pending row -> its band keys as int64 (rows as :func:`pending_key_entries` names them; a row without keys
    is left out)."""
    sql = "SELECT rowid, band_keys FROM chunk_dedup_pending WHERE rowid IN ({marks}) AND band_keys != x''"
    return {rowid: np.frombuffer(blob, dtype="<i8") for rowid, blob in rows_in(db, sql, rowids)}


def live_by_key(db: sqlite3.Connection, keys: Sequence[bytes]) -> Iterator[list[str]]:
    """For each of ``keys`` (8 bytes each, as :func:`pending_keys` gives them) two or more live chunks share: their
    ids."""
    sql = (
        f"SELECT group_concat(l.chunk_id, '{_SEPARATOR}') FROM chunk_lsh l JOIN chunks c USING (chunk_id) "
        "WHERE l.key IN ({marks}) AND c.removed_at IS NULL GROUP BY l.key HAVING COUNT(*) > 1"
    )
    for (members,) in rows_in(db, sql, keys):
        yield members.split(_SEPARATOR)


def key_buckets(db: sqlite3.Connection) -> Iterator[list[str]]:
    """Every LSH key two or more chunks share (live or not: callers filter): their ids (a scan of the index)."""
    sql = f"SELECT group_concat(chunk_id, '{_SEPARATOR}') FROM chunk_lsh GROUP BY key HAVING COUNT(*) > 1"
    for (members,) in db.execute(sql):
        yield members.split(_SEPARATOR)


def live_ids(db: sqlite3.Connection, chunk_ids: Sequence[str]) -> set[str]:
    sql = "SELECT chunk_id FROM chunks WHERE chunk_id IN ({marks}) AND removed_at IS NULL"
    return {row[0] for row in rows_in(db, sql, chunk_ids)}


def texts(db: sqlite3.Connection, chunk_ids: Sequence[str]) -> dict[str, str]:
    return dict(rows_in(db, "SELECT chunk_id, text FROM chunks WHERE chunk_id IN ({marks})", chunk_ids))


def normalised_hashes(db: sqlite3.Connection, chunk_ids: Sequence[str]) -> dict[str, str]:
    return dict(rows_in(db, "SELECT chunk_id, normalised_sha256 FROM chunks WHERE chunk_id IN ({marks})", chunk_ids))


def group_members(db: sqlite3.Connection, chunk_ids: Sequence[str]) -> dict[str, list[str]]:
    """group_id -> member chunk ids, of the groups any of ``chunk_ids`` is in."""
    sql = (
        "SELECT group_id, chunk_id FROM chunk_duplicates WHERE group_id IN "
        "(SELECT group_id FROM chunk_duplicates WHERE chunk_id IN ({marks}))"
    )
    groups: dict[str, list[str]] = {}
    for group_id, chunk_id in rows_in(db, sql, chunk_ids):
        groups.setdefault(group_id, [])
        if chunk_id not in groups[group_id]:  # a group met again in a later batch of ids
            groups[group_id].append(chunk_id)
    return groups


def replace_groups_of(
    db: sqlite3.Connection, chunk_ids: Iterable[str], groups: Iterable[tuple[str, Sequence[str]]]
) -> None:
    """Drop the duplicate rows of ``chunk_ids`` and write ``groups`` (kind, sorted members; named by the first)."""
    db.executemany("DELETE FROM chunk_duplicates WHERE chunk_id = ?", [(c,) for c in chunk_ids])
    db.executemany(
        "INSERT INTO chunk_duplicates (chunk_id, group_id, kind) VALUES (?, ?, ?)",
        [(chunk_id, members[0], kind) for kind, members in groups for chunk_id in members],
    )


_BULK_INDEXES = {
    "chunks_live_by_text_sha256": "chunks (text_sha256) WHERE removed_at IS NULL",
    "chunks_live_by_normalised_sha256": "chunks (normalised_sha256) WHERE removed_at IS NULL",
}


def drop_key_index(db: sqlite3.Connection) -> None:
    """For a large load: hashes appended without their indexes, which are built once at the end
    (random inserts into a large B-tree cost a page write each; CREATE INDEX sorts). An ingest killed meanwhile
    leaves them dropped: the next one builds them (:func:`ensure_key_index`)."""
    for name in _BULK_INDEXES:
        db.execute(f"DROP INDEX IF EXISTS {name}")


def ensure_key_index(db: sqlite3.Connection) -> None:
    with _sorting_threads(db):
        for name, on in _BULK_INDEXES.items():
            db.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {on}")


def set_cache_mb(db: sqlite3.Connection, megabytes: int) -> int:
    """Set the connection's page cache size; returns the previous setting (PRAGMA cache_size's value)."""
    previous = db.execute("PRAGMA cache_size").fetchone()[0]
    db.execute(f"PRAGMA cache_size = {-1024 * int(megabytes)}")
    return previous


def restore_cache(db: sqlite3.Connection, setting: int) -> None:
    db.execute(f"PRAGMA cache_size = {int(setting)}")
