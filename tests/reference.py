"""Reference orders, independent of gpusort's own order keys.

Python's ``sorted`` is stable, so sorting positions by ``(is_nan, ±value)``
gives NumPy's order (NaN/NaT last) for both directions without any of the
bit tricks under test.  Complex numbers sort by ``(NaN class, ±first part,
±second part)``: NumPy's documented order, real part first, with
``R + nanj``, ``nan + Rj`` and ``nan + nanj`` after every number, in that
order, each class by its non-NaN parts.
"""

from __future__ import annotations

import numpy as np

KEY_DTYPES = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "datetime64[ns]", "timedelta64[s]",
]


def _sort_keys(x: np.ndarray) -> tuple[list, np.ndarray]:
    x = x.astype(x.dtype.newbyteorder("="))  # .view below reads native bytes
    if x.dtype.kind in "mM":
        ints = x.view(np.int64)
        return ints.tolist(), ints == np.iinfo(np.int64).min
    if x.dtype.kind == "f":
        return x.astype(np.float64).tolist(), np.isnan(x)
    return x.astype(object if x.dtype.kind == "u" else np.int64).tolist(), np.zeros(len(x), bool)


def ref_keys(x: np.ndarray, descending: bool = False) -> list[tuple]:
    """One tuple per element of 1-D ``x``; Python orders the tuples as NumPy orders ``x`` (largest first if asked)."""
    x = np.asarray(x)
    sign = -1 if descending else 1
    if x.dtype.kind == "c":
        keys = []
        for z in x.tolist():
            nan_re, nan_im = z.real != z.real, z.imag != z.imag
            first = 0.0 if nan_re and nan_im else z.imag if nan_re else z.real
            second = z.imag if not (nan_re or nan_im) else 0.0
            keys.append((2 * nan_re + nan_im, sign * first, sign * second))
        return keys
    values, missing = _sort_keys(x)
    return [(bool(m), 0 if m else sign * v) for v, m in zip(values, missing.tolist())]


def ref_argsort(x: np.ndarray, descending: bool = False) -> np.ndarray:
    """Stable positions that sort ``x`` in NumPy's order, largest first if asked."""
    key = ref_keys(x, descending)
    return np.array(sorted(range(len(key)), key=key.__getitem__), dtype=np.int64)


def ref_lexsort(keys, descending: bool = False) -> np.ndarray:
    """Stable positions that sort 1-D ``keys`` as ``np.lexsort`` (the last key first), every key largest first if asked."""
    key = list(zip(*(ref_keys(k, descending) for k in keys[::-1])))
    return np.array(sorted(range(len(key)), key=key.__getitem__), dtype=np.int64)


def assert_same_keys(got: np.ndarray, want: np.ndarray, bits: str = "multiset") -> None:
    """Equal as keys (NaN matches NaN, NaT matches NaT, -0.0 matches 0.0), and in their bits.

    ``bits="exact"``: every element has exactly the bits of ``want``'s (a
    stable sort that returns keys).  ``"multiset"``: the same bit patterns,
    each as often, in any order among equal keys (``np.sort``'s promise: the
    input's elements, moved).
    """
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if got.dtype.kind in "mM":
        np.testing.assert_array_equal(got.view(np.int64), want.view(np.int64))
    else:
        np.testing.assert_array_equal(got, want)  # treats NaN == NaN
    width = got.dtype.itemsize // (2 if got.dtype.kind == "c" else 1)  # complex: its two parts' bits
    as_bits = lambda a: np.ascontiguousarray(a).view(f"u{width}") if a.size else a.view(np.uint8)
    if bits == "exact":
        np.testing.assert_array_equal(as_bits(got), as_bits(want))
    else:
        np.testing.assert_array_equal(np.sort(as_bits(got)), np.sort(as_bits(want)))
