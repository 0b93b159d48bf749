"""Host arrays kept in files under a worker's memory limit: written once, read back through a read-only map.

A worker's exchange (:class:`gpusort.exchange.SortRun`) holds its inputs,
its runs and the slices other workers send it outside the memory Dask
manages: Dask can neither count nor spill them, and where they pass the
worker's memory limit Dask pauses the worker (which then never finishes
the tasks that would free them) or its nanny kills it.  Past a share of
the limit, the exchange keeps those arrays in files instead.  The page
cache holds what fits and the disk the rest; what a phase read of a mapped
file is let go of after it (:func:`drop_pages`).

Each file is unlinked as soon as it is mapped: the map keeps the data while
the array lives, and a job that stops, however it stops, leaves no file.
"""

from __future__ import annotations

import mmap
import os
import tempfile
import threading
from typing import Any, Iterable

import numpy as np

#: A worker's exchange starts keeping host arrays in files once those it
#: holds pass this share of the worker's memory limit (``dask.config``
#: ``gpusort.spill-share``); below it nothing changes.
SHARE = 0.25

_lock = threading.Lock()
_written = 0


def share_setting() -> float:
    """``dask.config`` ``gpusort.spill-share``: the share of a worker's memory limit past which arrays go to files."""
    import dask

    value = dask.config.get("gpusort.spill-share", SHARE)
    try:
        share = float(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"dask config gpusort.spill-share={value!r} is not a number; write e.g. 0.25") from exc
    if not 0 <= share <= 1:
        raise ValueError(f"dask config gpusort.spill-share={value!r} is a share of the memory limit: 0 to 1")
    return share


def written() -> int:
    """Bytes this process has written to files with :func:`to_file` so far (run it on the workers)."""
    with _lock:
        return _written


def to_file(x: Any, directory: str) -> Any:
    """``x`` (a host array) written to a new file in ``directory`` and mapped back read-only.

    Anything else (``None``, a GPU array, an empty array) comes back as it is.

    Examples
    --------
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> x = to_file(np.arange(6).reshape(3, 2), folder)
    >>> x.tolist(), x.flags.writeable, os.listdir(folder)
    ([[0, 1], [2, 3], [4, 5]], False, [])
    """
    if type(x) is not np.ndarray or x.nbytes == 0 or x.dtype.hasobject:
        return x
    os.makedirs(directory, exist_ok=True)
    fd, path = tempfile.mkstemp(suffix=".bin", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            np.ascontiguousarray(x).tofile(f)
        with open(path, "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    finally:
        os.unlink(path)
    global _written
    with _lock:
        _written += x.nbytes
    return np.frombuffer(mapped, x.dtype).reshape(x.shape)


def drop_pages(arrays: Iterable[Any]) -> None:
    """Let go of the pages of the files behind ``arrays`` that reading them mapped into this process.

    A read maps the pages it touches, and the kernel maps their neighbours
    with them: they count in the worker's memory (its resident set) as long
    as the map lives, although the page cache keeps the data either way.
    Dropping them after each phase keeps a spilling worker's memory at what
    it is working on; a later read maps them again.  Arrays not from
    :func:`to_file` are left alone.
    """
    for x in arrays:
        mapped = x
        while mapped is not None and not isinstance(mapped, mmap.mmap):
            mapped = mapped.obj if isinstance(mapped, memoryview) else getattr(mapped, "base", None)
        if mapped is not None and not mapped.closed:
            mapped.madvise(mmap.MADV_DONTNEED)
