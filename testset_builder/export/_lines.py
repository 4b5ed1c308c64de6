"""Shared plumbing for the line-oriented formats: a fast Arrow read, and a slow exact read that names bad lines.

Every reader tries Arrow's CSV parser first (tens of millions of rows a second). If that parse fails, or the
table it gives fails validation, the reader re-reads the file line by line in Python, which either succeeds (for
input Arrow's parser is too strict for, such as runs of spaces) or raises :class:`InputError` with the file and
line number of the first bad line.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv

from .._hashing import string_buffers
from ..errors import InputError
from ..ids import id_problem


def check_readable(path: Path) -> None:
    if not path.exists():
        raise InputError("no such file", path=path)
    if path.is_dir():
        raise InputError("is a directory, expected a file", path=path)


INT64 = 2**63  # grades are stored as 64-bit integers


def parse_integer(text: str, what: str, path: Path, line: int) -> int:
    """``text`` as a grade: ASCII digits with an optional sign (trec_eval's atol reads "+1" as 1), within 64 bits;
    else an error naming the line. Python's int() alone would also take "1_0" and other scripts' digits."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not (digits.isascii() and digits.isdigit()):
        raise InputError(f"{what} must be an integer, got {text!r}", path=path, line=line)
    value = int(text)
    if not -INT64 <= value < INT64:
        raise InputError(f"{what} {text!r} is out of range (a 64-bit integer)", path=path, line=line)
    return value


def parse_score(text: str, path: Path, line: int) -> float:
    """``text`` as a finite score in decimal notation; else an error naming the line. Python's float() alone would
    also take "1_0" and other scripts' digits, which trec_eval's atof and Arrow's parser do not read."""
    try:
        if not text.isascii() or "_" in text:
            raise ValueError
        value = float(text)
    except ValueError:
        raise InputError(f"score must be a number, got {text!r}", path=path, line=line) from None
    if not math.isfinite(value):
        raise InputError(f"score must be finite, got {text!r}", path=path, line=line)
    return value


def integer_column(table: pa.Table | None, name: str) -> pa.Table | None:
    """``table`` with its text column ``name`` as 64-bit integers; None unless every value is ASCII digits with an
    optional minus sign, and short enough to fit (Arrow's integer parsing also takes hexadecimal), so that the slow
    read names the line."""
    if table is None:
        return None
    import pyarrow.compute as pc  # imported by every Arrow call that computes: loaded once the first read is done

    column = table.column(name)
    if column.null_count or not pc.all(pc.match_substring_regex(column, r"^-?[0-9]{1,18}$")).as_py():
        return None
    return table.set_column(table.schema.get_field_index(name), name, pc.cast(column, pa.int64()))


ASCII_SPACE = " \t\n\v\f\r"  # what trec_eval's C parser splits on; Python's split() also splits on U+00A0 and more
_FIELD_GAP = re.compile(f"[{re.escape(ASCII_SPACE)}]+")


def fields(line: str) -> list[str]:
    """A stripped line's whitespace-separated fields, split as trec_eval splits them: a no-break space or another
    Unicode space stays inside its field, where the id check names it."""
    if line.isascii():  # the usual line: str.split is as good, and faster
        return line.split()
    return _FIELD_GAP.split(line) if line else []


def numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line stripped of ASCII whitespace) for each non-blank line; undecodable bytes raise with the
    line number. A byte-order mark at the start of the file is dropped, as Arrow's parser drops it."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise InputError(
                    f"not valid UTF-8 ({error.reason} at byte {error.start})", path=path, line=number
                ) from None
            line = line.strip(ASCII_SPACE)
            if line:
                yield number, line


def json_objects(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of a JSON-lines file; a line that is not a JSON object raises
    with its number."""
    for number, line in numbered_lines(path):
        try:
            value = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(f"not valid JSON ({error.msg} at column {error.colno})", path=path, line=number) from None
        if not isinstance(value, dict):
            raise InputError(f"expected a JSON object, got {type(value).__name__}", path=path, line=number)
        yield number, value


def check_id(value: str, path: Path, line: int) -> str:
    """``value`` if it can be an id (see :func:`~testset_builder.ids.id_problem`), else an error naming the line."""
    problem = id_problem(value)
    if problem:
        raise InputError(problem, path=path, line=line)
    return value


def check_pair(seen: dict[tuple[str, str], int], key: tuple[str, str], path: Path, line: int) -> None:
    """Check a line's (query id, chunk id) and record it as seen on ``line``; a repeat is an error naming both
    lines."""
    for value in key:
        check_id(value, path, line)
    if key in seen:
        raise InputError(
            f"({key[0]}, {key[1]}) repeats line {seen[key]}; each pair may appear once", path=path, line=line
        )
    seen[key] = line


def first_line(path: Path) -> str | None:
    for _, line in numbered_lines(path):
        return line
    return None


def _valid_utf8(table: pa.Table) -> bool:
    """Whether every string column holds valid UTF-8. Pure ASCII (the usual ids) is valid by construction and costs
    one byte reduction; other text is validated by Arrow."""
    for column in table.columns:
        if not pa.types.is_string(column.type):
            continue
        for chunk in column.chunks:
            offsets, data = string_buffers(chunk)
            if len(data) > offsets[0] and data[int(offsets[0]) :].max() >= 0x80:
                try:
                    chunk.validate(full=True)
                except pa.ArrowInvalid:
                    return False
    return True


def fast_read(
    path: Path, names: list[str], types: dict[str, pa.DataType], delimiter: str, skip_rows: int = 0
) -> pa.Table | None:
    """Arrow CSV read with a fixed column layout; None when Arrow cannot parse the file as given.

    Arrow's UTF-8 check while parsing is a fifth of the read's time; the text columns are checked after the read
    instead, which for ASCII is one pass over the bytes. Arrow parses a block per thread: a file of one block is
    read on the calling thread, without waking Arrow's pool for nothing to share.
    """
    block = 1 << 24
    try:
        threads = path.stat().st_size > block
        table = pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(
                column_names=names, skip_rows=skip_rows, block_size=block, use_threads=threads
            ),
            parse_options=pacsv.ParseOptions(delimiter=delimiter, quote_char=False, ignore_empty_lines=True),
            convert_options=pacsv.ConvertOptions(
                column_types=types,
                include_columns=list(types),
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
                check_utf8=False,
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeDecodeError):
        return None
    return table if _valid_utf8(table) else None


def sniff_delimiter(line: str, fields: int) -> str | None:
    """The single-character delimiter that splits ``line`` into ``fields`` non-empty fields, if any."""
    for delimiter in ("\t", " "):
        parts = line.split(delimiter)
        if len(parts) == fields and all(parts):
            return delimiter
    return None


def read_with_fallback(
    path: Path, fast: Callable[[], pa.Table | None], slow: Callable[[], pa.Table], build: Callable[[pa.Table], object]
):
    """Build the result from the fast table; on any failure, rebuild from the exact line-by-line parse."""
    table = fast()
    if table is not None:
        try:
            return build(table)
        except InputError:
            pass
    try:
        return build(slow())
    except InputError as error:
        if error.path is None:
            raise InputError(error.message, path=path) from None
        raise
