"""What works on NumPy and CuPy arrays alike: the array module, host copies, joins and samples.

Array-namespace helpers below every other module: they never import CuPy
unless handed a CuPy array, so ``import gpusort`` works without it.
"""

from __future__ import annotations

from typing import Any, Sequence


def is_cupy(x: Any) -> bool:
    """Whether ``x`` is a CuPy array (checked without importing CuPy)."""
    return type(x).__module__.split(".")[0] == "cupy"


def namespace(x: Any) -> Any:
    """The array module of ``x``: ``cupy`` for CuPy arrays, else ``numpy``."""
    return module(is_cupy(x))


def module(gpu: bool) -> Any:
    """The array module of GPU memory (``cupy``) or of host memory (``numpy``)."""
    if gpu:
        import cupy

        return cupy
    import numpy

    return numpy


def to_numpy(x: Any) -> Any:
    """``x`` in host memory; the splitter math runs there on a few keys."""
    return x.get() if is_cupy(x) else x


def in_memory(x: Any, gpu: bool) -> Any:
    """``x`` in GPU memory (``gpu``) or in host memory, copied only where it is not there yet."""
    return module(True).asarray(x) if gpu else to_numpy(x)


def in_order(a: Any, b: Any) -> bool:
    """Whether order key ``a`` may come before ``b``: not after it, NaN last (host scalars).

    Examples
    --------
    >>> in_order(1.0, 1.0), in_order(float("nan"), 2.0), in_order(2.0, float("nan"))
    (True, False, True)
    """
    if a != a:  # NaN: only NaN may follow it
        return b != b
    return not b < a


def synchronize(x: Any) -> None:
    """Wait until the GPU has written ``x`` (a CuPy array); nothing for host arrays.

    Arrays about to leave the process through comms that do not order
    themselves after the kernels that wrote them must wait for them.  It
    waits for this thread's stream, where gpusort's kernels write (staged
    copies wait for their own streams), never for the whole device: a
    device-wide wait would also wait for an NCCL kernel of another sort
    that spins for a peer, which may be waiting for this very task.
    """
    if is_cupy(x):
        import cupy

        with x.device:
            cupy.cuda.get_current_stream().synchronize()


def concatenate(parts: Sequence[Any], dtype: Any = None) -> Any:
    """``parts`` end to end, in ``dtype`` (default: the first part's, byte order kept).

    CuPy's own concatenation makes the byte order native and compiles a
    kernel per dtype on its first call in a process; contiguous GPU parts
    of the result's dtype are copied by the copy engine instead, which
    compiles nothing and runs at the memory's rate.

    Examples
    --------
    >>> import numpy as np
    >>> concatenate([np.array([1, 2], ">i4"), np.array([3], ">i4")]).dtype
    dtype('>i4')
    """
    if len(parts) == 1:
        return parts[0]
    xp = namespace(parts[0])
    import numpy

    dtype = numpy.dtype(parts[0].dtype if dtype is None else dtype)
    if xp is numpy or not all(p.dtype == dtype and p.flags.c_contiguous and p.shape[1:] == parts[0].shape[1:]
                              for p in parts):
        return xp.concatenate(parts, dtype=dtype)
    return join_into(xp.empty((sum(len(p) for p in parts),) + parts[0].shape[1:], dtype), parts)


def join_into(out: Any, parts: Sequence[Any]) -> Any:
    """``parts`` end to end into ``out``, contiguous arrays of its dtype, by :func:`copy_into`; returns ``out``.

    Examples
    --------
    >>> import numpy as np
    >>> join_into(np.zeros(3, int), [np.array([1]), np.array([2, 3])])
    array([1, 2, 3])
    """
    at = 0
    for p in parts:
        copy_into(out[at:at + len(p)], p)
        at += len(p)
    return out


def joined(parts: Sequence[Any], dtype: Any = None) -> Any:
    """``parts`` end to end, for reading: a view where they lie end to end in one array already, else :func:`concatenate`.

    Chunks that Dask cut from one array in memory (``da.from_array``) are
    views of it, one after the other: their run is a view of it too, and
    nothing is copied.  The result may be the parts' own memory: callers
    that write into it take :func:`concatenate`.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.arange(10)
    >>> joined([x[2:5], x[5:9]]).base is x, joined([x[2:5], x[6:9]]).base is x
    (True, False)
    """
    held = [p for p in parts if len(p)]
    base = held[0].base if len(held) > 1 else None
    # The base must be an array of the parts' kind (a chunk unpickled by distributed has bytes for one).
    if (base is not None and isinstance(base, type(held[0])) and base.ndim == 1 and base.flags.c_contiguous
            and (dtype is None or base.dtype == dtype)
            and all(p.base is base and p.ndim == 1 and p.flags.c_contiguous and p.dtype == base.dtype for p in held)
            and all(_address(q) == _address(p) + p.nbytes for p, q in zip(held, held[1:]))
            and (_address(held[0]) - _address(base)) % base.itemsize == 0):
        start = (_address(held[0]) - _address(base)) // base.itemsize
        return base[start:start + sum(len(p) for p in held)]
    return concatenate(parts, dtype)


def _address(x: Any) -> int:
    return x.data.ptr if is_cupy(x) else x.__array_interface__["data"][0]


def copy_into(dst: Any, src: Any) -> None:
    """``src`` into ``dst``, contiguous arrays of one dtype and shape: by the copy engine on a GPU.

    The copy engine compiles nothing and runs at the memory's rate, where
    CuPy's assignment compiles a copy kernel per dtype on its first use.

    Examples
    --------
    >>> import numpy as np
    >>> out = np.zeros(3, int); copy_into(out[1:], np.array([7, 8])); out
    array([0, 7, 8])
    """
    if not src.nbytes:
        return
    if is_cupy(dst):
        dst.data.copy_from_device_async(src.data, src.nbytes)
    else:
        dst[...] = src


def every(x: Any, step: int, start: int = 0) -> Any:
    """``x[start::step]`` (NumPy or CuPy, 1-D or rows) as a contiguous host array.

    Samples for splitters: a GPU array's are gathered by the copy engine
    (:func:`gpusort.cuda.launch.every`), not by the copy kernel CuPy would
    compile for a strided view on its first use in a process.

    Examples
    --------
    >>> import numpy as np
    >>> every(np.arange(10), 4, 1)
    array([1, 5, 9])
    """
    import numpy

    if not is_cupy(x):
        return numpy.ascontiguousarray(x[start::step])
    import cupy

    from gpusort.cuda import launch

    out = numpy.empty((max(0, -(-(x.shape[0] - start) // step)),) + x.shape[1:], x.dtype)
    with x.device:  # the copy queued after the kernels that wrote x, on their device
        launch.every(x, step, start, out=out)
        cupy.cuda.get_current_stream().synchronize()
    return out
