"""Where and how gpusort runs: the GPUs seen, the cluster, the machine, and what a run cost.

Everything that starts or measures a computation around the library -- the
``gpusort`` command, the benchmarks, the workflows and the tests -- goes
through this module, so there is one GPU probe (:func:`gpus`), one cluster
factory (:func:`cluster`, with its command-line options :func:`add_options`),
one record of the machine (:func:`environment`, :func:`write_json`), one
reading of time by phase (:func:`task_costs`, keyed by
:data:`gpusort.graph.PHASES`), one count of the bytes moved between workers
(:func:`bytes_moved`) and one policy for progress bars (:func:`progress`).

Nothing here imports CuPy, dask-cuda or distributed until it is asked for
something that needs them.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.metadata
import importlib.util
import io
import json
import logging
import os
import platform
import re
import secrets
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

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

# Modules whose versions `gpusort info` prints and every result file records.
VERSIONED = ("gpusort", "numpy", "dask", "distributed", "zarr", "cupy", "dask_cuda", "rmm",
             "pandas", "pyarrow", "torch")

_INSTALL_GPU = "pip install 'gpusort[cuda12]' (or [cuda13])"

#: The RMM pool each worker of a ``"cuda"`` cluster over UCX starts with, as a
#: share of its GPU's memory, unless ``rmm_pool_size`` says otherwise.
UCX_POOL_FRACTION = 0.8


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
    with _deaf_to_ctrl_c() as arrived:
        started = _start(resolved, options, dashboard)
    client, interrupted = None, False
    try:
        if arrived:  # Ctrl-C while the cluster started: raised here, where the cluster is closed
            raise KeyboardInterrupt
        client = Client(started)
        client.wait_for_workers(len(started.workers))
        if resolved == "cuda":
            from gpusort.warmup import WarmKernels, warm_links

            client.register_plugin(WarmKernels())
            warm_links(client)
        yield _ready(client, dashboard)
        # Tens of GiB of pinned memory to unmap would outlast the nanny's patience at close.
        client.run(_free_pinned_memory)
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

        if kind == "process":
            kw["n_workers"] = 1
            if devices is not None:
                kw["env"] = {"CUDA_VISIBLE_DEVICES": devices}
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
    kw["pre_import"] = ["gpusort.backends.cupy", "gpusort.exchange"]
    from dask_cuda import LocalCUDACluster

    return LocalCUDACluster(**kw)


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


# --- command-line options -------------------------------------------------------------------


def count(text: str) -> int:
    """A positive whole number as people write element counts: ``1048576``, ``1e9`` or ``2**20``.

    An ``argparse`` type.

    Examples
    --------
    >>> count("2**20"), count("1e9"), count("33554432")
    (1048576, 1000000000, 33554432)
    """
    try:
        base, _, power = text.partition("**")
        value = int(base) ** int(power) if power else float(text)
        if value != int(value):
            raise ValueError
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (e.g. 1048576, 1e9 or 2**20)") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be at least 1")
    return int(value)


def size(text: str, *, zero: bool = False) -> int:
    """A number of bytes as people write it: ``8GiB``, ``512MB``, ``1000000000``; ``zero``: 0 allowed.

    An ``argparse`` type.

    Examples
    --------
    >>> size("2GiB"), size("0", zero=True)
    (2147483648, 0)
    """
    from dask.utils import parse_bytes

    try:
        value = parse_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size; write e.g. 8GiB, 512MB or 1000000000") from exc
    if value < 0 or (value == 0 and not zero):
        raise argparse.ArgumentTypeError(f"{text!r}: the size must be positive")
    return value


def add_options(parser: argparse.ArgumentParser, *, gpu: bool = False) -> None:
    """Add the options of :func:`cluster` to ``parser``: ``--cluster``, ``--workers``, ``--threads``,
    ``--memory-limit``, and with ``gpu`` also ``--gpus``, ``--protocol``, ``--rmm-pool-size`` and
    ``--device-memory-limit``.  :func:`from_options` starts what they say.
    Make ``parser`` with ``allow_abbrev=False``, as every parser of gpusort's
    is: else argparse silently takes ``--worker 2`` for ``--workers 2``.

    Examples
    --------
    >>> p = argparse.ArgumentParser(allow_abbrev=False)
    >>> add_options(p)
    >>> vars(p.parse_args(["--cluster", "local", "--workers", "2"]))
    {'cluster': 'local', 'workers': 2, 'threads': None, 'memory_limit': None}
    """
    group = parser.add_argument_group("where to compute")
    group.add_argument(
        "--cluster", default="auto", metavar="auto|local|cuda|process|threads|ADDRESS",
        help="a new LocalCluster (local), a new LocalCUDACluster, one worker per GPU (cuda), one worker "
             "process over every GPU (process), Dask's threaded scheduler in this process (threads), or a "
             "running scheduler's address (tcp://host:8786); auto: cuda where CuPy, dask-cuda and a GPU "
             "are present, else local (default: %(default)s)")
    group.add_argument("--workers", type=count, metavar="N",
                       help="worker processes of a new cluster (default: Dask's; cuda: one per GPU)")
    group.add_argument("--threads", type=count, metavar="N",
                       help="threads per worker, or in all with --cluster threads (default: Dask's; cuda: 4)")
    group.add_argument("--memory-limit", type=functools.partial(size, zero=True), metavar="SIZE",
                       help="host memory per worker of a new cluster, e.g. 16GiB; 0: no limit "
                            "(default: Dask's, the machine's memory shared by the workers)")
    if gpu:
        group.add_argument("--gpus", metavar="N|IDS", help="GPUs to use: a count (2) or device ids (0,3) (default: all)")
        group.add_argument("--protocol", choices=("tcp", "ucx"),
                           help="transport between workers; ucx needs distributed-ucxx (default: tcp)")
        group.add_argument("--rmm-pool-size", type=size, metavar="SIZE",
                           help="cuda: an RMM pool per worker, which CuPy allocates from too (needs rmm)")
        group.add_argument("--device-memory-limit", type=size, metavar="SIZE",
                           help="cuda: spill GPU-resident chunks to host above this per worker "
                                "(default: dask-cuda's)")


@contextlib.contextmanager
def from_options(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None,
                 **overrides: Any) -> Iterator[Any]:
    """:func:`cluster` as the options of :func:`add_options` in ``args`` say, ``overrides`` winning.

    With ``parser``, a cluster that cannot start (the ValueError of
    :func:`cluster`) exits the program with status 2 and the reason in one
    line, naming flags (:func:`flags`).
    """
    names = set().union(*_TAKES.values())  # every option some cluster kind takes
    options = {name: getattr(args, name) for name in names if hasattr(args, name)} | overrides
    with contextlib.ExitStack() as stack:
        try:
            client = stack.enter_context(cluster(options.pop("kind", args.cluster), **options))
        except ValueError as exc:
            if parser is None:
                raise
            parser.exit(2, f"{parser.prog}: error: {flags(str(exc))}\n")
        yield client


# Python arguments, as the library's messages name them, and the flags that set them.
_FLAGS = {"kind": "--cluster", "backend": "--backend", "chunks": "--chunks", "descending": "--descending",
          "overwrite": "--overwrite", "argsort_dst": "--argsort-dst", "gpu_memory_budget": "--gpu-memory-budget",
          "temp_dir": "--temp-dir", "workers": "--workers", "threads": "--threads",
          "memory_limit": "--memory-limit", "gpus": "--gpus", "protocol": "--protocol",
          "rmm_pool_size": "--rmm-pool-size", "device_memory_limit": "--device-memory-limit"}


def flags(message: str) -> str:
    """``message`` with the Python arguments it names (``backend='cupy'``) spelt as flags (``--backend cupy``).

    The library's messages name its arguments; printed by a command line
    (``gpusort``, a workflow, a benchmark) they should name its flags.

    Examples
    --------
    >>> flags("gpu_memory_budget applies to backend='cupy' only")
    '--gpu-memory-budget applies to --backend cupy only'
    >>> flags("dst: /d/out.zarr exists; pass overwrite=True (gpusort sort --overwrite) to replace it")
    'dst: /d/out.zarr exists; pass --overwrite to replace it'
    >>> flags("dst: /data/argsort_dst.zarr exists; temp_dir/keys and temp_dir are paths, then an argument")
    'dst: /data/argsort_dst.zarr exists; temp_dir/keys and --temp-dir are paths, then an argument'
    """
    def flag(match: re.Match) -> str:
        name, value = match["name"] or match["bare"], (match["value"] or "").strip("'\"")
        return _FLAGS[name] + ("" if value in ("", "True") else f" {value}")

    # A name alone is an argument only where no English word is spelt so: with an underscore.
    bare = "|".join(name for name in _FLAGS if "_" in name)
    # Never inside a path: /data/argsort_dst.zarr stays a file name.
    text = re.sub(rf"(?<![\w./-])(?:(?P<name>{'|'.join(_FLAGS)})=(?P<value>'[^']*'|\"[^\"]*\"|[^\s,;:)]+)"
                  rf"|(?P<bare>{bare}))(?![\w/-]|\.\w)", flag, message)
    # The library's own hint at the flag is now said already.
    return re.sub(r" \(gpusort \w+ (--[\w-]+)\)", lambda m: "" if text.count(m[1]) > 1 else m[0], text)


# --- the machine and result files ---------------------------------------------------------------


def environment() -> dict[str, Any]:
    """Versions and machine facts, as ``gpusort info`` prints and every result file records.

    Examples
    --------
    >>> env = environment()
    >>> sorted(env), env["versions"]["numpy"] is not None
    (['machine', 'versions'], True)
    """
    import dask.system
    import distributed.system

    names, why = gpus()
    machine = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": dask.system.CPU_COUNT,
        "cpu": _cpu_model(),
        "memory_bytes": distributed.system.MEMORY_LIMIT,
        "gpus": list(names),
    }
    if not names:
        machine["gpus_missing"] = why
    return {"versions": {m: version(m) for m in VERSIONED}, "machine": machine}


def version(module: str) -> str | None:
    """The installed version of ``module`` (``None``: not installed), without importing it where possible."""
    if importlib.util.find_spec(module) is None:
        return None
    dists = _distributions().get(module)
    if dists:
        return importlib.metadata.version(dists[0])
    # Not installed as a distribution, e.g. gpusort run from its source checkout.
    return getattr(__import__(module), "__version__", "unknown")


@functools.cache
def _distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def write_json(folder: Path, name: str, document: dict) -> Path:
    """Write ``document``, with when and where it ran, to a new ``folder/NAME-YYYYmmdd-HHMMSS-XXXXXX.json``.

    The file is opened exclusively, so nothing is ever overwritten; values
    JSON does not know (paths, NumPy scalars) are written as text.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = write_json(Path(folder), "demo", {"benchmark": "demo", "out": Path("x")})
    ...     doc = json.loads(path.read_text())
    >>> path.name.startswith("demo-"), doc["out"], sorted(doc)
    (True, 'x', ['benchmark', 'created', 'machine', 'out', 'versions'])
    """
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC)
    document = {**document, "created": now.isoformat(timespec="seconds"), **environment()}
    while True:  # a name clash (same second, same random suffix) just draws again
        path = folder / f"{name}-{now:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}.json"
        try:
            with path.open("x") as f:
                json.dump(document, f, indent=1, default=str)
                f.write("\n")
            return path
        except FileExistsError:
            continue


# --- what a run cost ------------------------------------------------------------------------


def phase_of(key: Any) -> str:
    """The phase (a key of :data:`gpusort.graph.PHASES`) of the task ``key``; its name prefix if none.

    Examples
    --------
    >>> from gpusort.graph import PHASES
    >>> prefix = PHASES["runs"][0]
    >>> phase_of((f"{prefix}-0123abcd", 4)), phase_of("nonesuch-0123abcd")
    ('runs', 'nonesuch')
    """
    from dask.utils import key_split

    from gpusort.graph import PHASES

    # Fused tasks are named after their whole chain (merge-sorted-...): the first name counts.
    prefix = key_split(key).split("-")[0]
    return next((phase for phase, prefixes in PHASES.items() if prefix in prefixes), prefix)


def task_costs(client: Any, start: float) -> dict[str, dict[str, float]]:
    """Per phase, the tasks run on ``client`` since ``start`` (a ``time.time()``).

    Each phase of :data:`gpusort.graph.PHASES` (in its order), and the name
    prefix of any other task, maps to ``{"tasks": count, "seconds": compute
    seconds summed over its tasks, "bytes": their output bytes}``.  Clients
    from :func:`cluster` record the task stream from the start.  The
    seconds of an exchange's phases, which run inside P2P's barrier task
    (``shuffle``), come from the workers (:func:`gpusort.exchange.phase_seconds`).
    """
    from gpusort.graph import PHASES

    from gpusort.exchange import phase_seconds as exchange_seconds

    costs: dict[str, dict[str, float]] = {phase: {"tasks": 0, "seconds": 0.0, "bytes": 0} for phase in PHASES}
    for task in client.get_task_stream(start=start):
        entry = costs.setdefault(phase_of(task["key"]), {"tasks": 0, "seconds": 0.0, "bytes": 0})
        entry["tasks"] += 1
        entry["seconds"] += sum(s["stop"] - s["start"] for s in task["startstops"] if s["action"] == "compute")
        entry["bytes"] += task.get("nbytes", 0)
    # An exchange runs its phases inside P2P's barrier task: each worker timed them.
    for worker_seconds in client.run(exchange_seconds, start).values():
        for phase, seconds in worker_seconds.items():
            costs[phase]["seconds"] += seconds
    return {phase: entry for phase, entry in costs.items() if entry["tasks"] or entry["seconds"]}


def phase_seconds(client: Any, start: float) -> dict[str, float]:
    """Compute seconds per phase since ``start``: :func:`task_costs`' seconds alone."""
    return {phase: entry["seconds"] for phase, entry in task_costs(client, start).items()}


@contextlib.contextmanager
def phase_timer(client: Any) -> Iterator[dict[str, float]]:
    """Compute seconds per phase of what runs inside the block, filled in when it ends.

    From ``client``'s task stream (:func:`phase_seconds`), or, with no client
    (Dask's threaded or synchronous scheduler), from Dask's local
    ``Profiler``; phases of :data:`gpusort.graph.PHASES` first, in order.

    Examples
    --------
    >>> import dask.array as da
    >>> with phase_timer(None) as phases:
    ...     _ = (da.ones(10, chunks=5) + 1).sum().compute()
    >>> all(seconds >= 0 for seconds in phases.values()), len(phases) > 0
    (True, True)
    """
    from gpusort.graph import PHASES

    seconds: dict[str, float] = {}
    if client is not None:
        start = time.time()
        yield seconds
        seconds.update(phase_seconds(client, start))
        return
    from dask.diagnostics import Profiler

    with Profiler() as profiler:
        yield seconds
    found: dict[str, float] = {}
    for task in profiler.results:
        phase = phase_of(task.key)
        found[phase] = found.get(phase, 0.0) + task.end_time - task.start_time
    seconds.update({p: found.pop(p) for p in PHASES if p in found} | found)


def disk_speed(folder: Path, nbytes: int = 2**30) -> dict[str, float]:
    """Sequential write and read bytes per second of the disk under ``folder``, measured now.

    Writes ``nbytes`` of random (incompressible) data in 64 MiB blocks and
    ``fsync``s it, asks the kernel to drop the file from its page cache
    (``posix_fadvise(DONTNEED)``), reads it back, and deletes it.  Where the
    cache cannot be dropped the read figure is the cache's, and says so
    (``"read_from_cache": True``).

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     speed = disk_speed(Path(folder), 2**22)
    >>> speed["write_bytes_per_second"] > 0 and speed["read_bytes_per_second"] > 0
    True
    """
    import numpy as np

    block = np.random.default_rng(0).integers(0, 256, min(nbytes, 64 * 2**20), dtype=np.uint8).tobytes()
    path = Path(folder) / f".gpusort-disk-speed-{secrets.token_hex(4)}"
    written = 0
    try:
        start = time.perf_counter()
        with path.open("wb") as f:
            while written < nbytes:
                written += f.write(block[: nbytes - written])
            f.flush()
            os.fsync(f.fileno())
        write = written / (time.perf_counter() - start)
        dropped = hasattr(os, "posix_fadvise")
        if dropped:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        start = time.perf_counter()
        with path.open("rb", buffering=0) as f:
            while f.read(len(block)):
                pass
        read = written / (time.perf_counter() - start)
    finally:
        path.unlink(missing_ok=True)
    return {"bytes": written, "write_bytes_per_second": write, "read_bytes_per_second": read,
            "read_from_cache": not dropped}


def bytes_moved(client: Any) -> int:
    """Bytes the workers of ``client`` have moved between one another so far.

    Dask's own transfers (task results a worker fetched) and the slabs of
    gpusort's exchanges, which travel as P2P messages outside Dask's log.
    """

    def moved(dask_worker: Any) -> int:
        from gpusort.exchange import sent

        return int(sum(t.get("total", 0) for t in dask_worker.transfer_incoming_log)) + sent()["bytes"]

    return sum(client.run(moved).values())


# --- progress -------------------------------------------------------------------------------


@contextlib.contextmanager
def progress(every: float = 30.0) -> Iterator[TextIO]:
    """Progress bars drawn on stderr suit where it goes: redrawn in place on a terminal, and
    in a file one line every ``every`` seconds (plus each bar's last state).

    Within the block ``sys.stderr`` is, off a terminal, a stream that turns a
    bar's redraws (``\\r``) into such lines; anything else passes through.
    Yields the stream in use.

    Examples
    --------
    >>> import contextlib, io
    >>> log = io.StringIO()
    >>> with contextlib.redirect_stderr(log), progress():
    ...     for i in range(101):
    ...         print(f"\\r[{i:3}%]", end="", file=sys.stderr)
    ...     print(file=sys.stderr)
    >>> log.getvalue()
    '[  0%]\\n[100%]\\n'
    """
    if getattr(sys.stderr, "isatty", lambda: False)():
        yield sys.stderr
        return
    lines = _Lines(sys.stderr, every)
    try:
        with contextlib.redirect_stderr(lines):
            yield lines
    finally:
        lines.finish()


class _Lines(io.TextIOBase):
    """A text stream over ``stream`` that writes a redrawn line at most every ``every`` seconds."""

    # distributed's text bar ends by clearing its line: the bar's last state is final.
    _CLEAR_LINE, _ESCAPE = "\x1b[2K", re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

    def __init__(self, stream: TextIO, every: float, clock: Callable[[], float] = time.monotonic):
        self.stream, self.every, self.clock = stream, every, clock
        self.line = ""  # text since the last \r or \n
        self.pending = ""  # the latest redraw not written
        self.shown: float | None = None  # when a redraw was last written
        self.lock = threading.Lock()  # bars draw from their own threads

    def write(self, text: str) -> int:
        with self.lock:
            plain = self._ESCAPE.sub("", text.replace(self._CLEAR_LINE, "\n"))
            for piece in re.split(r"([\r\n])", plain):
                if piece == "\n":
                    self._end_line()
                elif piece == "\r":
                    self._redrawn()
                else:
                    self.line += piece
        return len(text)

    def _redrawn(self) -> None:
        if self.line:
            self.pending, self.line = self.line, ""
            now = self.clock()
            if self.shown is None or now - self.shown >= self.every:
                self.stream.write(self.pending + "\n")
                self.pending, self.shown = "", now

    def _end_line(self) -> None:
        self.stream.write((self.line or self.pending) + "\n")
        self.line = self.pending = ""

    def finish(self) -> None:
        """Write the last redraw, if it is not written yet."""
        with self.lock:
            if self.line or self.pending:
                self._end_line()
        self.flush()

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False
