"""``import-logs``: a production log into the workspace, in bounded batches.

Each record's query is scrubbed of personal data (unless turned off) and becomes a ``real`` query (its id derived
from the normalised text, as for a queries file); the workspace sums, per query, how often it was asked, when first
and last, its feedback (thumbs, ratings, comments) and how often its cited chunks were clicked, and keeps the
answer and the retrieval of its latest record. The retrieval is the production system's run: its chunks join the
query's candidate pool with their production rank (retriever ``production``), so the estimate, ``select`` and the
reviewers see what the live system showed.

Retrieved results name chunks by id or by text (matched exactly or normalised, see :mod:`.matching`; a text
matching no chunk, or several unrelated ones, is counted and listed). An id the workspace does not have (a
LlamaIndex or LangChain node id) is matched by the result's text when the log carries it, else counted and listed
with its line, never guessed. A record naming one chunk twice keeps it once, at its best rank.

A log file is one import, by the sha256 of its bytes: importing it again adds nothing, and an import killed part-way
resumes after the last committed batch, counting no record twice. A request with an id (a trace id) is recorded
once whatever file holds it: the workspace keeps a hash of each id recorded, so a grown log or overlapping exports
add only what is new. Requests the reader skips (a trace without a retrieval, one cut off) and those seen before
are counted by reason, never recorded. The part of a trace a file holds without its root (a file rotated
mid-trace) is kept, scrubbed, until a later file's part completes the trace into one record.

Before anything is stored the head of the log is read as a sample: when none of its lines gives a record, or more
than half are unreadable, the import stops with an error that says what the lines looked like (another format?),
and the file is not recorded, so a rerun with the right ``--format`` works. ``force`` imports again a file whose
earlier import stored no record (one made before this check, which recorded an unreadable file as imported).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..._hashing import file_sha256
from ...config import LogsConfig
from ...corpus.backfill import run_due_backfills
from ...errors import InputError
from ...export.logs import ROOT_MISSING, Feedback, LogRecord, Notice, Skipped, Unreadable, completed_trace, read_log
from ...export.queries import MAX_QUERY_CHARS, derived_id
from ...records import Query, QueryOrigin
from ...registry import LOG_FORMATS, log_format_of
from ...retrieval.pool import Candidate
from ...store import logs as stored_logs
from ...store import rows
from ...store.workspace import Workspace
from .feedback import WITHOUT_RETRIEVAL, add_change, feedback_change, nearest_retrieval
from .matching import ChunkMatcher
from .scrub import Scrubber

SHOWN = 20  # problems listed by line in the summary; all are counted
PRODUCTION = "production"  # the retriever name the logged results carry in candidate pools


@dataclass
class LogImportSummary:
    source: str
    format: str
    import_id: str
    already_imported: bool = False
    resumed_after_line: int = 0
    records: int = 0
    unreadable: int = 0
    new_queries: int = 0
    results: int = 0
    by_id: int = 0
    by_exact_text: int = 0
    by_normalised_text: int = 0
    unknown_ids: int = 0
    unknown_ids_by_text: int = 0  # results whose id the workspace lacks, matched by their text instead
    unmatched_texts: int = 0
    records_with_retrieval: int = 0
    results_folded: int = 0  # results naming a chunk an earlier result of the same record named (kept at its best rank)
    feedback: int = 0  # records with a thumbs, a rating or a comment
    late_feedback: int = 0  # requests recorded before whose feedback this import added (or changed)
    feedback_attached: int = 0  # traces with feedback alone (generation traces), counted on their session's retrieval
    completed_traces: int = 0  # records of traces split across files, this file's part completing an earlier one's
    skipped: dict[str, int] = field(default_factory=dict)  # requests read but recorded as no query, by why
    notes: list[str] = field(default_factory=list)  # what the reader said of the whole log (where its feedback is)
    scrubbed: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # the first SHOWN, "line N: why"
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)

    def note(self, line: int, reason: str) -> None:
        if len(self.problems) < SHOWN:
            self.problems.append(f"line {line}: {reason}")


COUNTED = (
    "records", "unreadable", "new_queries", "results", "by_id", "by_exact_text", "by_normalised_text", "unknown_ids",
    "unknown_ids_by_text", "unmatched_texts", "records_with_retrieval", "results_folded", "feedback", "late_feedback",
    "feedback_attached", "completed_traces",
)  # fmt: skip


def session_key(session: str) -> str:
    """What the workspace keeps of a logged session id: enough of its sha256 to tell sessions apart, so queries can
    resample by session while the id itself (a user's, perhaps) is stored nowhere. A release numbers the sessions
    afresh (:func:`~testset_builder.stages.release.logged.logged_rows`), so not even the hash is published."""
    return "s" + hashlib.sha256(session.encode("utf-8")).hexdigest()[:16]


def trace_key(trace: str) -> str:
    """What the workspace keeps of a request's id (a trace id): its sha256, enough to know the request again when a
    later log holds it too, and nothing that gives the id back."""
    return hashlib.sha256(trace.encode("utf-8")).hexdigest()[:32]


SEEN_BEFORE = "seen before"  # a request (trace) an earlier import or line recorded: skipped, counted under this


class _Batch:
    """Records folded per query until the batch is written."""

    def __init__(self) -> None:
        self.logs: dict[str, stored_logs.QueryLog] = {}
        self.queries: dict[str, Query] = {}
        self.traces: dict[str, stored_logs.TraceFeedback] = {}  # the requests recorded, by hashed id
        self.changed: dict[str, stored_logs.TraceFeedback] = {}  # requests recorded before whose feedback changed
        self.late: dict[str, stored_logs.QueryLog] = {}  # feedback to add to queries logged before
        self.partial: dict[str, list[dict]] = {}  # the spans held of traces split across files, by hashed id
        self.completed: set[str] = set()  # traces split across files now recorded: their held parts go
        self.records = 0

    def held(self, key: str, stored: dict[str, stored_logs.TraceFeedback]) -> stored_logs.TraceFeedback | None:
        """What is counted for the request ``key``: recorded by this batch, or before (``stored``)."""
        return self.traces.get(key) or self.changed.get(key) or stored.get(key)

    def add_feedback(self, key: str, held: stored_logs.TraceFeedback, item: LogRecord | Feedback) -> bool:
        """Add what ``item``'s feedback changes of the request ``key`` (counted as ``held``); whether it did."""
        change = feedback_change(held, item.thumbs, item.rating, item.comment)
        if change is None:
            return False
        if key not in self.traces:
            self.changed[key] = held
        target = self.logs.get(held.query_id) or self.late.setdefault(
            held.query_id, stored_logs.QueryLog(held.query_id)
        )
        add_change(target, change)
        return True

    def add(self, query: Query, record: LogRecord, retrieval: list[tuple[int, str, float | None]]) -> None:
        self.records += 1
        self.queries.setdefault(query.query_id, query)
        log = self.logs.setdefault(query.query_id, stored_logs.QueryLog(query.query_id))
        stamp = record.timestamp
        latest = log.frequency == 0 or stamp is None or (log.last_seen is None or stamp >= log.last_seen)
        log.frequency += 1
        if stamp is not None:
            log.first_seen = min(stamp, log.first_seen) if log.first_seen else stamp
            log.last_seen = max(stamp, log.last_seen) if log.last_seen else stamp
        if record.session:
            log.keep_session(session_key(record.session), stamp)
        log.thumbs_up += record.thumbs == 1
        log.thumbs_down += record.thumbs == -1
        if record.rating is not None:
            log.rating_sum += record.rating
            log.ratings += 1
        if record.comment:
            log.comments += 1
        log.cited += bool(record.cited)
        log.clicked += bool(set(record.clicked) & set(record.cited) if record.cited else record.clicked)
        if latest:
            log.last_answer = record.answer or log.last_answer  # scrubbed when written: once a query a batch
            log.last_comment = record.comment or log.last_comment
            if retrieval:
                log.retrieval, log.retrieved_at = retrieval, stamp or log.retrieved_at


def fold_repeats(retrieval: list[tuple[int, str, float | None]]) -> tuple[list[tuple[int, str, float | None]], int]:
    """A record's resolved retrieval with each chunk once, at its best rank, and how many results were folded. Two
    results name one chunk when a document was ingested twice in the vector store, or two results have the same
    text (both match one chunk): a run must not list a chunk twice for a query."""
    kept: dict[str, tuple[int, str, float | None]] = {}
    for result in sorted(retrieval, key=lambda r: r[0]):
        kept.setdefault(result[1], result)
    return list(kept.values()), len(retrieval) - len(kept)


SAMPLE = 200  # the head of the log read before anything is stored: lines that should give records


def import_logs(
    workspace: Workspace,
    path: str | Path,
    settings: LogsConfig | None = None,
    batch_size: int = 2000,
    force: bool = False,
) -> LogImportSummary:
    """See the module docstring."""
    settings, path = settings or LogsConfig(), Path(path)
    if not path.is_file():
        raise InputError("no such log file", path=path)
    with workspace.exclusive("import-logs"):
        run_due_backfills(workspace)  # matching by text reads the hashes an upgraded workspace's chunks lack
        return _import(workspace, path, settings, batch_size, force)


HEAD_BYTES = 65536  # the start of a refused log that is looked at to name its format
REASONS_SHOWN = 3  # the unreadable items a refusal quotes


def _check_sample(path: Path, settings: LogsConfig, items: list) -> None:
    """Refuse a log whose head (``items``) gives no request read whole (a record, or one skipped for a reason), or
    more unreadable lines than such requests; name its format when it looks like another one."""
    records = sum(isinstance(item, (LogRecord, Feedback, Skipped)) for item in items)
    unreadable = sum(isinstance(item, Unreadable) for item in items)
    if records == 0 or unreadable > records:
        with path.open("rb") as handle:
            guess = log_format_of(handle.read(HEAD_BYTES).decode("utf-8", "replace"))
        counted = f"read as {settings.format}, {records} of the first {len(items)} items give a record"
        if guess is not None and guess != settings.format:
            raise InputError(
                f"{counted}: it looks like {LOG_FORMATS[guess].description}, so import it with --format {guess} "
                f"(config: logs.format: {guess}). Nothing was imported",
                path=path,
            )
        reasons = [_shortened(str(item)) for item in items if isinstance(item, Unreadable)][:REASONS_SHOWN]
        others = ", ".join(f for f in LOG_FORMATS if f != settings.format)
        raise InputError(
            f"{counted} and {unreadable} cannot be read ({'; '.join(reasons) or 'no line in it'}): is it another "
            f"format (--format {others}) or do its field names need the config's logs.fields? Nothing was imported",
            path=path,
        )


def _shortened(text: str, limit: int = 160) -> str:
    """``text`` cut at a word's end to about ``limit`` characters."""
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."


def _import(workspace: Workspace, path: Path, settings: LogsConfig, batch_size: int, force: bool) -> LogImportSummary:
    clock, db = time.perf_counter(), workspace.db
    if not stored_logs.has_live_chunks(db):
        raise InputError(
            "the workspace has no chunks: chunk the corpus the logged system retrieves from first "
            "(`testset-builder chunk SOURCE --workspace ...`), so logged results can be matched to chunks",
            path=workspace.root,
        )
    import_id = file_sha256(path)
    summary = LogImportSummary(path.name, settings.format, import_id)
    # a query already in the workspace under an id of its own (a BEIR import's q1) is the one a log asks again
    named = {derived_id(text): query_id for query_id, text in rows.real_query_texts(db)}
    state = stored_logs.import_state(db, import_id)
    forget = False  # --force: the earlier import's record goes, in the transaction that begins the new one
    if force and state is not None:
        stored = stored_logs.import_counts(db, import_id).get("records", 0)
        if stored:
            raise InputError(
                f"--force: its earlier import stored {stored} records, and importing it again would count each of "
                "them twice; --force is for a file whose import stored none",
                path=path,
            )
        state, forget = None, True
    if state is not None:
        _restore(summary, stored_logs.import_counts(db, import_id))
        if state[0] == "done":
            summary.already_imported = True
            return summary
        summary.resumed_after_line = state[1]
    matcher = ChunkMatcher.of(db)
    scrubber = Scrubber(settings.pii_patterns)
    scrubber.counts.update(summary.scrubbed)  # a resumed import goes on counting
    scrub = scrubber if settings.scrub_pii else (lambda text: text)
    hold_scrub = Scrubber(settings.pii_patterns) if settings.scrub_pii else (lambda text: text)
    batch, last_line = _Batch(), summary.resumed_after_line

    def flush(through: int) -> None:
        nonlocal batch
        with workspace.transaction() as tx:
            summary.new_queries += rows.put_queries(tx, batch.queries.values())
            stored_logs.add_query_logs(tx, batch.logs.values())
            stored_logs.add_traces(tx, import_id, batch.traces.values())
            stored_logs.update_trace_feedback(tx, batch.changed.values())
            stored_logs.add_feedback(tx, batch.late.values())
            stored_logs.hold_partial_traces(tx, import_id, batch.partial.items())
            stored_logs.drop_partial_traces(tx, batch.completed)
            rows.put_candidates(
                tx,
                [
                    Candidate(query_id, chunk_id, PRODUCTION, rank, score if score is not None else 0.0)
                    for query_id, log in batch.logs.items()
                    for rank, chunk_id, score in log.retrieval
                ],
            )
            summary.scrubbed = {k: v for k, v in scrubber.counts.items() if v}
            stored_logs.advance_import(tx, import_id, through, _counts(summary))
        batch = _Batch()

    def fold(items: list[LogRecord | Feedback | Skipped | Unreadable | Notice]) -> None:
        """A slice of the log into the batch: ids, texts and requests seen before resolved with one lookup each for
        the slice."""
        seen = stored_logs.traces_among(
            db, (trace_key(i.trace) for i in items if isinstance(i, LogRecord | Feedback | Skipped) and i.trace)
        )
        items = completed(items, seen)
        alone: list[Feedback] = []
        known = stored_logs.live_chunk_ids_among(
            db, (r.chunk_id for i in items if isinstance(i, LogRecord) for r in i.retrieved if r.chunk_id is not None)
        )
        matched = matcher.match_all(
            r.text
            for i in items
            if isinstance(i, LogRecord)
            for r in i.retrieved
            if r.text is not None and (r.chunk_id is None or r.chunk_id not in known)
        )
        for item in items:
            if isinstance(item, Notice):
                if item.text not in summary.notes:  # a resumed import reads the whole file's notes again
                    summary.notes.append(item.text)
                continue
            if isinstance(item, Unreadable):
                summary.unreadable += 1
                summary.note(item.line, item.reason)
                continue
            if isinstance(item, Skipped):
                skip(item.reason)
                continue
            item.comment = scrub(item.comment)  # each record's: all are counted
            if isinstance(item, Feedback):
                alone.append(item)
                continue
            key = trace_key(item.trace) if item.trace is not None else None
            held = batch.held(key, seen) if key is not None else None
            if held is not None:
                skip(SEEN_BEFORE)
                summary.late_feedback += held.query_id is not None and batch.add_feedback(key, held, item)
                continue
            text = " ".join((scrub(item.query) or "").split())
            item.answer = scrub(item.answer)
            if len(text) > MAX_QUERY_CHARS:
                summary.unreadable += 1
                summary.note(item.line, f"a query of {len(text)} characters (at most {MAX_QUERY_CHARS})")
                continue
            retrieval = []
            for result in item.retrieved:
                summary.results += 1
                if result.chunk_id is not None and result.chunk_id in known:
                    summary.by_id += 1
                    retrieval.append((result.rank, result.chunk_id, result.score))
                    continue
                if result.chunk_id is not None:
                    summary.unknown_ids += 1
                    if result.text is None:
                        summary.note(item.line, f"result {result.rank}: no chunk {result.chunk_id!r} in the workspace")
                        continue
                found, how = matched[result.text]
                if found is None and result.chunk_id is not None:  # counted as an unknown id
                    summary.note(item.line, f"result {result.rank}: no chunk {result.chunk_id!r}, and its text: {how}")
                    continue
                if found is None:
                    summary.unmatched_texts += 1
                    summary.note(item.line, f"result {result.rank}: {how}")
                    continue
                summary.unknown_ids_by_text += result.chunk_id is not None
                summary.by_exact_text += how == "exact"
                summary.by_normalised_text += how == "normalised"
                retrieval.append((result.rank, found, result.score))
            retrieval, folded = fold_repeats(retrieval)
            summary.results_folded += folded
            summary.feedback += item.thumbs is not None or item.rating is not None or bool(item.comment)
            summary.records += 1
            summary.records_with_retrieval += bool(retrieval)
            query_id = named.get(derived_id(text)) or derived_id(text)
            query = Query(query_id=query_id, text=text, origin=QueryOrigin.real, metadata={"from": "logs"})
            if key is not None:
                batch.traces[key] = stored_logs.TraceFeedback(
                    key, query.query_id, "request", item.thumbs, item.rating, bool(item.comment),
                    session_key(item.session) if item.session else None, item.timestamp,
                )  # fmt: skip
            batch.add(query, item, retrieval)
        for item in alone:  # after the slice's records: a generation trace's retrieval may be among them
            place(item, seen)

    def skip(reason: str) -> None:
        summary.skipped[reason] = summary.skipped.get(reason, 0) + 1

    def completed(items: list, seen: dict[str, stored_logs.TraceFeedback]) -> list:
        """``items`` with each trace split across files whole again: a part of a trace no import recorded, held
        when its root is elsewhere (scrubbed as a query is), completes the part an earlier file held into a record.
        Every part is counted under its reason until the record is made."""
        traced = {
            id(i): trace_key(i.trace)
            for i in items
            if (isinstance(i, LogRecord) and i.trace) or (isinstance(i, Skipped | Feedback) and i.trace and i.spans)
        }
        held = stored_logs.partial_traces_among(db, traced.values())
        out = []
        for item in items:
            key = traced.get(id(item))
            if key is not None and isinstance(item, LogRecord) and (key in held or key in batch.partial):
                batch.partial.pop(key, None)  # the whole trace in this file: its part held from another goes
                batch.completed.add(key)
            if key is None or isinstance(item, LogRecord) or batch.held(key, seen) is not None:
                out.append(item)
                continue
            earlier = batch.partial.get(key) or (held.get(key) if key not in batch.completed else None)
            whole = completed_trace(item.trace, item.line, [earlier, item.spans], settings.fields) if earlier else item
            if isinstance(whole, LogRecord):
                batch.partial.pop(key, None)
                batch.completed.add(key)
                summary.completed_traces += 1
                out.append(whole)
                continue
            if isinstance(whole, Skipped) and whole.reason == ROOT_MISSING:
                batch.partial[key] = [held_span(span) for span in whole.spans or []]
            out.append(item)
        return out

    def held_span(span: dict) -> dict:
        """A span to hold until its trace is whole, the user's text scrubbed (not a result's, which is matched to
        chunks by its text)."""
        attributes = {
            name: value if not isinstance(value, str) or ".document." in name else hold_scrub(value)
            for name, value in span["attributes"].items()
        }
        return {**span, "attributes": attributes}

    def place(item: Feedback, seen: dict[str, stored_logs.TraceFeedback]) -> None:
        """Feedback alone: to the request its id names, else to its session's nearest earlier retrieval."""
        key = trace_key(item.trace) if item.trace is not None else None
        held = batch.held(key, seen) if key is not None else None
        if held is not None:
            if held.query_id is not None and batch.add_feedback(key, held, item):
                summary.late_feedback += 1
            else:
                skip(SEEN_BEFORE)
            return
        session = session_key(item.session) if item.session else None
        retrieval = None
        if session is not None and key is not None:
            mine = [t for t in batch.traces.values() if t.kind == "request" and t.session == session]
            stored = [t for t in stored_logs.retrievals_in_sessions(db, [session]) if t.trace_key not in batch.traces]
            retrieval = nearest_retrieval([*mine, *stored], item.timestamp)
        if retrieval is None:
            skip(WITHOUT_RETRIEVAL)
            return
        held = stored_logs.TraceFeedback(key, retrieval.query_id, "feedback", session=session, seen_at=item.timestamp)
        batch.traces[key] = held
        batch.add_feedback(key, held, item)
        summary.feedback_attached += 1

    pending: list[LogRecord | Skipped | Unreadable | Notice] = []
    checked = state is not None  # a resumed import passed the check when it began

    def begin(head: list) -> None:
        """Before anything is stored: the head of the log must read as this format (see the module docstring);
        then the import is recorded and the head goes into the batch."""
        nonlocal checked
        _check_sample(path, settings, head)
        with workspace.transaction() as tx:
            if forget:
                stored_logs.forget_import(tx, import_id)
            stored_logs.begin_import(tx, import_id, path.name, settings.format)
        checked = True
        for held in head:
            take(held)

    def take(item: LogRecord | Skipped | Unreadable | Notice) -> None:
        """An item into the batch; a full batch is written first, at a line's end (every item of its lines in)."""
        nonlocal pending, last_line
        if len(pending) >= batch_size and item.line > last_line:
            fold(pending)
            pending = []
            flush(last_line)
        last_line = max(last_line, item.line)
        pending.append(item)

    head: list[LogRecord | Skipped | Unreadable | Notice] = []
    for item in read_log(path, settings.format, settings.fields):
        if item.line <= summary.resumed_after_line:
            continue
        if checked:
            take(item)
            continue
        head.append(item)
        if len(head) >= SAMPLE:
            begin(head)
    if not checked:
        begin(head)
    fold(pending)
    flush(last_line)
    with workspace.transaction() as tx:
        stored_logs.finish_import(tx, import_id, _counts(summary))
    summary.seconds = round(time.perf_counter() - clock, 3)
    return summary


def _counts(summary: LogImportSummary) -> dict:
    return {
        **{name: getattr(summary, name) for name in COUNTED},
        "problems": summary.problems,
        "scrubbed": summary.scrubbed,
        "skipped": summary.skipped,
        "notes": summary.notes,
    }


def _restore(summary: LogImportSummary, counts: dict) -> None:
    for name in COUNTED:
        setattr(summary, name, counts.get(name, 0))
    summary.problems = list(counts.get("problems", []))
    summary.scrubbed = dict(counts.get("scrubbed", {}))
    summary.skipped = dict(counts.get("skipped", {}))
    summary.notes = list(counts.get("notes", []))
