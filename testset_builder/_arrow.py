"""Arrow <-> numpy for numeric and boolean columns, read from and written to Arrow's buffers.

pyarrow's own ``to_numpy`` and ``pa.array(ndarray)`` import pandas on their first call (its C++ conversion sets up
pandas' static data; ``pa.array`` asks whether the input is a pandas categorical), a tenth of a second that a small
``score`` otherwise spends on a library it never uses. These read the buffers instead: zero-copy for numeric
columns without nulls, as pyarrow's would be. A column with nulls falls back to pyarrow's (nulls need its
handling).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_NUMPY = {
    pa.int8(): np.int8,
    pa.int16(): np.int16,
    pa.int32(): np.int32,
    pa.int64(): np.int64,
    pa.uint8(): np.uint8,
    pa.uint16(): np.uint16,
    pa.uint32(): np.uint32,
    pa.uint64(): np.uint64,
    pa.float32(): np.float32,
    pa.float64(): np.float64,
}
_ARROW = {np.dtype(v): k for k, v in _NUMPY.items()}


def _bits(buffer: pa.Buffer, offset: int, length: int) -> np.ndarray:
    """Arrow's little-endian bitmap (a boolean array's values or a validity buffer) as numpy booleans."""
    bits = np.frombuffer(buffer, dtype=np.uint8)
    return np.unpackbits(bits, bitorder="little", count=offset + length)[offset:].view(bool)


def _one_to_numpy(array: pa.Array, fill: int | float | None) -> np.ndarray:
    validity, data = array.buffers()[:2]
    dtype = bool if array.type == pa.bool_() else _NUMPY.get(array.type)
    if dtype is None or (array.null_count and fill is None):
        return array.to_numpy(zero_copy_only=False)
    if len(array) == 0:
        return np.zeros(0, dtype=dtype)
    if dtype is bool:
        values = _bits(data, array.offset, len(array))
    else:
        values = np.frombuffer(data, dtype=dtype, count=array.offset + len(array))[array.offset :]
        values.flags.writeable = False  # a view of the Arrow buffer, as pyarrow's zero-copy one: never written
    if array.null_count:  # the values under a null are unspecified: each is set to ``fill``
        values = np.where(_bits(validity, array.offset, len(array)), values, fill)
    return values


def to_numpy(values: pa.Array | pa.ChunkedArray, fill: int | float | None = None) -> np.ndarray:
    """A numeric or boolean Arrow array or column as numpy (a read-only view where the data is one numeric chunk).

    Nulls become ``fill`` when it is given (as ``fill_null`` would, without pyarrow's scalar conversion; it must be a
    value of the column's type).
    """
    if isinstance(values, pa.ChunkedArray):
        if values.num_chunks == 1:
            return _one_to_numpy(values.chunk(0), fill)
        if values.num_chunks == 0:
            return np.zeros(0, dtype=bool if values.type == pa.bool_() else _NUMPY.get(values.type, object))
        return np.concatenate([_one_to_numpy(chunk, fill) for chunk in values.chunks])
    return _one_to_numpy(values, fill)


def from_numpy(values: np.ndarray) -> pa.Array:
    """A one-dimensional numeric numpy array as an Arrow array without nulls (zero-copy where it is contiguous)."""
    values = np.ascontiguousarray(values)
    if values.ndim != 1:
        raise TypeError(f"from_numpy takes a one-dimensional numeric array, not {values.dtype} x {values.ndim}")
    if values.dtype == bool:
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
    arrow_type = _ARROW.get(values.dtype)
    if arrow_type is None:
        raise TypeError(f"from_numpy takes a one-dimensional numeric array, not {values.dtype} x {values.ndim}")
    return pa.Array.from_buffers(arrow_type, len(values), [None, pa.py_buffer(values)])
