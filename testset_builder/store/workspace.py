"""The workspace: a directory holding ``testset.db`` (SQLite, WAL, foreign keys on) and ``releases/``.

Opening checks the file before writing anything: a file that is not an SQLite database, an SQLite database that
is not a workspace, or a workspace written by a newer schema is refused with a clear error and left untouched.

Each thread gets its own connection (``workspace.db``), so a server can answer requests on several threads. A
workspace opened ``readonly`` never writes (no migration, no journal change): commands that only read (``queue``,
``costs``) work on a copy on read-only media or another user's workspace.
Stages that pay for LLM calls or change the corpus hold the workspace for their whole run
(:meth:`Workspace.exclusive`): a second process asking for it waits (saying for whom) until the first lets go, then
finds every answer in the cache, so two runs on one workspace never pay twice. Small writes such as a reviewer's
verdict need no hold; SQLite's own locking keeps them safe.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

from ..errors import SchemaTooNewError, WorkspaceCorruptError, WorkspaceError
from .lock import hold
from .migrations import LATEST, MIGRATIONS

DB_NAME = "testset.db"
LOCK_NAME = "testset.lock"
SQLITE_HEADER = b"SQLite format 3\x00"


def utc_timestamp() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _applied_version(db: sqlite3.Connection) -> int | None:
    """Highest recorded migration, 0 for an empty database, None for a database that is not a workspace."""
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "schema_migrations" not in tables:
        return 0 if not tables else None
    return db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0]


def _read_only_uri(path: Path, immutable: bool = False) -> str:
    return f"file:{quote(str(path.resolve()))}?mode=ro" + ("&immutable=1" if immutable else "")


QUICK_CHECK_BYTES = 256 * 1024 * 1024
"""Above this size a workspace is not quick_checked on open (the check reads every page: seconds a gigabyte, on every
command); its schema is read instead, which refuses a file that is not a database or has a broken header or schema,
and SQLite reports a damaged page when a command reads it."""
_CHECK = "PRAGMA quick_check"
_SCHEMA_CHECK = "SELECT CASE WHEN COUNT(*) >= 0 THEN 'ok' END FROM sqlite_master"


def _inspect_existing(path: Path) -> None:
    """Read-only checks of an existing database file; raises before anything could write to it."""
    with path.open("rb") as handle:
        header = handle.read(len(SQLITE_HEADER))
    if path.stat().st_size and header != SQLITE_HEADER:
        raise WorkspaceCorruptError(path, "no SQLite header")
    if not path.stat().st_size:
        return
    try:
        db = _connect_read_only(path)
        try:
            check = db.execute(_CHECK if path.stat().st_size <= QUICK_CHECK_BYTES else _SCHEMA_CHECK).fetchone()[0]
            if check != "ok":
                raise WorkspaceCorruptError(path, f"integrity check: {check}")
            version = _applied_version(db)
        finally:
            db.close()
    except sqlite3.DatabaseError as error:
        raise WorkspaceCorruptError(path, str(error)) from None
    if version is None:
        raise WorkspaceError(
            "is an SQLite database but not a testset-builder workspace (no schema_migrations)", path=path
        )
    if version > LATEST:
        raise SchemaTooNewError(path, version, LATEST)


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """A connection that cannot write. A WAL database needs its -shm file; where it cannot be made (read-only media)
    the file is opened as immutable, which is right when nothing can be writing to it either."""
    try:
        db = sqlite3.connect(_read_only_uri(path), uri=True, isolation_level=None, check_same_thread=False)
        db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    except sqlite3.OperationalError:
        uri = _read_only_uri(path, immutable=True)
        db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    return db


def _connect(path: Path, readonly: bool = False) -> sqlite3.Connection:
    if readonly:
        db = _connect_read_only(path)
        db.row_factory = sqlite3.Row
        return db
    db = sqlite3.connect(path, isolation_level=None, timeout=60.0, check_same_thread=False)
    db.row_factory = sqlite3.Row
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA foreign_keys = ON")
    db.execute("PRAGMA synchronous = NORMAL")
    return db


class Workspace:
    """An open workspace. Use as a context manager, or call :meth:`close`.

    ``on_wait(holder)`` is called once when :meth:`exclusive` has to wait for another process (the CLI prints who
    holds the workspace); ``wait_s`` bounds that wait (None: as long as it takes)."""

    def __init__(
        self,
        root: Path,
        on_wait: Callable[[str], None] | None = None,
        wait_s: float | None = None,
        readonly: bool = False,
    ) -> None:
        self.root = root
        self.readonly = readonly
        self.on_wait = on_wait
        self.wait_s = wait_s
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._guard = threading.Lock()

    @property
    def db(self) -> sqlite3.Connection:
        """This thread's connection (made on first use)."""
        db = getattr(self._local, "db", None)
        if db is None:
            db = _connect(self.db_path, self.readonly)
            with self._guard:
                self._connections.append(db)
            self._local.db = db
        return db

    @property
    def db_path(self) -> Path:
        return self.root / DB_NAME

    @property
    def releases_dir(self) -> Path:
        return self.root / "releases"

    @classmethod
    def open(
        cls,
        root: str | Path,
        create: bool = True,
        on_wait: Callable[[str], None] | None = None,
        wait_s: float | None = None,
        readonly: bool = False,
    ) -> Workspace:
        root = Path(root)
        path = root / DB_NAME
        if root.exists() and not root.is_dir():
            raise WorkspaceError("is a file, not a workspace directory", path=root)
        if path.exists():
            _inspect_existing(path)
        elif not create or readonly:
            raise WorkspaceError("no workspace here (run a stage such as `chunk` to create one)", path=root)
        if readonly:
            workspace = cls(root, on_wait, wait_s, readonly=True)
            if workspace.schema_version < LATEST:
                raise WorkspaceError(
                    f"was written by an older testset-builder (schema {workspace.schema_version}, now {LATEST}); "
                    "run any writing command on it once to upgrade it",
                    path=root,
                )
            return workspace
        try:
            root.mkdir(parents=True, exist_ok=True)
            workspace = cls(root, on_wait, wait_s)
            workspace.migrate()
        except (OSError, sqlite3.OperationalError) as error:
            raise WorkspaceError(
                f"cannot write to this workspace ({error}); read-only commands (queue, costs, score --release, "
                "diff, export) still work",
                path=root,
            ) from None
        return workspace

    def close(self) -> None:
        with self._guard:
            for db in self._connections:
                db.close()
            self._connections.clear()
        self._local = threading.local()

    def review_token(self) -> str:
        """The token the web reviewer asks for: ``$TESTSET_BUILDER_REVIEW_TOKEN``, else one made for this workspace
        on first use and kept in ``review.token`` (readable by its owner only)."""
        given = os.environ.get("TESTSET_BUILDER_REVIEW_TOKEN", "").strip()
        if given:
            return given
        path = self.root / "review.token"
        if not path.exists():
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                handle.write(secrets.token_urlsafe(24))
        return path.read_text(encoding="utf-8").strip()

    @contextmanager
    def exclusive(self, stage: str) -> Iterator[None]:
        """Hold the workspace for ``stage`` against other processes (re-entrant within this one); see the module
        docstring."""
        with hold(self.root / LOCK_NAME, stage, self.on_wait, self.wait_s):
            yield

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """All-or-nothing writes: commit on success, roll back on any exception (which is re-raised), a failed
        COMMIT's included, so the connection is never left inside a transaction."""
        if self.readonly:
            raise WorkspaceError("was opened read-only; this command cannot write to it", path=self.root)
        if self.db.in_transaction:
            raise WorkspaceError("transactions do not nest", path=self.root)
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
            self.db.execute("COMMIT")
        except BaseException:
            if self.db.in_transaction:  # the body failed, or COMMIT itself did (a deferred constraint, a full disk)
                self.db.execute("ROLLBACK")
            raise

    @contextmanager
    def background_checkpoints(self, wal_limit_mb: int = 512) -> Iterator[Callable[[], None]]:
        """While inside, this thread's commits leave the WAL to a checkpointing thread (its own connection, PASSIVE
        checkpoints beside the writer), so a commit does not wait while the database file is written and synced.
        Durability is SQLite's as ever: a
        checkpoint only copies committed pages, and a process killed meanwhile leaves a WAL that the next opening
        recovers. Yields ``pace()``, to call between transactions: once the WAL file is larger than
        ``wal_limit_mb``, it checkpoints the rest and truncates it (a writer that never pauses could otherwise keep
        the checkpointer from ever reaching its end)."""
        stop = threading.Event()
        failed: list[BaseException] = []
        wal = Path(f"{self.db_path}-wal")

        def checkpoint() -> None:
            try:
                db = self.db  # the thread's own connection
                while not stop.is_set():
                    _, logged, copied = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    if copied >= logged:
                        stop.wait(0.05)
            except BaseException as error:  # the writer's pace() checkpoints instead
                failed.append(error)
            finally:
                self._close_thread_connection()

        def pace() -> None:
            """The WAL file grows only while the checkpointer lags (once it has caught up, the next transaction
            writes the WAL from its start again); past the limit, check it all in and truncate the file."""
            deadline = time.monotonic() + 60.0  # a reader of another process may hold the WAL: then let it grow
            while failed or (wal.exists() and wal.stat().st_size > wal_limit_mb << 20):
                busy = self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
                if not busy or time.monotonic() > deadline:
                    return
                time.sleep(0.01)  # the thread's checkpoint is running: it holds the checkpointer's lock

        previous = self.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
        self.db.execute("PRAGMA wal_autocheckpoint = 0")
        thread = threading.Thread(target=checkpoint, name="wal-checkpoints", daemon=True)
        thread.start()
        try:
            yield pace
        finally:
            stop.set()
            thread.join()
            self.db.execute(f"PRAGMA wal_autocheckpoint = {int(previous)}")

    def _close_thread_connection(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            with self._guard:
                if db in self._connections:
                    self._connections.remove(db)
            db.close()
            self._local.db = None

    @property
    def schema_version(self) -> int:
        return _applied_version(self.db) or 0

    def migrate(self) -> list[int]:
        """Apply pending migrations, each in its own transaction; returns the numbers applied."""
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
            "applied_at TEXT NOT NULL)"
        )
        current = self.schema_version
        if current > LATEST:
            raise SchemaTooNewError(self.db_path, current, LATEST)
        applied = []
        for number in sorted(n for n in MIGRATIONS if n > current):
            name, function = MIGRATIONS[number]
            rebuilds = getattr(function, "rebuilds_a_parent", False)
            if rebuilds:  # only outside a transaction does this take effect
                self.db.execute("PRAGMA foreign_keys = OFF")
            try:
                with self.transaction() as db:
                    before = {tuple(r) for r in db.execute("PRAGMA foreign_key_check")} if rebuilds else set()
                    function(db)
                    after = {tuple(r) for r in db.execute("PRAGMA foreign_key_check")} if rebuilds else set()
                    broken = after - before  # only what the migration broke (an older fault is not its doing)
                    if broken:
                        raise WorkspaceError(
                            f"migration {number} would leave {len(broken)} broken references: not applied",
                            path=self.db_path,
                        )
                    db.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)", (number, name, utc_timestamp()))
            finally:
                if rebuilds:
                    self.db.execute("PRAGMA foreign_keys = ON")
            applied.append(number)
        return applied


def open_workspace(
    root: str | Path,
    create: bool = True,
    on_wait: Callable[[str], None] | None = None,
    wait_s: float | None = None,
    readonly: bool = False,
) -> Workspace:
    return Workspace.open(root, create=create, on_wait=on_wait, wait_s=wait_s, readonly=readonly)
