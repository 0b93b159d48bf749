"""Reference orders, independent of gpusort's own order keys.

Python's ``sorted`` is stable, so sorting positions by ``(is_nan, ±value)``
gives NumPy's order (NaN/NaT last) for both directions without any of the
bit tricks under test.  Complex keys sort by ``(class, ±first part, ±second
part)``: NumPy's order puts ``R + Rj`` first, then ``R + nanj``, ``nan + Rj``
and ``nan + nanj``, each class by its non-NaN parts.  Descending reverses
the order of the parts within each class and keeps the NaN classes last, as
NaN stays last for real keys.  ``lexsort`` is the same with one such key per
array, the last array primary, as ``np.lexsort``.  Bytes and void keys sort by
their bytes, str keys by their code points, structured keys field by field
(a sub-array field by its bytes, as NumPy compares it).

Also the test data (:func:`make_keys`) shared by the tests, and where the GPU tests
keep their keys (:func:`on_gpu`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pytest

KEY_DTYPES = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "datetime64[ns]", "timedelta64[s]",
]
# Keys that sort, argsort, lexsort and sort_by_key take, but topk, unique,
# searchsorted and verify refuse: kept apart from KEY_DTYPES, which those use.
COMPLEX_DTYPES = ["complex64", "complex128"]
ALL_DTYPES = KEY_DTYPES + COMPLEX_DTYPES
#: What CuPy holds: no datetime64 or timedelta64.
CUPY_DTYPES = [d for d in ALL_DTYPES if np.dtype(d).kind not in "mM"]
#: Where the GPU property tests keep their keys (see :func:`on_gpu`).
GPU_PLACES = ["host chunks", "cupy chunks"]


def on_gpu(where: str, dtype) -> dict | None:
    """The keyword arguments that make a test's check sort its keys on the GPU, kept ``where``.

    ``"host chunks"``: NumPy chunks, ``backend="cupy"``.  ``"cupy chunks"``:
    the chunks moved to CuPy (``to_chunks``) and the results back (``to_host``);
    None where CuPy holds no ``dtype`` (datetimes): nothing to check.  Skips
    the test where CuPy is missing.
    """
    cupy = pytest.importorskip("cupy")
    if where == "host chunks":
        return {"backend": "cupy"}
    if np.dtype(dtype).name not in CUPY_DTYPES:
        return None
    return {"to_chunks": lambda a: a.map_blocks(cupy.asarray), "to_host": cupy.asnumpy}


#: The patterns the pipeline tests draw; :func:`make_keys` also makes :data:`SPECIAL_PATTERNS`.
PATTERNS = ["random", "few", "equal", "sorted", "reversed", "extremes", "nan"]
#: Keys all from :func:`special_pool`: every key one of its values, three of them, or one.
SPECIAL_PATTERNS = ["special", "few special", "equal special"]
#: Few distinct small keys with NaN, -0.0 and NaT at known places: ties that a check must see through.
TIES = "ties"

#: NaN bit patterns with payloads and both signs, per float width.
NANS = {2: [0x7E01, 0xFE02], 4: [0x7FC00001, 0xFFC00002], 8: [0x7FF8000000000001, 0xFFF8000000000002]}


def make_keys(rng: np.random.Generator | int, dtype, shape: int | tuple[int, ...], pattern: str) -> np.ndarray:
    """``dtype`` keys in ``shape`` (a length: 1-D) in one of :data:`PATTERNS`, :data:`SPECIAL_PATTERNS`, ``"ties"``.

    ``rng`` is a generator, or a seed for one.

    * ``"random"``: the dtype's whole range for integers, normal around 0 (x1000)
      for floats; complex keys take their real parts from a few integers, so
      that the imaginary part often decides.
    * ``"few"``, ``"equal"``: three of those values, or one.
    * ``"sorted"``, ``"reversed"``: sorted along the last axis (each row), or largest first.
    * ``"extremes"``, ``"nan"``: ``"random"`` with about 30% (``"nan"``: 60%) of the
      keys special: NaN, ``-0.0``, ``0.0``, ``±inf``, the dtype's extremes, NaT.
    * ``"special"``: every key one of :func:`special_pool`'s (NaN with payloads
      and either sign, ``±0.0``, ``±inf``, subnormals, the extremes);
      ``"few special"``, ``"equal special"``: three of them, or one.
    * ``"ties"``: 0 to 49 (``bool``: either), NaN every 7th key and ``-0.0``
      every 11th (floats), NaT every 9th (datetimes and timedeltas).
    """
    rng = np.random.default_rng(rng)
    dt = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    n = int(np.prod(shape))
    if pattern == TIES:
        return _ties(rng, dt, n).reshape(shape)
    if pattern in SPECIAL_PATTERNS:
        values = special_pool(dt)
        if pattern != "special":
            values = values[rng.integers(0, values.size, 3 if pattern == "few special" else 1)]
        return values[rng.integers(0, values.size, n)].reshape(shape)
    if dt.kind == "c":
        return _make_complex(rng, dt, shape, pattern)
    if dt.kind == "b":
        x = rng.integers(0, 2, n).astype(bool)
    elif dt.kind == "f":
        x = rng.standard_normal(n).astype(dt) * 1000
    elif dt.kind in "mM":
        x = rng.integers(-(2**40), 2**40, n).view(dt)
    else:
        info = np.iinfo(dt)
        x = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
    x = _arranged(rng, x.reshape(shape), pattern)
    if pattern in ("extremes", "nan") and n:
        if dt.kind == "f":
            special = [np.nan, -0.0, 0.0, np.inf, -np.inf, np.finfo(dt).max, np.finfo(dt).min]
        elif dt.kind in "mM":
            special = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max, -1, 0]).view(dt)
        elif dt.kind == "b":
            special = [True, False]
        else:
            special = [np.iinfo(dt).min, np.iinfo(dt).max, 0]
        hit = rng.random(shape) < (0.6 if pattern == "nan" else 0.3)
        x[hit] = rng.choice(np.array(special, dtype=dt), int(hit.sum()))
    return x


def _ties(rng: np.random.Generator, dt: np.dtype, n: int) -> np.ndarray:
    if dt.kind in "mM":
        x = rng.integers(-50, 50, n).view(dt)
        x[::9] = np.array("NaT", dtype=dt)
        return x
    x = rng.integers(0, 2 if dt.kind == "b" else 50, n).astype(dt)
    if dt.kind == "f":
        x[::7], x[::11] = np.nan, -0.0
    return x


def special_pool(dtype) -> np.ndarray:
    """Values that sorts get wrong: NaN with payloads and either sign, ±0.0, ±inf, subnormals, extremes."""
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        parts = special_pool(np.dtype(f"f{dtype.itemsize // 2}"))
        grid = np.empty((parts.size, parts.size), dtype)  # set, not computed: inf * 1j is NaN
        grid.real, grid.imag = parts[:, None], parts[None, :]
        return grid.ravel()
    if dtype.kind == "f":
        fi = np.finfo(dtype)
        nans = np.array(NANS[dtype.itemsize], f"u{dtype.itemsize}").view(dtype)
        values = np.array([np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf, fi.max, fi.min,
                           fi.smallest_subnormal, -fi.smallest_subnormal, 1.0, -1.0], dtype)  # fmt: skip
        return np.concatenate([nans, values])
    if dtype.kind == "b":
        return np.array([False, True])
    if dtype.kind in "mM":  # NaT is int64's minimum
        return special_pool(np.int64).view(dtype)
    info = np.iinfo(dtype)
    return np.array([info.min, info.max, 0, 1, info.min + 1, info.max - 1], dtype)


def _arranged(rng: np.random.Generator, x: np.ndarray, pattern: str) -> np.ndarray:
    """``x`` with the ties or runs of ``pattern``: few distinct, all equal, sorted or reversed along the last axis."""
    if pattern == "few" and x.size:
        return rng.choice(x.ravel()[:3], x.shape)
    if pattern == "equal" and x.size:
        return np.full(x.shape, x.flat[0])
    if pattern == "sorted" and x.ndim:
        return np.sort(x, axis=-1)
    if pattern == "reversed" and x.ndim:
        return np.ascontiguousarray(np.sort(x, axis=-1)[..., ::-1])
    return x


def _make_complex(rng: np.random.Generator, dt: np.dtype, shape: tuple[int, ...], pattern: str) -> np.ndarray:
    """Complex keys: real parts from a few integers, so that the imaginary part often decides;
    the special patterns put NaN (either sign), ±0.0, ±inf and extremes in either part or both."""
    part = np.dtype(f"f{dt.itemsize // 2}")
    x = np.empty(shape, dt)
    x.real = rng.integers(-4, 5, shape).astype(part)
    x.imag = (rng.standard_normal(shape) * 1000).astype(part)
    x = _arranged(rng, x, pattern)
    if pattern in ("extremes", "nan") and x.size:
        info = np.finfo(part)
        special = np.array([np.nan, -np.nan, -0.0, 0.0, np.inf, -np.inf, info.max, info.min], part)
        for which in ("real", "imag"):
            hit = rng.random(shape) < (0.5 if pattern == "nan" else 0.25)
            getattr(x, which)[hit] = rng.choice(special, int(hit.sum()))
    return x


def _sort_keys(x: np.ndarray) -> tuple[list, np.ndarray]:
    x = x.astype(x.dtype.newbyteorder("="))  # .view below reads native bytes
    if x.dtype.kind in "mM":
        ints = x.view(np.int64)
        return ints.tolist(), ints == np.iinfo(np.int64).min
    if x.dtype.kind == "f":
        return x.astype(np.float64).tolist(), np.isnan(x)
    return x.astype(object if x.dtype.kind == "u" else np.int64).tolist(), np.zeros(len(x), bool)


def _element_keys(x: np.ndarray, descending: bool) -> list[tuple]:
    """One Python tuple per element; comparing them compares the elements in NumPy's order."""
    x = np.asarray(x)
    sign = -1 if descending else 1
    if x.dtype.names is not None:  # field by field, each by its own rule; a sub-array by its raw bytes
        fields = [_units(x[name], sign) if x.dtype.fields[name][0].shape else _element_keys(x[name], descending)
                  for name in x.dtype.names]
        return list(zip(*fields)) if fields else [()] * len(x)
    if x.dtype.kind in "SUV":  # bytes (unsigned, the padding included) or UCS-4 code points, in order
        return _units(x.astype(x.dtype.newbyteorder("=")).view(np.uint32).reshape(len(x), -1) if x.dtype.kind == "U"
                      else x, sign)
    if x.dtype.kind == "c":
        x = x.astype(x.dtype.newbyteorder("="))
        keys = []
        for re, im in zip(x.real.astype(np.float64).tolist(), x.imag.astype(np.float64).tolist()):
            nan_re, nan_im = re != re, im != im
            cls = 2 * nan_re + nan_im
            first = 0.0 if cls == 3 else (im if nan_re else re)
            second = im if cls == 0 else 0.0
            keys.append((cls, sign * first, sign * second))
        return keys
    values, missing = _sort_keys(x)
    return [(bool(m), 0 if m else sign * v) for v, m in zip(values, missing.tolist())]


def _units(x: np.ndarray, sign: int) -> list[tuple]:
    """Per element of ``x`` (its first axis), its bytes -- or its uint32 code points -- as a tuple, signed."""
    units = np.ascontiguousarray(x).reshape(len(x), -1)
    units = units if units.dtype == np.uint32 else units.view(np.uint8)
    return [tuple(sign * u for u in row) for row in units.tolist()]


def ref_argsort(x: np.ndarray, descending: bool = False) -> np.ndarray:
    """Stable positions that sort 1-D ``x`` in NumPy's order, largest first if asked."""
    key = _element_keys(np.asarray(x), descending)
    return np.array(sorted(range(len(key)), key=key.__getitem__), dtype=np.int64)


def ref_in_order(parts: Sequence[np.ndarray]) -> bool:
    """Whether 1-D ``parts`` end to end never descend in NumPy's order (NaN last, the zeros tied)."""
    keys = [k for part in parts for k in _element_keys(part, False)]
    return all(a <= b for a, b in zip(keys, keys[1:]))


def parts_in_order_or_not(dtype) -> list[list[np.ndarray]]:
    """A task's parts of ``dtype`` keys (empty and one-key parts among them), in order end to end or not.

    Out of order at a part's end, or only inside a part between two keys a
    sample of 1024 reads; for floats, a NaN before numbers.
    """
    x = np.arange(3000).astype(dtype)
    cut = [x[:0], x[:1], x[1:1000], x[1000:1000], x[1000:2999], x[2999:]]
    inside = x.copy()
    inside[1001], inside[1002] = inside[1002], inside[1001]
    cases = [cut, [x[1000:2000], x[:1000], x[2000:]], [inside[:500], inside[500:]], [x[:0]] * 3, [],
             [np.full(700, x[5])] * 4]
    if x.dtype.kind == "f":
        tail = x.copy()
        tail[-10:] = np.nan
        cases += [[tail[:1500], tail[1500:]], [np.append(x[:10], np.nan).astype(dtype), x[10:]]]
    return cases


def ref_lexsort(keys: Sequence[np.ndarray], descending: bool = False) -> np.ndarray:
    """``np.lexsort(keys)`` for 1-D keys (the last one primary, stable), largest first by every key if asked."""
    columns = [_element_keys(np.asarray(k), descending) for k in keys[::-1]]
    n = len(columns[0])
    assert all(len(c) == n for c in columns), "keys of different lengths"
    key = list(zip(*columns)) if n else []
    return np.array(sorted(range(n), key=key.__getitem__), dtype=np.int64)


def _rows(x: np.ndarray, axis: int) -> np.ndarray:
    """``x`` with ``axis`` moved last, as a 2-D array of rows (size-0 shapes included)."""
    moved = np.moveaxis(np.asarray(x), axis, -1)
    return moved.reshape(int(np.prod(moved.shape[:-1], dtype=np.int64)), moved.shape[-1])


def _unrows(rows: np.ndarray, shape: tuple, axis: int) -> np.ndarray:
    moved = list(shape)
    moved.append(moved.pop(axis % len(shape)))
    return np.moveaxis(rows.reshape(moved), -1, axis)


def ref_argsort_along(x: np.ndarray, axis: int | None, descending: bool = False) -> np.ndarray:
    """:func:`ref_argsort` of every 1-D slice along ``axis``, or of ``x`` flattened (None).

    ``np.argsort(x, axis, kind="stable")``.
    """
    x = np.asarray(x)
    if axis is None:
        return ref_argsort(x.ravel(), descending)
    rows = _rows(x, axis)
    out = np.empty(rows.shape, np.int64)
    for i, row in enumerate(rows):
        out[i] = ref_argsort(row, descending)
    return _unrows(out, x.shape, axis)


def ref_lexsort_along(keys: Sequence[np.ndarray], axis: int, descending: bool = False) -> np.ndarray:
    """:func:`ref_lexsort` of every 1-D slice along ``axis``: ``np.lexsort(keys, axis)``."""
    keys = [np.asarray(k) for k in keys]
    rows = [_rows(k, axis) for k in keys]
    out = np.empty(rows[0].shape, np.int64)
    for i in range(out.shape[0]):
        out[i] = ref_lexsort([r[i] for r in rows], descending)
    return _unrows(out, keys[0].shape, axis)


def _bits(a: np.ndarray) -> np.ndarray:
    """The elements' bits as unsigned integers, one more axis of two words for 16-byte complex."""
    a = np.ascontiguousarray(a)
    if a.dtype.itemsize <= 8:
        return a.view(f"u{a.dtype.itemsize}") if a.size else a.view(np.uint8).reshape(a.shape)
    half = a.dtype.itemsize // 2
    return a.view(f"u{half}").reshape(*a.shape, 2)


def _sorted_bits(rows: np.ndarray) -> np.ndarray:
    """Each row's bit patterns, sorted: the multiset of every row, comparable with ``==``."""
    b = _bits(rows)
    if b.ndim == rows.ndim:
        return np.sort(b, axis=-1)
    order = np.lexsort((b[..., 1], b[..., 0]), axis=-1)
    return np.take_along_axis(b, order[..., None], axis=-2)


def assert_same_keys(got: np.ndarray, want: np.ndarray, bits: str = "multiset", axis: int | None = None) -> None:
    """Equal as keys (NaN matches NaN, NaT matches NaT, -0.0 matches 0.0), and in their bits.

    ``bits="exact"``: every element has exactly the bits of ``want``'s (a
    stable sort that returns keys).  ``"multiset"``: the same bit patterns,
    each as often, in any order among equal keys (``np.sort``'s promise: the
    input's elements, moved); with ``axis``, the multiset of every row along it.
    """
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if got.dtype.kind in "mM":
        np.testing.assert_array_equal(got.view(np.int64), want.view(np.int64))
    else:
        np.testing.assert_array_equal(got, want)  # treats NaN == NaN
    if bits == "exact":
        np.testing.assert_array_equal(_bits(got), _bits(want))
    elif axis is None:
        np.testing.assert_array_equal(_sorted_bits(got.ravel()), _sorted_bits(want.ravel()))
    else:
        np.testing.assert_array_equal(_sorted_bits(_rows(got, axis)), _sorted_bits(_rows(want, axis)))


def assert_same_keys_along(got: np.ndarray, want: np.ndarray, axis: int, bits: str = "multiset") -> None:
    """:func:`assert_same_keys` for N-D arrays sorted along ``axis``: the multiset of bits is per row."""
    assert_same_keys(got, want, bits, axis)


def sorts_of(x_dask, values_dask, chunk: int, **options) -> tuple:
    """The four sorts a backend's exactness tests compare (:func:`assert_sorts_exact`), as Dask arrays.

    ``options`` (``backend=``, ...) go to every sort.
    """
    import gpusort

    return (gpusort.sort(x_dask, chunks=chunk, **options), gpusort.argsort(x_dask, **options),
            gpusort.sort_by_key(x_dask, values_dask, descending=True, **options),
            gpusort.sort(x_dask, descending=True, **options))


def keys_and_positions(x: np.ndarray, chunks: tuple[int, ...]) -> tuple:
    """``x`` and its int32 positions as Dask arrays of ``chunks`` (empty and one-element chunks welcome)."""
    import dask.array as da

    return da.from_array(x, chunks=(chunks,)), da.from_array(np.arange(x.size, dtype=np.int32), chunks=(chunks,))


def assert_host_sorts_exact(x: np.ndarray, graphs: tuple) -> None:
    """:func:`sorts_of`'s four sorts of host chunks, computed: NumPy chunks out, exact (:func:`assert_sorts_exact`)."""
    import dask

    s, p, (k, v), sd = dask.compute(*graphs)
    assert all(type(r) is np.ndarray for r in (s, p, k, v, sd)), "host chunks in, host chunks out"
    assert_sorts_exact(x, s, p, k, v, sd)


def assert_sorts_exact(x: np.ndarray, s, p, k, v, sd) -> None:
    """``sort``, ``argsort``, descending ``sort_by_key`` with int32 positions and descending ``sort`` of ``x``.

    Keys are compared as bytes: the output must hold the input's exact bits.
    """
    stable = np.argsort(x, kind="stable")
    np.testing.assert_array_equal(s.view(np.uint8), x[stable].view(np.uint8))
    np.testing.assert_array_equal(p, stable)
    desc = ref_argsort(x, descending=True)
    np.testing.assert_array_equal(v, desc.astype(np.int32))
    np.testing.assert_array_equal(k.view(np.uint8), x[desc].view(np.uint8))
    np.testing.assert_array_equal(sd.view(np.uint8), x[desc].view(np.uint8))
