"""Host arrays kept in files under a worker's memory limit: written once, read back through a read-only map.

A worker's exchange (:class:`gpusort.engine.exchange.SortRun`) holds its inputs,
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

import contextlib
import mmap
import os
import tempfile
import threading
from typing import Any, Iterable, Sequence

import numpy as np

from gpusort.memory.hostpool import aligned

#: A worker's exchange starts keeping host arrays in files once those it
#: holds pass this share of the worker's memory limit (``dask.config``
#: ``gpusort.spill-share``); below it they stay in memory.
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
    """Bytes this process has written to files with :func:`to_files` so far (run it on the workers)."""
    with _lock:
        return _written


def to_files(arrays: Sequence[Any], directory: str) -> list:
    """``arrays`` with their host arrays written end to end to one new file in ``directory``, mapped back read-only.

    One file and one map for all of them (a message's slices, a run's keys
    and values): a process may hold only so many maps.  Anything else
    (``None``, a GPU array, an empty array) comes back as it is.

    Examples
    --------
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> keys, none, values = to_files([np.arange(6).reshape(3, 2), None, np.ones(2, ">f4")], folder)
    >>> keys.tolist(), none, values.tolist(), keys.flags.writeable, os.listdir(folder)
    ([[0, 1], [2, 3], [4, 5]], None, [1.0, 1.0], False, [])
    >>> mapping(keys) is mapping(values[1:])
    True
    """
    out = list(arrays)
    held = [i for i, x in enumerate(arrays) if type(x) is np.ndarray and x.nbytes and not x.dtype.hasobject]
    if not held:
        return out
    offsets, size = [], 0
    for i in held:
        offsets.append(size)
        size += aligned(arrays[i].nbytes)  # each array starts at a page of the file
    os.makedirs(directory, exist_ok=True)
    fd, path = tempfile.mkstemp(suffix=".bin", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            for i, at in zip(held, offsets):
                f.seek(at)
                f.write(np.ascontiguousarray(arrays[i]).data)
            f.truncate(size)
        with open(path, "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    finally:
        with contextlib.suppress(FileNotFoundError):  # a run closed meanwhile took its folder
            os.unlink(path)
    global _written
    with _lock:
        _written += sum(arrays[i].nbytes for i in held)
    for i, at in zip(held, offsets):
        x = arrays[i]
        out[i] = np.frombuffer(mapped, x.dtype, count=x.size, offset=at).reshape(x.shape)
    return out


def mapping(x: Any) -> mmap.mmap | None:
    """The map of the file behind ``x`` (an array from :func:`to_files`, or a view of one), else ``None``."""
    while x is not None and not isinstance(x, mmap.mmap):
        x = x.obj if isinstance(x, memoryview) else getattr(x, "base", None)
    return x


def drop_pages(maps: Iterable[mmap.mmap]) -> None:
    """Let go of the pages of ``maps`` that reading them mapped into this process.

    A read maps the pages it touches, and the kernel maps their neighbours
    with them: they count in the worker's memory (its resident set) as long
    as the map lives, although the page cache keeps the data either way.
    Dropping them after each phase keeps a spilling worker's memory at what
    it is working on; a later read maps them again.
    """
    for mapped in maps:
        if not mapped.closed:
            mapped.madvise(mmap.MADV_DONTNEED)
