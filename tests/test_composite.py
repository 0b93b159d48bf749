"""Composite order keys: packing is lossless and orders like the tuples it packs."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gpusort.keys import composite, order


def _tuples_order(columns):
    """Stable positions that sort the rows of ``columns`` (most significant first), by Python tuples."""
    rows = list(zip(*[c.tolist() for c in columns]))
    return np.array(sorted(range(len(rows)), key=rows.__getitem__), dtype=np.int64)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 64), min_size=1, max_size=5), st.integers(0, 2**32), st.integers(0, 60))
def test_pack_orders_like_tuples_and_unpacks_every_column(widths, seed, n):
    rng = np.random.default_rng(seed)
    # Few distinct values per column, extremes included: ties in early columns are what later ones decide.
    columns = [rng.choice(np.array([0, 1, (1 << w) - 1, (1 << w) >> 1, rng.integers(0, 1 << w, dtype=np.uint64)],
                                   dtype=np.uint64), n)
               for w in widths]
    layout = composite.Layout(tuple(widths))
    okeys = layout.pack(columns)
    assert okeys.shape == ((n,) if layout.words == 1 else (n, layout.words))
    assert okeys.dtype == layout.dtype
    np.testing.assert_array_equal(composite.argsort_rows(okeys), _tuples_order(columns))
    for i, column in enumerate(columns):
        np.testing.assert_array_equal(layout.unpack(okeys, i).astype(np.uint64), column)


@pytest.mark.parametrize("widths, dtype, words", [((1,), "u1", 1), ((3, 8), "u2", 1), ((14, 32), "u8", 1),
                                                  ((1, 64), "u8", 2), ((2, 64, 64), "u8", 3)])
def test_layout_takes_the_narrowest_integer(widths, dtype, words):
    layout = composite.Layout(widths)
    assert layout.dtype == np.dtype(dtype) and layout.words == words


@pytest.mark.parametrize("widths", [(), (0,), (65,), (8, -1)])
def test_bad_widths_are_refused(widths):
    with pytest.raises(ValueError, match="column widths"):
        composite.Layout(widths)


@pytest.mark.parametrize("dtype", ["int8", "int64", "uint16", "float16", "float64", "bool", "datetime64[ns]"])
@pytest.mark.parametrize("descending", [False, True])
def test_key_columns_are_unsigned_and_decode_back(dtype, descending):
    rng = np.random.default_rng(3)
    x = rng.integers(-100, 100, 500).astype(dtype) if dtype != "datetime64[ns]" else \
        rng.integers(-(2**40), 2**40, 500).view(dtype)
    columns, widths = order.key_columns(x, descending, "exact")
    (column,), (width,) = columns, widths
    assert column.dtype.kind == "u" and int(column.max()) < 2**width
    back = order.decode_column(column.astype(np.uint64), x.dtype, descending)
    np.testing.assert_array_equal(back.view(f"u{x.dtype.itemsize}"), x.view(f"u{x.dtype.itemsize}"))


@pytest.mark.parametrize("words", [1, 2, 3])
def test_argsort_rows_of_sorted_runs_is_lexsorts_order(words):
    """Merging runs by byte strings gives lexsort's stable order: ties, zero bytes at the ends, extremes."""
    rng = np.random.default_rng(words)
    palette = np.array([0, 1, 2**8, 2**56, 2**63, 2**64 - 1, 0x0100000000000000], np.uint64)
    runs = []
    for length in (0, 1, 500, 77, 500):
        rows = palette[rng.integers(0, len(palette), (length, words))]
        runs.append(rows[np.lexsort(rows.T[::-1])])
    rows = np.concatenate(runs)
    np.testing.assert_array_equal(composite.argsort_rows(rows, runs=True), np.lexsort(rows.T[::-1]))


def test_numpy_backend_merges_composite_keys_without_values():
    """Runs of 2-D keys alone merge row by row, not word by word."""
    from gpusort.backends.numpy import BACKEND

    runs = [np.array([[0, 9], [1, 2]], np.uint64), np.array([[0, 3], [1, 5]], np.uint64)]
    keys, values = BACKEND.merge_runs([(r, None) for r in runs])
    rows = np.concatenate(runs)
    np.testing.assert_array_equal(keys, rows[np.lexsort(rows.T[::-1])])
    assert values is None



@pytest.mark.parametrize("span", [0, 1, 2**16 - 1, 2**16, 2**64 - 1])
def test_argsort_rows_word_by_word_is_lexsorts_order(span):
    """Each word's pass: constant words skipped, spans up to 2^16 by radix, wider ones compared; ties stable."""
    rng = np.random.default_rng(span % 1000)
    n = 3000
    base = np.uint64(2**63 - 5)  # offsets from a high base: a narrow span far from zero
    narrow = base + rng.integers(0, min(span, 2**63) + 1, n, dtype=np.uint64) if span < 2**64 - 1 \
        else rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    for words in ([narrow], [narrow, narrow[::-1].copy()], [np.full(n, base), narrow, np.full(n, 7, np.uint64)]):
        rows = np.stack(words, axis=1)
        rows[rng.integers(0, n, 50)] = rows[0]  # equal rows: their input order must stay
        np.testing.assert_array_equal(composite.argsort_rows(rows), np.lexsort(rows.T[::-1]))
    assert composite.argsort_rows(np.zeros((0, 2), np.uint64)).tolist() == []


def test_argsort_rows_of_other_kinds_is_lexsorts_order():
    for rows in (np.array([[0, 0.5], [0, 0.1], [np.nan, 0.0]]), np.array([[True, False], [False, True]]),
                 np.array([[1, 2], [1, 1]], "datetime64[D]")):
        np.testing.assert_array_equal(composite.argsort_rows(rows), np.lexsort(rows.T[::-1]))


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint64", "int16", "uint8"])
def test_argsort_column_narrows_near_the_extremes(dtype):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(0)
    for low in (info.min, info.max - 9, 0 if info.min < 0 else info.min):
        keys = (np.asarray(low, dtype) + rng.integers(0, 10, 500).astype(dtype)).astype(dtype)
        np.testing.assert_array_equal(composite.argsort_column(keys), np.argsort(keys, kind="stable"))


@pytest.mark.parametrize("dtype", ["int64", "uint64", "int32", "uint32"])
def test_argsort_column_is_the_stable_argsort(dtype):
    """Value-sort passes over the full range, few distinct keys, sorted, reversed, constant, empty, one key."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(1)
    full = rng.integers(info.min, info.max, 5000, dtype=dtype, endpoint=True)
    full[:2] = info.min, info.max
    for keys in (full, full[rng.integers(0, 40, 5000)], np.sort(full), np.sort(full)[::-1],
                 np.full(7, info.min, dtype), full[:0], full[:1]):
        np.testing.assert_array_equal(composite.argsort_column(keys), np.argsort(keys, kind="stable"))


def test_argsort_column_of_keys_sorted_but_for_two_neighbours():
    """Keys whose every 4th ascends but two others do not: stable order, however sorted they look."""
    keys = np.arange(5000, dtype=np.int64)
    keys[[1, 2]] = keys[[2, 1]]
    assert np.all(np.diff(keys[::4]) > 0)  # the sample of 5000 keys takes every 4th
    np.testing.assert_array_equal(composite.argsort_column(keys), np.argsort(keys, kind="stable"))


def test_argsort_words_spans_passes_across_columns():
    """Columns of several kinds and widths whose bits need several passes: lexsort's stable order."""
    rng = np.random.default_rng(2)
    n = 3000
    columns = [rng.integers(-3, 3, n).astype(np.int8), rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True),
               rng.integers(-(2**31), 2**31, n).astype(np.int32), np.full(n, 5, np.uint16),
               rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64, endpoint=True)]
    for q in (1, 4):
        columns[q][rng.integers(0, n, 300)] = columns[q][0]  # ties within a column: the next ones decide
    np.testing.assert_array_equal(composite.argsort_words(columns), np.lexsort(columns[::-1]))
    assert composite.argsort_words([]).tolist() == []


def test_argsort_words_by_the_top_digit_then_its_ties():
    """Keys of three passes and more: one pass of the top bits, then the groups tied there that differ below."""
    rng = np.random.default_rng(48)
    n = 5000
    few = rng.integers(0, 2**64 - 1, 4, dtype=np.uint64, endpoint=True)
    cases = [
        [few[rng.integers(0, 4, n)], few[rng.integers(0, 3, n)], rng.integers(0, 2**64 - 1, n, dtype=np.uint64)],
        [few[rng.integers(0, 2, n)], few[rng.integers(0, 2, n)], few[rng.integers(0, 2, n)], few[rng.integers(0, 2, n)]],
        [rng.integers(0, 2**62, n, dtype=np.uint64), rng.integers(0, 2**64 - 1, n, dtype=np.uint64), rng.integers(0, 9, n)],
        [rng.integers(0, 2**63, n, dtype=np.uint64) | np.uint64(1), np.full(n, 7, np.uint64), few[rng.integers(0, 2, n)]],
    ]
    for columns in cases:
        rows = rng.integers(0, n // 4, n)  # repeated rows: ties of whole keys keep their input order
        columns = [c[rows] for c in columns]
        np.testing.assert_array_equal(composite.argsort_words(columns), np.lexsort(columns[::-1]))
        np.testing.assert_array_equal(composite.argsort_words([c[:1] for c in columns]), [0])


@pytest.mark.parametrize("x", [np.arange(24, dtype=np.uint8).reshape(6, 4),
                               np.arange(12, dtype=">u4").reshape(6, 2)[::2],
                               np.arange(10, dtype=np.float64).reshape(5, 2)[:, :1],
                               np.zeros((0, 3), np.uint64), np.zeros((4, 0), np.uint8), np.arange(5),
                               np.array([[1, "a"], [2, None]], object), np.zeros((3, 2), "V0")])
def test_take_rows_is_fancy_indexing(x):
    for positions in (np.arange(len(x))[::-1], np.arange(len(x)).reshape(-1, 1), -1 - np.arange(len(x), dtype=np.int8),
                      np.arange(len(x)) % 2 == 0):
        got, want = composite.take_rows(x, positions), x[positions]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
