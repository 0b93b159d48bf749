"""Composite order keys: several key columns compared lexicographically, as one order key.

``lexsort``, complex keys and N-D sorts along an axis all compare tuples:
the key arrays of a lexsort, a complex number's NaN class, then its parts
(:func:`gpusort.keys.order.complex_columns`), or a row number, then the key.
Each column is first an unsigned order key (:func:`gpusort.keys.order.encode`)
of as many bits as it needs (a row number of ``R`` rows takes
``(R - 1).bit_length()``, a bool one bit); a :class:`Layout` then writes the
columns one after another into a single bit string, most significant first,
so that comparing the strings as unsigned integers compares the tuples.

* Up to 64 bits the string is one unsigned integer of 8, 16, 32 or 64 bits:
  a 1-D array that every backend, the splitters and the GPU kernels already
  sort like any integer key.  ``lexsort`` of two int32 keys, or the rows of
  an N-D float32 sort, cost a 64-bit sort and nothing more.
* Past 64 bits it is a 2-D ``(n, words)`` uint64 array, rows compared
  lexicographically (the backends' :func:`argsort_rows`): the first word
  decides, later words break its ties.

Every operation is an elementwise array method, so NumPy and CuPy arrays
both work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from gpusort.arrays import namespace

WORD = 64


@dataclass(frozen=True)
class Layout:
    """Bit widths of the columns of a composite key, most significant first.

    Examples
    --------
    >>> layout = Layout((3, 8))                 # a row number < 8, then a uint8 key
    >>> okeys = layout.pack([np.array([1, 0, 1]), np.array([7, 9, 2], np.uint8)])
    >>> okeys.dtype, np.argsort(okeys).tolist()
    (dtype('uint16'), [1, 2, 0])
    >>> layout.unpack(okeys, 1).tolist()
    [7, 9, 2]
    >>> Layout((2, 64, 64)).words
    3
    """

    widths: tuple[int, ...]

    def __post_init__(self):
        if not self.widths or any(not 0 < w <= WORD for w in self.widths):
            raise ValueError(f"column widths must be 1 to {WORD} bits; got {self.widths}")

    @property
    def bits(self) -> int:
        return sum(self.widths)

    @property
    def words(self) -> int:
        """64-bit words per key when the key is 2-D; 1 when it fits one integer."""
        return -(-self.bits // WORD)

    @property
    def dtype(self) -> np.dtype:
        """The order keys' dtype: the narrowest unsigned integer that holds them (uint64 words past 64 bits)."""
        for size in (8, 16, 32, 64):
            if self.bits <= size:
                return np.dtype(f"u{size // 8}")
        return np.dtype(np.uint64)

    def _offsets(self) -> list[int]:
        """Each column's first bit, counted from the most significant bit of the string."""
        return np.concatenate(([0], np.cumsum(self.widths)[:-1])).tolist()

    @property
    def shifts(self) -> list[int]:
        """Each column's lowest bit in a 1-D key (one that fits :attr:`dtype`): the shift that places it.

        Examples
        --------
        >>> Layout((3, 20)).shifts   # 23 bits in a uint32: the last 9 stay zero
        [29, 9]
        """
        size = 8 * self.dtype.itemsize
        return [size - at - w for at, w in zip(self._offsets(), self.widths)]

    def pack(self, columns: Sequence[Any]) -> Any:
        """The composite keys of ``columns`` (unsigned integers, each below ``2**width``).

        1-D of :attr:`dtype` up to 64 bits, else ``(n, words)`` uint64.
        """
        if len(columns) != len(self.widths):
            raise ValueError(f"{len(columns)} columns for a layout of {len(self.widths)}")
        xp = namespace(columns[0])
        if self.words == 1:
            dtype = self.dtype
            out = xp.zeros(len(columns[0]), dtype)
            for column, shift in zip(columns, self.shifts):
                out |= column.astype(dtype) << dtype.type(shift)
            return out
        out = xp.zeros((len(columns[0]), self.words), np.uint64)
        for column, at, w in zip(columns, self._offsets(), self.widths):
            column = column.astype(np.uint64)
            for q in range(at // WORD, (at + w - 1) // WORD + 1):
                # The column's lowest bit sits `shift` bits above word q's lowest bit
                # (negative: below it, so word q holds the column's high bits).
                shift = WORD * (q + 1) - (at + w)
                part = column << np.uint64(shift) if shift >= 0 else column >> np.uint64(-shift)
                out[:, q] |= part
        return out

    def unpack(self, okeys: Any, i: int) -> Any:
        """Column ``i`` of composite keys ``okeys``, as ``uint64`` (or :attr:`dtype` when 1-D)."""
        at, w = self._offsets()[i], self.widths[i]
        if self.words == 1:
            dtype = self.dtype
            return (okeys >> dtype.type(self.shifts[i])) & dtype.type((1 << w) - 1)
        xp = namespace(okeys)
        out = xp.zeros(okeys.shape[0], np.uint64)
        mask = np.uint64((1 << w) - 1)
        for q in range(at // WORD, (at + w - 1) // WORD + 1):
            shift = WORD * (q + 1) - (at + w)
            word = okeys[:, q]
            out |= word >> np.uint64(shift) if shift >= 0 else word << np.uint64(-shift)
        return out & mask


def argsort_rows(okeys: np.ndarray, runs: bool = False) -> np.ndarray:
    """Stable positions that sort composite keys: 1-D as integers, 2-D rows lexicographically.

    Unsorted integer rows sort as one wide integer (:func:`argsort_words`):
    each word counts only the bits its values span, so a word of a
    low-cardinality ``sort_values`` column adds a few bits, a constant word
    none.  ``runs``: the rows are sorted runs end to end (a merge), which
    those passes cannot see; the rows' unsigned words written big-endian
    compare as byte strings in the rows' order, and the stable sort of those
    strings (timsort) finds the runs and merges them.

    Examples
    --------
    >>> argsort_rows(np.array([[1, 5], [0, 9], [1, 2]], np.uint64)).tolist()
    [1, 2, 0]
    >>> argsort_rows(np.array([[0, 9], [1, 2], [0, 3], [1, 5]], np.uint64), runs=True).tolist()
    [2, 0, 1, 3]
    """
    if okeys.ndim == 1:
        return argsort_column(okeys)
    if runs and okeys.dtype.kind == "u" and okeys.shape[1]:
        # Fixed-width byte strings compare as memcmp would (trailing NULs only pad equal lengths).
        words = np.ascontiguousarray(okeys, dtype=okeys.dtype.newbyteorder(">"))
        return np.argsort(words.view(f"S{okeys.dtype.itemsize * okeys.shape[1]}").ravel(), kind="stable")
    if okeys.dtype.kind not in "ui":  # composite keys are unsigned words; other kinds compare as lexsort does
        return np.lexsort(okeys.T[::-1])
    if not okeys.shape[1]:  # no words: every row ties
        return np.arange(len(okeys), dtype=np.intp)
    return argsort_words([okeys[:, q] for q in range(okeys.shape[1])])


def argsort_column(keys: np.ndarray) -> np.ndarray:
    """Stable positions that sort 1-D ``keys``: integers wider than two bytes by :func:`argsort_words`.

    Sorted keys do not come here: a run's keys are checked first
    (the backends' ``is_sorted``, in :func:`gpusort.engine.tasks.sort_pair`).

    Examples
    --------
    >>> argsort_column(np.array([2**40 + 7, 2**40, 2**40 + 7, 2**40 + 1], np.uint64)).tolist()
    [1, 3, 0, 2]
    """
    if keys.dtype.kind not in "ui" or keys.dtype.itemsize <= 2:
        return np.argsort(keys, kind="stable")  # 1- and 2-byte integers: NumPy's radix sort; others as NumPy does
    return argsort_words([keys])


def argsort_words(words: Sequence[np.ndarray]) -> np.ndarray:
    """Stable positions that sort rows of integer columns (``words``, most significant first) lexicographically.

    NumPy's stable argsort of wide integers is a timsort of indirect
    compares, several times slower than its SIMD sort of the values
    themselves.  So the rows sort as one unsigned integer -- each column
    offset by its least value and taking only the bits its values span,
    the columns' bits end to end -- in passes from the least significant
    end: each pass packs a digit of ``64 - b`` bits above the rank ``b``
    bits hold (every row's place in the previous pass's order), sorts
    those unique values, and reads the ranks back.  Equal digits keep the
    previous pass's order, so every pass is stable and the last one gives
    the rows' stable order.  Narrow columns cost a few bits, a constant one
    none: two passes sort 2^23 rows of a 1,024-value int64 column and a
    full-range one (73 bits).  Keys of three passes or more (two full
    64-bit words, a string's words) sort by their top digit first and then
    only the groups it ties that differ below (:func:`_argsort_top`).

    Examples
    --------
    >>> argsort_words([np.array([1, 0, 1, 0]), np.array([5, 9, 5, 2], np.uint64)]).tolist()
    [3, 1, 0, 2]
    """
    n = len(words[0]) if len(words) else 0
    columns, widths = [], []
    for word in words:
        column = _unsigned(word)
        low, high = _span(column)
        columns.append((column, low))
        widths.append((high - low).bit_length())
    rank_bits = max(1, (n - 1).bit_length())
    room = 64 - rank_bits
    total = sum(widths)
    lowest = np.cumsum(([0] + widths[::-1])[:-1])[::-1].tolist()  # each column's lowest bit in the whole key
    if total > 2 * room:  # three or more passes from the least significant end: the top digit first
        return _argsort_top(columns, widths, lowest, n, rank_bits, room)
    ranks = np.arange(n, dtype=np.uint64)
    positions = None
    for first in range(0, total, room):
        last = min(total, first + room)
        digit = _digit(columns, widths, lowest, first, last, positions)
        digit <<= np.uint64(rank_bits)
        digit |= ranks
        digit.sort()  # unique values: any sort is stable here
        step = (digit & np.uint64((1 << rank_bits) - 1)).astype(np.intp)
        positions = step if positions is None else positions[step]
    return np.arange(n, dtype=np.intp) if positions is None else positions


def _digit(columns: list, widths: list[int], lowest: list[int], first: int, last: int,
           rows: np.ndarray | None) -> np.ndarray:
    """Bits ``[first, last)`` of the whole key of :func:`argsort_words` (of ``rows``, or all), as ``uint64``."""
    n = len(columns[0][0]) if rows is None else len(rows)
    digit = np.zeros(n, np.uint64)
    for (column, low), width, at in zip(columns, widths, lowest):
        if at + width <= first or at >= last:
            continue
        bits = column if rows is None else column[rows]
        bits = bits - np.uint64(low)
        bits = bits >> np.uint64(first - at) if first >= at else bits << np.uint64(at - first)
        digit |= bits
    if last - first < 64:
        digit &= np.uint64((1 << (last - first)) - 1)
    return digit


def _argsort_top(columns: list, widths: list[int], lowest: list[int], n: int, rank_bits: int, room: int
                 ) -> np.ndarray:
    """:func:`argsort_words` of a key of three passes or more: one pass of its top digit, then its ties.

    One pass sorts the rows by the key's top ``room`` bits (stably, as
    every pass does).  Rows whose digits tie keep their input order, which
    is their order wherever their whole keys tie too; only the groups of
    tied digits that hold different keys (neighbours in that order that
    differ somewhere below the digit) are sorted again, by their group and
    the bits below the digit.  Keys whose top bits mostly decide -- strings
    that differ in their first bytes, repeated or not -- take one pass and
    a check in place of three or more passes.
    """
    total = sum(widths)
    first = total - room
    ranks = np.arange(n, dtype=np.uint64)
    digit = _digit(columns, widths, lowest, first, total, None)
    digit <<= np.uint64(rank_bits)
    digit |= ranks
    digit.sort()
    positions = (digit & np.uint64((1 << rank_bits) - 1)).astype(np.intp)
    digit >>= np.uint64(rank_bits)
    tied = digit[1:] == digit[:-1]  # neighbours in the digit's order with equal digits
    del digit
    pairs = np.flatnonzero(tied)
    if not len(pairs):
        return positions
    a, b = positions[pairs], positions[pairs + 1]
    differ = np.zeros(len(pairs), bool)
    for (column, _), width, at in zip(columns, widths, lowest):
        if width and at < first:  # bits at and above the digit are equal in these pairs
            differ |= column[a] != column[b]
    if not differ.any():
        return positions
    # Groups of tied digits, numbered in order; the ones holding different keys are sorted again.
    group = np.concatenate(([0], np.cumsum(~tied)))
    again = np.zeros(group[-1] + 1, bool)
    again[group[pairs[differ]]] = True
    at_rows = np.flatnonzero(again[group])  # places in the digit's order, each group's together
    rows = positions[at_rows]
    rest = [_digit(columns, widths, lowest, lo, min(first, lo + 64), rows) for lo in range(0, first, 64)][::-1]
    step = argsort_words([group[at_rows].astype(np.uint64), *rest])
    positions[at_rows] = rows[step]
    return positions


def _unsigned(column: np.ndarray) -> np.ndarray:
    """Integers as ``uint64`` in the same order: signed ones with the sign bit flipped."""
    if column.dtype.kind not in "uib":
        raise TypeError(f"argsort_words sorts integer columns; got {column.dtype}")
    if column.dtype.kind == "i":
        column = column.astype(np.int64).view(np.uint64) ^ np.uint64(1 << 63)
    return column.astype(np.uint64, copy=False)


def _span(keys: np.ndarray) -> tuple[int, int]:
    return (int(keys.min()), int(keys.max())) if len(keys) else (0, 0)


def take_rows(x: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """``x[positions]``, where the rows of a 2-D ``x`` move as fixed-width blobs.

    NumPy gathers a 2-D array element by element; a row viewed as one
    fixed-width value moves in one copy.

    Examples
    --------
    >>> take_rows(np.arange(6, dtype=np.uint8).reshape(3, 2), np.array([2, 0])).tolist()
    [[4, 5], [0, 1]]
    """
    positions = np.asarray(positions)
    if (type(x) is not np.ndarray or x.ndim != 2 or not x.size or x.dtype.hasobject or not x.dtype.itemsize
            or positions.ndim != 1 or positions.dtype.kind not in "iu"):
        return x[positions]
    rows = np.ascontiguousarray(x)
    blob = np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))
    return rows.view(blob).reshape(len(rows))[positions].view(rows.dtype).reshape(len(positions), rows.shape[1])


def row_bits(rows: int) -> int:
    """Bits a row number of ``rows`` rows takes (at least 1, so the layout always has the column)."""
    return max(1, (int(rows) - 1).bit_length())
