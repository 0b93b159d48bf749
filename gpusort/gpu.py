"""Sorting and merging CuPy arrays on one GPU with gpusort's own mergesort kernels.

Every function takes 1-D CuPy arrays, returns new CuPy arrays and never
modifies its inputs.  Results follow NumPy: ascending order is ``np.sort``'s
(NaN last, ``-0.0`` tied with ``0.0``), sorts and merges are stable, and
descending order is the reverse of ascending except that NaN stays last and
ties still keep their input order.

Keys may be bool, int8-64, uint8-64 or float16/32/64.  Values may be of any
dtype: values of 1, 2, 4 or 8 bytes move with their keys through the
kernels; wider ones are gathered afterwards through the keys' positions.

>>> import cupy, gpusort.gpu
>>> gpusort.gpu.sort(cupy.array([3.0, float("nan"), -1.0, 2.0]))
array([-1.,  2.,  3., nan])
"""

from __future__ import annotations

from typing import Sequence, Union

import numpy as np

from gpusort import kernels

try:
    import cupy
except ImportError as exc:  # pragma: no cover - depends on the machine
    raise ImportError(
        "gpusort.gpu needs CuPy and a CUDA GPU: pip install 'gpusort[cuda13]' "
        "(or [cuda12]); the NumPy backend needs neither"
    ) from exc

Run = Union["cupy.ndarray", tuple["cupy.ndarray", "cupy.ndarray"]]

_SUPPORTED = "bool, int8-64, uint8-64 and float16/32/64"


def sort(keys: cupy.ndarray, *, descending: bool = False) -> cupy.ndarray:
    """A sorted copy of ``keys``.

    Parameters
    ----------
    keys : cupy.ndarray
        1-D array of bool, int8-64, uint8-64 or float16/32/64.
    descending : bool
        Largest first; NaN stays last.

    Returns
    -------
    cupy.ndarray
        The keys in order, same dtype.

    Examples
    --------
    >>> gpusort.gpu.sort(cupy.array([2, 7, 1]), descending=True)
    array([7, 2, 1])
    """
    k = _keys(keys, "keys")
    return kernels.mergesort(k, descending=descending)[0].view(keys.dtype)


def argsort(keys: cupy.ndarray, *, descending: bool = False) -> cupy.ndarray:
    """The int64 positions that sort ``keys``, stable: ties keep their input order.

    Equals ``np.argsort(keys, kind="stable")`` when ascending.

    Examples
    --------
    >>> gpusort.gpu.argsort(cupy.array([3, 1, 3, 0]))
    array([3, 1, 0, 2])
    """
    _, positions = kernels.mergesort(_keys(keys, "keys"), descending=descending, positions=True)
    return positions.view(np.int64) if positions.itemsize == 8 else positions.astype(np.int64)


def sort_pairs(
    keys: cupy.ndarray, values: cupy.ndarray, *, descending: bool = False
) -> tuple[cupy.ndarray, cupy.ndarray]:
    """``keys`` sorted, and ``values`` permuted with them (stable).

    Parameters
    ----------
    keys : cupy.ndarray
        1-D keys, as for :func:`sort`.
    values : cupy.ndarray
        1-D, same length, any dtype.
    descending : bool
        Largest key first; NaN stays last.

    Examples
    --------
    >>> k, v = gpusort.gpu.sort_pairs(cupy.array([2, 1, 2]), cupy.array([10.0, 20.0, 30.0]))
    >>> k, v
    (array([1, 2, 2]), array([20., 10., 30.]))
    """
    k = _keys(keys, "keys")
    v = _values(values, "values", keys.size, "keys")
    if v.dtype.itemsize in kernels.VALUE_DTYPES:
        out_keys, out_values = kernels.mergesort(k, _bits(v), descending=descending)
        return out_keys.view(keys.dtype), out_values.view(v.dtype)
    out_keys, positions = kernels.mergesort(k, descending=descending, positions=True)
    return out_keys.view(keys.dtype), v[positions]


def merge(a: cupy.ndarray, b: cupy.ndarray, *, descending: bool = False) -> cupy.ndarray:
    """Merge two sorted arrays into one, stably: on ties ``a``'s elements come first.

    ``a`` and ``b`` must be sorted in the order asked for (NaN last) and share
    a dtype.  Takes time linear in ``a.size + b.size``.

    Examples
    --------
    >>> gpusort.gpu.merge(cupy.array([1, 4, 9]), cupy.array([2, 4]))
    array([1, 2, 4, 4, 9])
    """
    ka, kb = _keys(a, "a"), _keys(b, "b")
    _same_dtype(a, b, "a", "b")
    return kernels.merge(ka, None, kb, None, descending=descending)[0].view(a.dtype)


def merge_runs(runs: Sequence[Run], *, descending: bool = False):
    """Merge k sorted runs into one, stably: ties keep run order, then position.

    Parameters
    ----------
    runs : sequence of cupy.ndarray, or of (keys, values) pairs
        Each run sorted in the order asked for (NaN last).  Either every run
        is a keys array, or every run is a ``(keys, values)`` pair; keys share
        one dtype, values another.  Empty runs are allowed and skipped.
    descending : bool
        The runs are sorted largest first (NaN still last).

    Returns
    -------
    cupy.ndarray or (cupy.ndarray, cupy.ndarray)
        The merged keys, or merged ``(keys, values)`` when pairs came in.

    Notes
    -----
    A balanced tree of pairwise merge-path merges of neighbouring runs:
    ceil(log2 k) passes over the data, O(n log k) work, never a re-sort.

    Examples
    --------
    >>> gpusort.gpu.merge_runs([cupy.array([1, 5]), cupy.array([], int), cupy.array([2, 3])])
    array([1, 2, 3, 5])
    """
    if not len(runs):
        raise ValueError("runs is empty: pass at least one (possibly empty) run")
    pairs = isinstance(runs[0], tuple)
    checked = []
    for i, run in enumerate(runs):
        if isinstance(run, tuple) != pairs:
            raise TypeError(
                f"runs[{i}] is {'not ' if pairs else ''}a (keys, values) pair but runs[0] "
                f"is{'' if pairs else ' not'}: pass all runs as keys or all as pairs"
            )
        keys, values = run if pairs else (run, None)
        k = _keys(keys, f"runs[{i}] keys" if pairs else f"runs[{i}]")
        v = None if values is None else _values(values, f"runs[{i}] values", keys.size, "its keys")
        checked.append((keys, k, v))
    for i, (keys, _, v) in enumerate(checked[1:], start=1):
        _same_dtype(checked[0][0], keys, "runs[0]", f"runs[{i}]")
        if pairs and v.dtype != checked[0][2].dtype:
            raise TypeError(
                f"runs[{i}] values have dtype {v.dtype}, runs[0] values {checked[0][2].dtype}: "
                "all values must share a dtype"
            )
    dtype = checked[0][0].dtype
    keys_runs = [k for _, k, _ in checked]
    values_runs = [v for _, _, v in checked] if pairs else None
    out_keys, out_values = _merge_tree(keys_runs, values_runs, descending)
    out_keys = out_keys.view(dtype)
    return (out_keys, out_values) if pairs else out_keys


def _merge_tree(keys_runs, values_runs, descending):
    """:func:`gpusort.kernels.merge_tree` of the runs, in new memory.

    Values of a width the kernels move travel with their keys as unsigned
    bits; wider ones are replaced by their positions in the runs'
    concatenation and gathered once at the end.
    """
    gather = None
    if values_runs is not None and values_runs[0].dtype.itemsize not in kernels.VALUE_DTYPES:
        gather = cupy.concatenate(values_runs)
        starts = np.cumsum([0] + [k.size for k in keys_runs])
        values_runs = [cupy.arange(s, s + k.size, dtype=np.int64) for s, k in zip(starts, keys_runs)]
    values_dtype = None if values_runs is None else values_runs[0].dtype
    runs = [(k, None if values_runs is None else _bits(values_runs[i])) for i, k in enumerate(keys_runs)]
    keys, values = kernels.merge_tree(runs, descending=descending)  # new memory, never the caller's
    if values is None:
        return keys, None
    values = values.view(values_dtype)
    return keys, values if gather is None else gather[values]


def _keys(x, name: str) -> cupy.ndarray:
    """``x`` as contiguous keys of a kernel key type, or a TypeError/ValueError saying the fix."""
    if not isinstance(x, cupy.ndarray):
        kind = f"{type(x).__module__}.{type(x).__qualname__}"
        raise TypeError(
            f"{name} must be a cupy.ndarray, not {kind}: move it to the GPU first "
            f"(cupy.asarray({name.split()[0]}))"
        )
    if x.ndim != 1:
        raise ValueError(f"{name} must be 1-D, not of shape {x.shape}: sort {name.split()[0]}.ravel()")
    dtype = np.dtype(np.uint8) if x.dtype == np.bool_ else x.dtype
    if dtype not in kernels.KEY_TYPES:
        raise TypeError(
            f"{name} has dtype {x.dtype}, which gpusort.gpu cannot sort; key dtypes are "
            f"{_SUPPORTED} (convert first, e.g. {name.split()[0]}.astype('float64'))"
        )
    return cupy.ascontiguousarray(x).view(dtype)


def _values(x, name: str, size: int, keys_name: str) -> cupy.ndarray:
    if not isinstance(x, cupy.ndarray):
        kind = f"{type(x).__module__}.{type(x).__qualname__}"
        raise TypeError(f"{name} must be a cupy.ndarray, not {kind}: move it to the GPU first")
    if x.ndim != 1:
        raise ValueError(f"{name} must be 1-D, not of shape {x.shape}")
    if x.size != size:
        raise ValueError(
            f"{name} has {x.size} elements but {keys_name} has {size}: pass one value per key"
        )
    return cupy.ascontiguousarray(x)


def _same_dtype(a, b, a_name: str, b_name: str) -> None:
    if a.dtype != b.dtype:
        raise TypeError(
            f"{a_name} has dtype {a.dtype} but {b_name} has {b.dtype}: merge arrays of one "
            f"dtype (e.g. {b_name}.astype({a_name}.dtype))"
        )


def _bits(values: cupy.ndarray) -> cupy.ndarray:
    """Values as the unsigned integers of their width: the kernels only move them."""
    return values.view(kernels.VALUE_DTYPES[values.dtype.itemsize])
