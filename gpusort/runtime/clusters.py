"""Where gpusort computes: the GPUs seen and the cluster that runs the work.

The one GPU probe (:func:`gpus`, with :func:`cuda_cluster_missing` and
:func:`default_backend`) and the one cluster factory (:func:`cluster`):
Dask's threaded scheduler, a new ``LocalCluster``, a new dask-cuda
``LocalCUDACluster``, one worker process over every GPU, or a running
scheduler to join.  The ``gpusort`` command, the benchmarks, the workflows
and the tests start their clusters here, through the options of
:mod:`gpusort.runtime.options` where a command line says which.

Nothing here imports CuPy, dask-cuda or distributed until it is asked for
something that needs them.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib.util
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

#: The kinds of :func:`cluster`; anything else must be a scheduler address.
KINDS = ("auto", "threads", "local", "cuda", "process")

# Which options each kind takes: the rest are refused, naming the kinds that take them.
_TAKES = {
    "threads": {"threads"},
    "local": {"workers", "threads", "memory_limit", "protocol"},
    "process": {"threads", "memory_limit", "gpus"},
    "cuda": {"workers", "threads", "memory_limit", "protocol", "rmm_pool_size", "device_memory_limit", "gpus"},
    "address": set(),
}

_INSTALL_GPU = "pip install 'gpusort[cuda12]' (or [cuda13])"

#: The RMM pool each worker of a ``"cuda"`` cluster over UCX starts with, as a
#: share of its GPU's memory, unless ``rmm_pool_size`` says otherwise.
UCX_POOL_FRACTION = 0.8
#: In the worker processes of GPU clusters started here, glibc copies this
#: many bytes or more with non-temporal stores (``GLIBC_TUNABLES``, x86; read
#: as a process starts): their large copies are staging copies into pinned
#: slots and out of them, whose target no CPU reads back, so their stores
#: need not pass through the cache.
NON_TEMPORAL_BYTES = 2**20


# --- GPUs -----------------------------------------------------------------------------------


@functools.cache
def gpus() -> tuple[tuple[str, ...], str]:
    """(names of the GPUs CuPy sees, why there are none): the one GPU probe.

    Imports CuPy only when it is installed; never raises.

    Examples
    --------
    >>> names, why = gpus()
    >>> bool(names) or bool(why)
    True
    """
    if importlib.util.find_spec("cupy") is None:
        return (), f"cupy is not installed: {_INSTALL_GPU}"
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
        names = tuple(cupy.cuda.runtime.getDeviceProperties(i)["name"].decode() for i in range(count))
    except Exception as exc:  # a CuPy built for another CUDA, no driver, ...
        return (), f"CuPy finds no CUDA device ({type(exc).__name__}: {exc})"
    return names, "" if names else "CuPy finds no CUDA device"


def cuda_cluster_missing() -> str | None:
    """Why ``cluster("cuda")`` cannot start here (CuPy, dask-cuda or a GPU missing), or ``None``.

    Examples
    --------
    >>> cuda_cluster_missing() is None or "cuda" in cuda_cluster_missing().lower()
    True
    """
    missing = [m.replace("_", "-") for m in ("cupy", "dask_cuda") if importlib.util.find_spec(m) is None]
    if missing:
        return f"{' and '.join(missing)} not installed: {_INSTALL_GPU}"
    names, why = gpus()
    return None if names else why


def default_backend() -> str:
    """``"cupy"`` where CuPy sees a GPU, else ``"numpy"``: the command line's default backend."""
    return "cupy" if gpus()[0] else "numpy"


# --- the cluster ----------------------------------------------------------------------------


def codec_threads() -> int:
    """Threads a GPU worker runs where Zarr's codecs bound the work: a core per thread, at least 4.

    Decoding a source and compressing its sorted copy keep every core busy;
    the 4 threads per GPU that the GPU's own work needs would leave most of
    them idle (benchmarks/NOTES.md, Zarr).

    Examples
    --------
    >>> codec_threads() >= 4
    True
    """
    return max(4, (os.cpu_count() or 4) // max(1, len(gpus()[0])))


@contextlib.contextmanager
def cluster(
    kind: str = "auto",
    *,
    workers: int | None = None,
    threads: int | None = None,
    memory_limit: int | str | None = None,
    protocol: str | None = None,
    rmm_pool_size: int | str | None = None,
    device_memory_limit: int | str | None = None,
    gpus: int | str | Sequence[int] | None = None,
    dashboard: bool = False,
) -> Iterator[Any]:
    """Where to compute: yields a ``distributed.Client`` (``None`` for ``"threads"``), closed on exit.

    Parameters
    ----------
    kind : str
        ``"threads"``: Dask's threaded scheduler in this process.
        ``"local"``: a new ``distributed.LocalCluster`` of worker processes.
        ``"cuda"``: a new dask-cuda ``LocalCUDACluster``, one worker per GPU.
        ``"process"``: one worker process that sees every GPU (of ``gpus``);
        gpusort spreads its out-of-core steps over them and no data moves
        between processes.  ``"auto"``: ``"cuda"`` where CuPy, dask-cuda and a
        GPU are present, else ``"local"``.  Anything else is the address of a
        running scheduler (``tcp://host:8786``) to join.
    workers, threads : int, optional
        Worker processes, and threads per worker (``"threads"``: in all).
        Defaults: Dask's; ``"cuda"`` runs 4 threads per GPU so that copies
        overlap kernels.
    memory_limit : int or str, optional
        Host memory per worker (``0``: no limit).
    protocol : str, optional
        ``"tcp"`` (the default) or ``"ucx"`` (NVLink between GPUs, needs distributed-ucxx).
    rmm_pool_size, device_memory_limit : int or str, optional
        ``"cuda"`` only: an RMM pool per worker that CuPy allocates from too
        (over UCX, :data:`UCX_POOL_FRACTION` of each GPU unless given, where
        rmm is installed), and where dask-cuda starts spilling GPU-resident
        chunks to host.
    gpus : int, str or sequence of int, optional
        Which GPUs: a count (``2``: the first two) or device ids (``"0,3"``).
    dashboard : bool
        Serve Dask's dashboard and print its address on stderr.

    Notes
    -----
    The worker processes of a new cluster never see a terminal's Ctrl-C
    (SIGINT to the process group): only this process does, and a
    ``KeyboardInterrupt`` out of the block closes the cluster without a
    word from the scheduler, the nannies or the workers, so the caller's
    one line says it all.

    A local cluster's scheduler runs in this process: while the block runs,
    the objects this process held as it began are frozen (:func:`gc.freeze`,
    undone on exit; not where the process had frozen objects itself), so
    that the collector's full passes do not stall the scheduler by walking
    them.

    Raises
    ------
    ValueError
        An unknown ``kind``, an option that ``kind`` does not take, or a
        cluster that cannot start here (the message says what to install).
    OSError
        No scheduler answers at the address.

    Examples
    --------
    >>> import dask.array as da
    >>> with cluster("threads") as client:
    ...     client, int(da.arange(10, chunks=5).sum().compute())
    (None, 45)
    >>> with cluster("local", workers=2, threads=1) as client:
    ...     sorted(client.nthreads().values())
    [1, 1]
    """
    options = dict(workers=workers, threads=threads, memory_limit=memory_limit, protocol=protocol,
                   rmm_pool_size=rmm_pool_size, device_memory_limit=device_memory_limit, gpus=gpus)
    resolved = resolve(kind)
    for name, value in options.items():
        if value is not None and name not in _TAKES[resolved]:
            takers = " or ".join(f"kind={k!r}" for k in _TAKES if name in _TAKES[k])
            raise ValueError(f"{name}={value!r} applies only to {takers}, not to kind={kind!r}")
    for name in ("workers", "threads"):
        if options[name] is not None and (isinstance(options[name], bool) or not isinstance(options[name], int)
                                          or options[name] < 1):
            raise ValueError(f"{name}={options[name]!r}: give a whole number of at least 1")
    if resolved == "threads":
        with dask_config(scheduler="threads", **({"num_workers": threads} if threads else {})):
            yield None
        return
    from distributed import Client

    if resolved == "address":
        try:
            client = Client(kind, timeout="10s")
        except OSError as exc:
            raise OSError(f"kind={kind!r}: no Dask scheduler answers there ({exc})") from exc
        with client:
            yield _ready(client, dashboard)
        return
    # The scheduler of a new cluster runs in this process, and logs each exchange's start and end.
    with _muted(*_SHUFFLE_ROUTINE):
        with _deaf_to_ctrl_c() as arrived:
            started = _start(resolved, options, dashboard)
        client, interrupted = None, False
        try:
            if arrived:  # Ctrl-C while the cluster started: raised here, where the cluster is closed
                raise KeyboardInterrupt
            client = Client(started)
            client.wait_for_workers(len(started.workers))
            if resolved == "cuda":
                from gpusort.warmup import WarmKernels, wait_for_kernels, warm_links

                client.register_plugin(WarmKernels())
                warm_links(client)
                wait_for_kernels(client)
            with _heap_frozen():
                yield _ready(client, dashboard)
            # Tens of GiB of pinned memory to unmap would outlast the nanny's patience at close.
            client.run(_free_pinned_memory)
            # The work is done: what a worker says as the scheduler goes away first is not news.
            client.run(_mute, *_CLOSING, on_error="ignore")
        except KeyboardInterrupt:
            # The caller reports the Ctrl-C in one line.  What the scheduler, the nannies and
            # the workers log as they close over the tasks it cut short (cancelled
            # instructions, lost connections, a worker killed for taking too long) says nothing more.
            interrupted = True
            if client is not None:
                client.run(logging.disable, logging.CRITICAL, on_error="ignore")  # for good: they close
            raise
        finally:
            with _logging_off() if interrupted else contextlib.nullcontext():
                if client is not None:
                    client.close()
                try:
                    started.close(timeout=60)
                except Exception as exc:  # a nanny that had to kill its slow-exiting worker: the work is done
                    if not interrupted:
                        print(f"(cluster close: {type(exc).__name__}: {exc})", file=sys.stderr)


@contextlib.contextmanager
def _heap_frozen() -> Iterator[None]:
    """This process's objects so far kept out of the garbage collector's full passes, for the block.

    A local cluster's scheduler runs in this process, beside all it has
    imported: a full collection walks every object, and the scheduler waits
    meanwhile, every few sorts.  What turns into cyclic garbage while frozen
    is collected after the block.  A process that froze objects itself (a
    server about to fork) keeps its own arrangement: nothing is done.
    """
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def dask_config(**settings: Any) -> contextlib.AbstractContextManager:
    """``dask.config.set(**settings)``, imported when used."""
    import dask

    return dask.config.set(**settings)


def resolve(kind: str) -> str:
    """What :func:`cluster` makes of ``kind``: ``"auto"`` decided, an address ``"address"``.

    Raises a ValueError that lists the choices where ``kind`` is neither.

    Examples
    --------
    >>> resolve("threads"), resolve("tcp://10.0.0.1:8786")
    ('threads', 'address')
    """
    if kind == "auto":
        return "local" if cuda_cluster_missing() else "cuda"
    if kind in KINDS:
        return kind
    if isinstance(kind, str) and re.fullmatch(r"\w+://\S+|[\w.-]+:\d+", kind):
        return "address"
    raise ValueError(f"kind={kind!r} is not known; choose one of {', '.join(KINDS)}, "
                     "or a scheduler address such as tcp://host:8786")


def _start(kind: str, options: dict[str, Any], dashboard: bool) -> Any:
    """A new cluster of ``kind`` ("local", "process" or "cuda") with ``options``."""
    # Without a dashboard the scheduler still serves HTTP, at 8787 unless told: ":0"
    # picks a free port, so clusters side by side do not warn of a clash.
    kw: dict[str, Any] = {"dashboard_address": ":8787" if dashboard else ":0"}
    for name, keyword in (("workers", "n_workers"), ("threads", "threads_per_worker"),
                          ("memory_limit", "memory_limit"), ("protocol", "protocol")):
        if options[name] is not None:
            kw[keyword] = options[name]
    # NVLink multicast in NCCL hangs on shared machines; workers inherit this environment.
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    devices = visible_devices(options["gpus"])
    if kind in ("local", "process"):
        from distributed import LocalCluster

        if kind == "local":
            return LocalCluster(processes=True, **kw)
        kw["n_workers"] = 1
        if devices is not None:
            kw["env"] = {"CUDA_VISIBLE_DEVICES": devices}
        with _gpu_worker_environ():
            return LocalCluster(processes=True, **kw)
    why = cuda_cluster_missing()
    if why:
        raise ValueError(f"kind='cuda' cannot start here: {why}; or use kind='local'")
    pool = options["rmm_pool_size"]
    if pool is None and options["protocol"] == "ucx" and importlib.util.find_spec("rmm") is not None:
        # UCX maps every buffer it moves between two processes over NVLink, at
        # a cost of up to milliseconds a GiB, once per allocation: in a pool
        # it maps once.  The pool grows past this when a sort needs more.
        pool = UCX_POOL_FRACTION
    if pool is not None:
        if importlib.util.find_spec("rmm") is None:
            raise ValueError("rmm_pool_size needs rmm: pip install rmm-cu12 (or rmm-cu13)")
        kw.update(rmm_pool_size=pool, rmm_allocator_external_lib_list=["cupy"])
    if options["device_memory_limit"] is not None:
        kw["device_memory_limit"] = options["device_memory_limit"]
    if devices is not None:
        kw["CUDA_VISIBLE_DEVICES"] = devices
    kw.setdefault("threads_per_worker", 4)
    # Imported as each worker starts, not inside the first sort's tasks.
    kw["pre_import"] = ["gpusort.backends.cupy", "gpusort.engine.exchange"]
    from dask_cuda import LocalCUDACluster

    with _gpu_worker_environ():
        return LocalCUDACluster(**kw)


def _gpu_worker_environ() -> contextlib.AbstractContextManager:
    """Dask's config, while GPU workers start, with :data:`NON_TEMPORAL_BYTES` in their environment.

    ``distributed.nanny.pre-spawn-environ`` is set in the environment before a
    worker process starts, where glibc reads it.  Tunables the user set, in
    this environment or in that config, are left as they are.
    """
    import dask

    if "GLIBC_TUNABLES" in os.environ or "GLIBC_TUNABLES" in dask.config.get("distributed.nanny.pre-spawn-environ", {}):
        return contextlib.nullcontext()
    tunable = f"glibc.cpu.x86_non_temporal_threshold={NON_TEMPORAL_BYTES:#x}"
    return dask.config.set({"distributed.nanny.pre-spawn-environ.GLIBC_TUNABLES": tunable})


@contextlib.contextmanager
def _deaf_to_ctrl_c() -> Iterator[list[int]]:
    """Start worker processes that never see SIGINT (Ctrl-C); yields the list of those that came meanwhile.

    A terminal's Ctrl-C signals its whole process group, worker processes
    included: each would die printing its own traceback while this process
    cancels the work and closes the cluster anyway.  Ignoring SIGINT in each
    worker (a preload or a plugin) leaves a window while it starts, and one
    that arrives then still kills it noisily.  A blocked signal stays blocked
    in the threads a thread starts and across ``fork`` and ``exec``, and every
    worker process of a new cluster, a nanny's restarts included, is spawned
    by a thread that the cluster's event-loop thread starts.  So SIGINT is
    blocked in this thread while the cluster starts: the loop thread, its
    helpers and every worker keep it blocked for good, and no window is left.
    A Ctrl-C in the meantime is recorded (the caller raises it once it can
    close the cluster), where this thread's handler is Python's default.
    """
    arrived: list[int] = []
    if not hasattr(signal, "pthread_sigmask"):  # Windows: no process groups, no signal masks
        yield arrived
        return
    from multiprocessing import resource_tracker

    # Starting multiprocessing's resource tracker unblocks SIGINT in the thread that
    # starts it: the first cluster's loop thread would, unless it is running already.
    resource_tracker.ensure_running()
    record = (threading.current_thread() is threading.main_thread()
              and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    handler = signal.signal(signal.SIGINT, lambda signum, frame: arrived.append(signum)) if record else None
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield arrived
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # one pending is recorded now
        if record:
            signal.signal(signal.SIGINT, handler)


class _Routine(logging.Filter):
    """Drops the records of the given messages (format strings): what distributed logs on a routine path."""

    def __init__(self, *messages: str):
        super().__init__()
        self.messages = frozenset(messages)

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg not in self.messages


#: What P2P's scheduler plugin logs as a WARNING for every exchange that starts and ends, so
#: for every sort on a cluster.  Its other warnings (an exchange restarted: a worker lost) still show.
_SHUFFLE_ROUTINE = ("distributed.shuffle._scheduler_plugin",
                    _Routine("Shuffle %s initialized by task %r executed on worker %s",
                             "Shuffle %s deactivated due to stimulus '%s'"))
#: What a worker logs, with a traceback, when its heartbeat meets the scheduler closing
#: before the worker is told to close.
_CLOSING = ("distributed.worker",
            _Routine("Failed to communicate with scheduler during heartbeat.",
                     "Scheduler was unaware of this worker; shutting down."))


def _mute(logger: str, routine: _Routine) -> None:
    """``routine``'s records of ``logger`` dropped in this process from now on."""
    logging.getLogger(logger).addFilter(routine)


@contextlib.contextmanager
def _muted(logger: str, routine: _Routine) -> Iterator[None]:
    """``routine``'s records of ``logger`` dropped in this process within the block (nested blocks too)."""
    log = logging.getLogger(logger)
    if routine in log.filters:
        yield
        return
    log.addFilter(routine)
    try:
        yield
    finally:
        log.removeFilter(routine)


@contextlib.contextmanager
def _logging_off() -> Iterator[None]:
    """No log records at all within the block (``logging.disable``), as before after it."""
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(previous)


def _ready(client: Any, dashboard: bool) -> Any:
    # The scheduler records its task stream from the first request on: ask
    # now, so that task_costs sees the first run too.
    client.get_task_stream(count=0)
    if dashboard:
        print(f"dask dashboard: {client.dashboard_link}", file=sys.stderr)
    return client


def _free_pinned_memory() -> None:
    """Free CuPy's pinned host pool, on a worker that imported CuPy (others have none)."""
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        cupy.get_default_pinned_memory_pool().free_all_blocks()


def visible_devices(gpus: int | str | Sequence[int] | None) -> str | None:
    """``gpus`` as ``CUDA_VISIBLE_DEVICES``: a count means the first ones, a list those.

    Examples
    --------
    >>> visible_devices(2), visible_devices("0,3"), visible_devices([1]), visible_devices(None)
    ('0,1', '0,3', '1', None)
    """
    if gpus is None:
        return None
    if isinstance(gpus, str) and "," not in gpus:
        gpus = int(gpus)
    if isinstance(gpus, int):
        return ",".join(map(str, range(gpus)))
    return gpus if isinstance(gpus, str) else ",".join(map(str, gpus))
