"""The duplicate index in the workspace (migrations 14, 16 and 18): per chunk its text sha256 and normalised-text
sha256 (indexed over live chunks), its LSH band keys, and ``chunk_dedup_pending``: chunks stored and signed (their
band keys and sketch) whose duplicate edges are not yet in ``chunk_duplicates`` (an ingest killed before grouping
them leaves them there; the next one groups them).

LSH keys are kept in two places, read together (rows of a removed chunk stay in both; every read keeps the live
chunks):

- ``chunk_lsh_blocks``: every key of the last large load and all before it, sorted by key (as unsigned 64-bit
  integers) and cut into blocks of :data:`BLOCK_KEYS` (key, chunk rowid) entries, a row a block holding its keys and
  chunks as two arrays, with its first key (its top bit flipped, so SQLite's signed order is the unsigned one)
  indexed: a key is found by reading a block or two. A large load rebuilds them from every key
  (:func:`rebuild_key_blocks`); an entry costs 16 bytes, where a row a key in a B-tree costs about 63 and a sort
  by SQLite of every row.
- ``chunk_lsh``: the keys of the small loads since, a row a key (the key as the 8 little-endian bytes it has in a
  signature's ``band_keys``; one B-tree ordered by key), copied from the pending chunks by SQL alone
  (:func:`index_pending_keys`).

Chunks are named by rowid in the blocks: chunks are never deleted, only marked removed, so their rowids are dense and
stable (even a VACUUM that renumbers rowids keeps dense ones). Writes take an open transaction's connection."""

from __future__ import annotations

import math
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager

import numpy as np

from .batched import rows_in

_SEPARATOR = "\x1f"


def put_signatures(db: sqlite3.Connection, signatures: Iterable[dict]) -> None:
    """Mark chunks pending with their signatures (signature records: band keys and sketch). Their keys reach
    ``chunk_lsh`` when they are grouped (:func:`index_pending_keys`), not one Python tuple a key here (16 keys a
    chunk)."""
    db.executemany(
        "INSERT OR REPLACE INTO chunk_dedup_pending (chunk_id, band_keys, sketch) VALUES (?, ?, ?)",
        [(r["chunk_id"], r["band_keys"], r.get("sketch", b"")) for r in signatures],
    )


KEY_BYTES = 8


def index_pending_keys(db: sqlite3.Connection) -> None:
    """Copy every pending chunk's band keys into ``chunk_lsh``, a row a key (``substr`` of its ``band_keys``), in
    key order (a first load appends to the B-tree; SQLite's sorter may use a thread a core). A key already there
    for the chunk is kept (a chunk signed again with the same text); one whose text changed under its id (a
    prechunked document's chunk) gets its new keys beside the old (a stale key only adds a candidate that the
    Jaccard check rejects)."""
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


def later_copies(db: sqlite3.Connection) -> np.ndarray:
    """The rowids of the live chunks whose normalised text a live chunk of smaller rowid has."""
    sql = (
        "SELECT c.rowid FROM (SELECT normalised_sha256 AS digest, MIN(rowid) AS first FROM chunks "
        "WHERE removed_at IS NULL AND normalised_sha256 IS NOT NULL GROUP BY normalised_sha256 HAVING COUNT(*) > 1) d "
        "CROSS JOIN chunks c ON c.normalised_sha256 = d.digest AND c.removed_at IS NULL AND c.rowid > d.first"
    )
    return np.array([rowid for (rowid,) in db.execute(sql)], dtype=np.int64)


class PendingSketches:
    """The sketches of the live pending chunks by chunk rowid, taken while :func:`rebuild_key_blocks` reads the
    pending rows (one read of them serves both; each read joins the chunks, 1.6M lookups at 1 GB of corpus).

    ``table``: ``(rows, 68)`` uint8, each bin minimum's low 8 of its stored 16 bits, then the shingle count's 4
    bytes (minima equal in 16 bits are equal in 8, so :func:`~..corpus.dedup.jaccard_upper_bounds` stays an exact
    bound, looser by a differing bin's 1/256 chance to agree, in half the memory). ``signed``: which rowids have
    one. ``live``: how many live pending chunks were read, signed or not."""

    def __init__(self, db: sqlite3.Connection) -> None:
        rows = (db.execute("SELECT MAX(rowid) FROM chunks").fetchone()[0] or 0) + 1
        self.table = np.full((rows, 68), 0xFF, dtype=np.uint8)
        self.signed = np.zeros(rows, dtype=bool)
        self.live = 0

    def add(self, rows: Sequence[tuple[int, bytes, bytes, int]]) -> None:
        """Pending rows as (chunk rowid, band keys, sketch, live)."""
        live = [(rowid, sketch) for rowid, _, sketch, alive in rows if alive]
        self.live += len(live)
        signed = [(rowid, sketch) for rowid, sketch in live if len(sketch) == 132]
        if not signed:
            return
        rowids = np.array([rowid for rowid, _ in signed], dtype=np.int64)
        full = np.frombuffer(b"".join(sketch for _, sketch in signed), dtype="<u2").reshape(-1, 66)
        self.table[rowids, :64] = full[:, :64].astype(np.uint8)  # the low byte
        self.table[rowids, 64:] = np.ascontiguousarray(full[:, 64:]).view(np.uint8)
        self.signed[rowids] = True


def chunk_ids_by_rowid(db: sqlite3.Connection, rowids: Sequence[int]) -> dict[int, str]:
    return dict(rows_in(db, "SELECT rowid, chunk_id FROM chunks WHERE rowid IN ({marks})", rowids))


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
    (it covers the query); only their chunks are then looked up, not a chunk row for every index entry."""
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


def live_by_key(db: sqlite3.Connection, keys: Sequence[bytes]) -> Iterator[list[str]]:
    """For each of ``keys`` (8 bytes each, as :func:`pending_keys` gives them) two or more live chunks share: their
    ids, from the blocks and the small loads' rows together."""
    members: dict[bytes, set[str]] = {}
    sql = (
        "SELECT l.key, l.chunk_id FROM chunk_lsh l JOIN chunks c USING (chunk_id) "
        "WHERE l.key IN ({marks}) AND c.removed_at IS NULL"
    )
    for key, chunk_id in rows_in(db, sql, keys):
        members.setdefault(key, set()).add(chunk_id)
    in_blocks = _block_entries(db, keys)
    rowids = sorted({int(r) for found in in_blocks.values() for r in found})
    live = dict(
        rows_in(db, "SELECT rowid, chunk_id FROM chunks WHERE rowid IN ({marks}) AND removed_at IS NULL", rowids)
    )
    for key, found in in_blocks.items():
        members.setdefault(key, set()).update(live[r] for r in found.tolist() if r in live)
    for key in sorted(members):
        if len(members[key]) > 1:
            yield sorted(members[key])


def key_buckets(db: sqlite3.Connection) -> list[list[str]]:
    """Every LSH key two or more chunks share (live or not: callers filter): their ids. A scan of the blocks in key
    order, so only right after :func:`rebuild_key_blocks` (which leaves ``chunk_lsh`` empty) is it every key."""
    runs: list[np.ndarray] = []
    for keys, chunks in whole_runs(key_blocks(db)):
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        _shared_runs(runs, chunks, starts, np.r_[starts[1:], len(keys)])
    rowids = sorted({int(r) for run in runs for r in run})
    ids = chunk_ids_by_rowid(db, rowids)
    return [[ids[r] for r in run.tolist()] for run in runs]


def key_blocks(db: sqlite3.Connection, at_once: int = 128) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The blocks' entries in key order, ``at_once`` blocks a slice, as (keys as uint64, chunk rowids as int64)."""
    cursor = db.execute("SELECT keys, chunks FROM chunk_lsh_blocks ORDER BY first_key, rowid")
    while rows := cursor.fetchmany(at_once):
        yield (
            np.frombuffer(b"".join(k for k, _ in rows), "<u8"),
            np.frombuffer(b"".join(c for _, c in rows), "<i8"),
        )


def whole_runs(slices: Iterable[tuple[np.ndarray, np.ndarray]]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(keys, values) slices in key order (as :func:`key_blocks` gives them) cut again so that no run of equal keys
    spans two: each slice's last run is held back and goes out with the next."""
    carry_keys, carry_values = np.zeros(0, "<u8"), np.zeros(0, "<i8")
    for keys, values in slices:
        keys, values = np.concatenate([carry_keys, keys]), np.concatenate([carry_values, values])
        if not len(keys):
            continue
        last = int(np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])[-1])
        if last:
            yield keys[:last], values[:last]
        carry_keys, carry_values = keys[last:], values[last:]
    if len(carry_keys):
        yield carry_keys, carry_values


def _shared_runs(runs: list[np.ndarray], chunks: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
    for start, end in zip(starts[ends - starts > 1].tolist(), ends[ends - starts > 1].tolist(), strict=True):
        runs.append(chunks[start:end])


def key_entries(db: sqlite3.Connection) -> list[tuple[bytes, str]]:
    """Every (key, chunk id) kept, from the blocks and ``chunk_lsh`` together, sorted (what an ingest stored,
    whichever way it stored it)."""
    entries = set(db.execute("SELECT key, chunk_id FROM chunk_lsh").fetchall())
    ids = dict(db.execute("SELECT rowid, chunk_id FROM chunks"))
    for packed_keys, packed_chunks in db.execute("SELECT keys, chunks FROM chunk_lsh_blocks"):
        keys = np.frombuffer(packed_keys, "<u8")
        entries.update(
            (key.tobytes(), ids[chunk]) for key, chunk in zip(keys, np.frombuffer(packed_chunks, "<i8").tolist())
        )
    return sorted(entries)


_FLIP = np.uint64(1 << 63)


def _block_directory(db: sqlite3.Connection) -> tuple[np.ndarray, np.ndarray]:
    """The blocks' first keys (uint64, ascending) and their rowids, from the index on ``first_key`` alone."""
    rows = db.execute("SELECT first_key, rowid FROM chunk_lsh_blocks ORDER BY first_key, rowid").fetchall()
    table = np.array(rows, dtype="<i8").reshape(-1, 2)
    return table[:, 0].view("<u8") ^ _FLIP, table[:, 1]


def _block_entries(db: sqlite3.Connection, keys: Sequence[bytes]) -> dict[bytes, np.ndarray]:
    """key -> the chunk rowids the blocks hold it for (keys they do not hold are left out). A key's entries lie in
    the blocks from the last one starting below it to the last one starting at or below it (a run of one key can
    go on over several blocks)."""
    if not keys:
        return {}
    wanted = np.unique(np.frombuffer(b"".join(keys), "<u8"))
    firsts, blocks = _block_directory(db)
    if not len(firsts):
        return {}
    low = np.maximum(np.searchsorted(firsts, wanted, "left") - 1, 0)
    high = np.searchsorted(firsts, wanted, "right")  # exclusive
    needed = np.unique(np.concatenate([np.arange(a, b) for a, b in zip(low.tolist(), high.tolist()) if b > a] or [[]]))
    found: dict[bytes, list[np.ndarray]] = {}
    sql = "SELECT keys, chunks FROM chunk_lsh_blocks WHERE rowid IN ({marks})"
    for packed_keys, packed_chunks in rows_in(db, sql, blocks[needed.astype(np.int64)].tolist()):
        block_keys = np.frombuffer(packed_keys, "<u8")
        hits = np.flatnonzero(np.isin(block_keys, wanted))
        chunks = np.frombuffer(packed_chunks, "<i8")[hits]
        for key, chunk in zip(block_keys[hits], chunks, strict=True):
            found.setdefault(key.tobytes(), []).append(chunk)
    return {key: np.unique(np.array(chunks, dtype="<i8")) for key, chunks in found.items()}


BLOCK_KEYS = 512  # entries a block: 8 KB of keys and chunks, read whole to find a key
SPILL_ENTRIES = 4_000_000  # entries sorted at once when the blocks are rebuilt (16 bytes each, 64 MB)
_ENTRY = np.dtype([("key", "<u8"), ("chunk", "<i8")])


def rebuild_key_blocks(db: sqlite3.Connection, sketches: PendingSketches | None = None) -> None:
    """Rebuild ``chunk_lsh_blocks`` from every key kept (the blocks, ``chunk_lsh``, which is emptied) and the
    pending chunks' band keys: what a large load does instead of :func:`index_pending_keys`. The entries are spilled
    to files in the workspace's folder by the top bits of their key, each file holding at most about
    :data:`SPILL_ENTRIES`, then each file is sorted and cut into blocks in key order: memory is bounded whatever the
    number of keys, and one pass reads each entry once. The pending rows read give ``sketches`` theirs."""
    total = _entry_count(db)
    bits = max(0, math.ceil(math.log2(total / SPILL_ENTRIES))) if total > SPILL_ENTRIES else 0
    folder = _folder(db)
    db.execute("DELETE FROM chunk_lsh_blocks WHERE rowid < 0")  # takes the write lock: no other rebuild is running
    _remove_stale_spills(folder)
    with tempfile.TemporaryDirectory(prefix=_SPILL_PREFIX, dir=folder) as spill, ExitStack() as files:
        paths = [os.path.join(spill, str(part)) for part in range(1 << bits)]
        outs = [files.enter_context(open(path, "wb")) for path in paths]
        for keys, chunks in _every_entry(db, sketches):
            entries = np.empty(len(keys), _ENTRY)
            entries["key"], entries["chunk"] = keys, chunks
            if bits:
                part = (keys >> np.uint64(64 - bits)).astype(np.int64)
                order = np.argsort(part, kind="stable")
                entries, bounds = entries[order], np.searchsorted(part[order], np.arange((1 << bits) + 1))
                for p, out in enumerate(outs):
                    entries[bounds[p] : bounds[p + 1]].tofile(out)
            else:
                entries.tofile(outs[0])
        files.close()
        db.execute("DELETE FROM chunk_lsh_blocks")
        db.execute("DELETE FROM chunk_lsh")
        for path in paths:
            _write_blocks(db, np.fromfile(path, _ENTRY))
            os.unlink(path)


def _write_blocks(db: sqlite3.Connection, entries: np.ndarray) -> None:
    """Sorted and without repeats, cut into blocks (appended in key order: rowids follow the keys). Sorted by key,
    then the entries of shared keys by chunk: a sort of every entry by both took twice as long. The first sort need
    not be stable: the entries of a key it leaves in any order are the ones sorted by chunk next."""
    if not len(entries):
        return
    keys, chunks = entries["key"], entries["chunk"]
    order = np.argsort(keys)
    keys, chunks = keys[order], chunks[order]
    repeat = keys[1:] == keys[:-1]
    if repeat.any():  # the entries of shared keys (a few per cent) sorted by chunk too, so repeats are neighbours
        shared = np.flatnonzero(np.r_[repeat, False] | np.r_[False, repeat])
        chunks[shared] = chunks[shared][np.lexsort((chunks[shared], keys[shared]))]
    kept = np.r_[True, (keys[1:] != keys[:-1]) | (chunks[1:] != chunks[:-1])]
    keys, chunks = keys[kept], chunks[kept]
    db.executemany(
        "INSERT INTO chunk_lsh_blocks (first_key, keys, chunks) VALUES (?, ?, ?)",
        (
            (
                int((keys[i] ^ _FLIP).astype("<i8")),
                keys[i : i + BLOCK_KEYS].tobytes(),
                chunks[i : i + BLOCK_KEYS].tobytes(),
            )
            for i in range(0, len(keys), BLOCK_KEYS)
        ),
    )


def _entry_count(db: sqlite3.Connection) -> int:
    blocks = db.execute("SELECT COALESCE(SUM(length(keys)), 0) FROM chunk_lsh_blocks").fetchone()[0] // KEY_BYTES
    rows = db.execute("SELECT COUNT(*) FROM chunk_lsh").fetchone()[0]
    pending = db.execute("SELECT COALESCE(SUM(length(band_keys)), 0) FROM chunk_dedup_pending").fetchone()[0]
    return blocks + rows + pending // KEY_BYTES


def _every_entry(db: sqlite3.Connection, sketches: PendingSketches | None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(keys as uint64, chunk rowids) slices: the blocks', ``chunk_lsh``'s, then the pending chunks' (whose
    sketches ``sketches`` takes)."""
    yield from key_blocks(db, at_once=1_000)
    cursor = db.execute("SELECT l.key, c.rowid FROM chunk_lsh l CROSS JOIN chunks c USING (chunk_id)")
    while rows := cursor.fetchmany(200_000):
        yield np.frombuffer(b"".join(k for k, _ in rows), "<u8"), np.array([r for _, r in rows], dtype="<i8")
    cursor = db.execute(
        "SELECT c.rowid, p.band_keys, p.sketch, c.removed_at IS NULL "
        "FROM chunk_dedup_pending p CROSS JOIN chunks c USING (chunk_id)"
    )
    while rows := cursor.fetchmany(50_000):
        if sketches is not None:
            sketches.add(rows)
        keys = np.frombuffer(b"".join(row[1] for row in rows), "<u8")
        owners = np.array([row[0] for row in rows], dtype="<i8")
        yield keys, np.repeat(owners, [len(row[1]) // KEY_BYTES for row in rows])


_SPILL_PREFIX = "lsh-spill-"


def _remove_stale_spills(folder: str | None) -> None:
    """The spill folders a rebuild killed midway left (another rebuild cannot be running: the caller holds the
    write lock)."""
    if folder is None:
        return
    for entry in os.scandir(folder):
        if entry.name.startswith(_SPILL_PREFIX) and entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)


def _folder(db: sqlite3.Connection) -> str | None:
    """The folder of the connection's main database file (None for one in memory: the system's temp folder)."""
    path = next((file for _, name, file in db.execute("PRAGMA database_list") if name == "main"), "")
    return os.path.dirname(path) if path else None


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
