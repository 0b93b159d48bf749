"""Text as fixed-width bytes: how strings travel through a sort as records, and sort as composite keys.

A column of strings (pandas' ``str``/``string`` dtypes, or objects that are
all ``str`` or missing) becomes, per row, its UTF-8 bytes padded with zeros
to the column's longest (``width``) and its length in bytes, ``-1`` where
it is missing: a fixed-width record that moves as bytes like any other
field and becomes the same strings again (:func:`strings`).

Order keys: UTF-8 preserves code-point order byte by byte, so Python's
order of strings (pandas' for ``object`` and Arrow's for ``string``) is the
order of the padded bytes, read as big-endian 64-bit words, most
significant first (:func:`gpusort.keys.order.byte_columns`, as NumPy's ``S``
keys sort) -- with the length after them, which puts ``"a"`` before
``"a\\x00"`` where the padding ties them (:func:`key_columns`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from gpusort.keys import order


def is_text(dtype: Any) -> bool:
    """Whether a pandas dtype holds text: a string dtype, or ``object`` (taken to hold ``str``)."""
    return isinstance(dtype, pd.StringDtype) or (isinstance(dtype, np.dtype) and dtype.kind == "O")


def storage(width: int) -> np.dtype:
    """The record of one string of at most ``width`` UTF-8 bytes: its length (``-1``: missing), its bytes."""
    return np.dtype([("n", "<i4"), ("b", "u1", (max(width, 1),))])


def _arrow(values: Any, label: Any) -> Any:
    import pyarrow as pa

    try:
        arr = pa.array(values, type=pa.large_string(), from_pandas=True)
        return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr  # Arrow-backed pandas strings
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise TypeError(f"column {label!r} has dtype object but holds something other than str or a missing "
                        f"value ({exc}); sort_values moves object columns of strings only: convert it first "
                        "(e.g. astype(str), or to a numeric dtype)") from exc


NUMBERS = {2: np.dtype(np.int64), 3: np.dtype(np.float64)}
"""What an object column of numbers travels as, by its :func:`content` code."""


def content(values: pd.Series) -> int:
    """What a column of text dtype holds: 0 no rows, 1 strings (or missing values), 2 ints, 3 floats.

    Codes 2 and 3 are ``object`` columns of nothing but Python or NumPy
    ints that fit ``int64`` (2), or floats, NaN too (3), which travel as
    :data:`NUMBERS` and come back as objects; anything else is taken for
    strings, which :func:`records` checks.
    """
    if not len(values):
        return 0
    inferred = pd.api.types.infer_dtype(values, skipna=False) if values.dtype == object else "string"
    if inferred == "integer":
        try:
            values.to_numpy(np.int64)
        except OverflowError:  # ints past int64: not numbers that travel, and not strings either
            return 1
        return 2
    return 3 if inferred == "floating" else 1


def longest(values: Any, label: Any) -> int:
    """The most UTF-8 bytes of one string of ``values`` (0 when there is none)."""
    import pyarrow.compute as pc

    longest = pc.max(pc.binary_length(_arrow(values, label))).as_py()
    return int(longest or 0)


def records(values: Any, width: int, label: Any) -> np.ndarray:
    """``values`` as records of :func:`storage` (``width``): the bytes scattered into rows, vectorized.

    Examples
    --------
    >>> recs = records(pd.Series(["b", None, "a\\x00"], dtype=object), 2, "s")
    >>> recs["n"].tolist(), recs["b"].tolist()
    ([1, -1, 2], [[98, 0], [0, 0], [97, 0]])
    >>> strings(recs, pd.StringDtype("pyarrow")).tolist()
    ['b', <NA>, 'a\\x00']
    """
    arr = _arrow(values, label)
    n = len(arr)
    _, offsets, data = arr.buffers()
    offsets = np.frombuffer(offsets, np.int64)[arr.offset:arr.offset + n + 1]
    data = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    if n and lengths.max() > width:
        raise ValueError(f"column {label!r} holds a string of {int(lengths.max())} bytes, but it measured "
                         f"{width} bytes when the sort was built: was the frame changed in between?")
    out = np.zeros(n, storage(width))
    if n and offsets[-1] > offsets[0]:
        if n * width <= 4 * int(offsets[-1] - offsets[0]) + 32 * n:
            # Narrow records (most strings near the longest): each row's ``width`` bytes from its offset on,
            # gathered as one fixed-width blob (overlapping views of the data), then the bytes past its
            # length zeroed -- no per-byte row numbers to repeat and scatter.
            padded = np.zeros(int(offsets[-1] - offsets[0]) + width, np.uint8)
            padded[:len(padded) - width] = data[offsets[0]:offsets[-1]]
            blobs = np.ndarray((len(padded) - width + 1,), np.dtype((np.void, width)), padded, strides=(1,))
            b = blobs[offsets[:-1] - offsets[0]].view(np.uint8).reshape(n, width)
            b[np.arange(width) >= lengths[:, None]] = 0
            out["b"] = b
        else:  # a few long strings: scatter the bytes there are
            rows = np.repeat(np.arange(n), lengths)
            at = np.arange(len(rows)) - np.repeat(offsets[:-1] - offsets[0], lengths)
            out["b"][rows, at] = data[offsets[0]:offsets[-1]]
    out["n"] = np.where(arr.is_null().to_numpy(zero_copy_only=False), -1, lengths)
    return out


def strings(recs: np.ndarray, dtype: Any) -> Any:
    """The strings that :func:`records` made ``recs`` of, as a pandas array of ``dtype``, or an object Index."""
    import pyarrow as pa

    lengths = recs["n"].astype(np.int64)
    missing = lengths < 0
    lengths[missing] = 0
    width = recs["b"].shape[1]
    data = recs["b"][np.arange(width) < lengths[:, None]]  # row by row: each string's bytes, in order
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    valid = pa.py_buffer(np.packbits(~missing, bitorder="little"))
    arr = pa.LargeStringArray.from_buffers(len(recs), pa.py_buffer(offsets), pa.py_buffer(data), valid,
                                           int(missing.sum()))
    if isinstance(dtype, pd.StringDtype):
        return dtype.__from_arrow__(arr.cast(pa.large_string()))
    # An Index of dtype object: a frame (or an index) made of a NumPy array of str infers pandas' str dtype.
    return pd.Index(arr.to_numpy(zero_copy_only=False), dtype=object)


def key_widths(width: int) -> list[int]:
    """Bit widths of :func:`key_columns`: the bytes' words (:func:`gpusort.keys.order.byte_widths`), then the length."""
    return order.byte_widths(max(width, 1)) + [max(1, int(width).bit_length())]


def key_columns(recs: np.ndarray, descending: bool) -> list[np.ndarray]:
    """Order-key columns of string records, in Python's order (or its reverse); missing strings tie as empty.

    Where the strings go that are missing is the caller's column to add.

    Examples
    --------
    >>> recs = records(pd.Series(["b", "a\\x00", "a"], dtype=object), 2, "s")
    >>> np.lexsort(key_columns(recs, False)[::-1]).tolist()  # the last column is the least significant
    [2, 1, 0]
    """
    width = recs["b"].shape[1]
    lengths = np.maximum(recs["n"], 0).astype(np.uint64)
    if descending:
        lengths = np.uint64((1 << key_widths(width)[-1]) - 1) - lengths
    return order.byte_columns(recs["b"], descending) + [lengths]
