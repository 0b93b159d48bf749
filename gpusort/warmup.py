"""Kernels loaded as a GPU worker starts, so that its first sort does not wait for them.

A process loads a kernel module set the first time a call needs it: read
from CuPy's on-disk cache and loaded onto the GPU, tens of milliseconds a
set (compiled first, seconds, where the cache lacks it: ``gpusort
compile``).  A worker's first sort would pay that on its critical path.
:class:`WarmKernels`, a distributed worker plugin, loads the sets that most
sorts use in a background thread as each worker starts; a sort that needs a
set still loading waits for it rather than loading it again
(:func:`gpusort.cuda.build.kernels`).  That thread holds the interpreter
for about half a second (mostly :func:`map_modules`, below), and a sort
that starts beside it runs at a fraction of its speed, so
:func:`gpusort.runtime.cluster` registers it on the GPU clusters it starts
and returns once every worker has finished (:func:`wait_for_kernels`); on
another cluster, ``client.register_plugin(WarmKernels())``, then
``wait_for_kernels(client)``.

Distributed runs a P2P output task first wherever the scheduler places it
and, where that is not the worker that holds its chunk, raises
``Reschedule``; the worker pickles that exception's traceback, and the first
such pickle in a process maps every imported module to its file
(:func:`inspect.getmodule`): most of a second in a GPU worker, whose
imports number thousands, on the first sort's critical path.  The plugin's
thread maps them once the kernels are loaded (:func:`map_modules`).

A GPU worker's heap holds millions of objects from its imports, and a full
garbage collection walks them all, stalling the worker for longer than a
sort's phases take, every few sorts.  Once its kernels are loaded and its
modules mapped, the plugin moves them out of the collector's way
(:func:`gc.freeze`): full collections walk only what came since.

Between GPU workers the first exchange also opens their links: UCX
endpoints, and each worker maps the memory pool its peers send from (once
per pool allocation, seconds for a large pool).  :func:`warm_links` sends a
buffer between every pair of workers as the cluster starts, so a first
sort meets open links.
"""

from __future__ import annotations

import gc
import inspect
import logging
import threading
from typing import Any, Sequence

import numpy as np
from distributed import WorkerPlugin

#: ``(key dtype, value dtype or None)`` of the sorts whose kernels are loaded:
#: keys-only sorts of the common dtypes; 64-bit keys with 8-byte values, and
#: the order keys of an argsort, which carry int64 positions.
COMMON: tuple[tuple[str, str | None], ...] = (("int64", None), ("float64", None), ("int32", None),
                                              ("float32", None), ("int64", "int64"), ("uint64", "int64"))

logger = logging.getLogger(__name__)


def warm(sorts: Sequence[tuple[str, str | None]] = COMMON) -> None:
    """Load the kernels of ascending sorts of ``sorts`` on the current GPU, each once per process.

    A few keys of each are sorted: a sort loads the whole set of kernels
    its dtypes need, whatever its length, and the same set serves every
    later sort of those dtypes, short or long.

    Examples
    --------
    >>> warm([("int64", None)])  # doctest: +SKIP
    """
    import cupy

    from gpusort import gpu

    for key, value in sorts:
        keys = cupy.asarray(np.arange(4096, 0, -1).astype(key))
        if value is None:
            gpu.sort(keys)
        else:
            gpu.sort_pairs(keys, cupy.asarray(np.arange(4096).astype(value)))


def map_modules() -> None:
    """Map the file of every module imported so far to its module, as :func:`inspect.getmodule` caches it.

    A lookup of a file not yet mapped maps the modules not yet mapped, so
    a later call, and the lookups after it, only map modules imported since.

    Examples
    --------
    >>> map_modules()
    """
    inspect.getmodule(compile("", "<gpusort: map modules>", "exec"))


class WarmKernels(WorkerPlugin):
    """A worker plugin: :func:`warm`, :func:`map_modules`, then :func:`gc.freeze`, in a thread as each worker starts.

    Parameters
    ----------
    sorts : sequence of (dtype, dtype or None)
        The sorts whose kernels to load, as :data:`COMMON`.

    Examples
    --------
    >>> client.register_plugin(WarmKernels())  # doctest: +SKIP
    """

    name = "gpusort-warm-kernels"

    def __init__(self, sorts: Sequence[tuple[str, str | None]] = COMMON):
        self.sorts = tuple(sorts)

    def setup(self, worker: Any) -> None:
        #: Set once the kernels are loaded, or failed to (``error``): on the worker's copy of the plugin.
        self.done = threading.Event()
        self.error: Exception | None = None
        threading.Thread(target=self._run, name="gpusort-warm-kernels", daemon=True).start()

    def _run(self) -> None:
        try:
            warm(self.sorts)
        except Exception as exc:  # the sort that needs the set meets the same error, and raises it
            self.error = exc
            logger.warning("gpusort: loading kernels as the worker started failed: %s", exc)
        try:
            map_modules()
            gc.freeze()
        finally:
            self.done.set()


def wait_for_kernels(client: Any, timeout: float = 120.0) -> None:
    """Return once :class:`WarmKernels` has finished on every worker of ``client`` that has it.

    Workers without the plugin return at once; one still loading after
    ``timeout`` seconds is left to finish on its own.

    Examples
    --------
    >>> client.register_plugin(WarmKernels()); wait_for_kernels(client)  # doctest: +SKIP
    """
    client.run(_kernels_loaded, timeout)


def _kernels_loaded(timeout: float, dask_worker: Any) -> bool:
    plugin = dask_worker.plugins.get(WarmKernels.name)
    return plugin is None or plugin.done.wait(timeout)


def warm_links(client: Any, nbytes: int = 16 * 2**20) -> None:
    """``nbytes`` of GPU memory sent between every ordered pair of ``client``'s workers, then dropped.

    Opens the links between GPU workers before the first sort: the
    connections that the exchange's messages reuse, and each worker's
    mapping of its peers' memory pool.  The buffers are made and received
    on the workers; this process touches no GPU.  Nothing to do for one
    worker.

    Examples
    --------
    >>> warm_links(client)  # doctest: +SKIP
    """
    workers = list(client.scheduler_info(n_workers=-1)["workers"])
    pairs = [(a, b) for a in workers for b in workers if a != b]
    sent = [client.submit(_gpu_buffer, nbytes, workers=[a], pure=False) for a, _ in pairs]
    received = [client.submit(len, buffer, workers=[b], pure=False) for buffer, (_, b) in zip(sent, pairs)]
    client.gather(received)
    del sent, received


def _gpu_buffer(nbytes: int) -> Any:
    import cupy

    return cupy.zeros(nbytes, np.uint8)
