"""Selection: the ``k`` largest or smallest keys of a Dask array, without sorting it.

A tree reduction (Dask's ``da.reduction``): every chunk keeps its ``|k|``
extreme elements by one linear-time partition of its *order keys*
(:mod:`gpusort.order`, scheme ``"exact"``), neighbours' survivors are
partitioned again, and the last ``|k|`` are sorted.  Work is O(N) plus a sort
of ``|k|`` elements per tree node; nothing moves but survivors.  Order keys
make the partition an integer one and NaN the largest key, as NumPy's order
has it, so the result is exact, in the input's bits.  CuPy chunks are
partitioned on their GPU (``cupy.argpartition``).
"""

from __future__ import annotations

import functools
from typing import Any

import dask.array as da

from gpusort import order
from gpusort.backends import namespace


def extremes(block: Any, k: int, axis: Any = None, keepdims: bool = True) -> Any:
    """The ``k`` largest elements of ``block`` (``k < 0``: the ``-k`` smallest), in no order.

    Chunk and combine step of :func:`gpusort.topk`'s reduction.
    """
    if abs(k) >= len(block):
        return block
    okeys = order.encode(block, False, "exact")
    xp = namespace(block)
    picked = xp.argpartition(okeys, -k)[-k:] if k > 0 else xp.argpartition(okeys, -k - 1)[:-k]
    return block[picked]


def ranked(block: Any, k: int, dtype: Any = None, axis: Any = None, keepdims: bool = True) -> Any:
    """:func:`extremes`, sorted: largest first for ``k > 0``, smallest first for ``k < 0``.

    The aggregate step of :func:`gpusort.topk`'s reduction; ``dtype`` is the
    one to return (Dask's concatenation of the survivors makes byte order
    native).

    Examples
    --------
    >>> import numpy as np
    >>> ranked(np.array([1.0, np.nan, 3.0, -0.0, 2.0]), 2), ranked(np.array([4, 1, 3]), -2)
    (array([nan,  3.]), array([1, 3]))
    """
    block = extremes(block, k)
    xp = namespace(block)
    okeys = xp.sort(order.encode(block, False, "exact"))
    values = order.decode(okeys, block.dtype if dtype is None else dtype, False, "exact")
    return values[::-1] if k > 0 else values


def topk(x: da.Array, k: int, split_every: int | None) -> da.Array:
    """The reduction graph of :func:`gpusort.topk` over the 1-D keys ``x``."""
    return da.reduction(
        x, chunk=functools.partial(extremes, k=k), combine=functools.partial(extremes, k=k),
        aggregate=functools.partial(ranked, k=k, dtype=x.dtype), axis=0, keepdims=True, dtype=x.dtype,
        split_every=split_every, output_size=abs(k), concatenate=True, meta=x._meta, name="topk",
    )
