"""What a run cost and where it ran: the machine, time by phase, the disk, bytes moved, progress.

One record of the machine (:func:`environment`, :func:`write_json`), one
reading of time by phase (:func:`task_costs`, keyed by
:data:`gpusort.engine.graph.PHASES`), one measure of the disk (:func:`disk_speed`),
one count of the bytes moved between workers (:func:`bytes_moved`) and one
policy for progress bars (:func:`progress`), for the ``gpusort`` command,
the benchmarks, the workflows and the tests alike.

Nothing here imports CuPy, dask-cuda or distributed until it is asked for
something that needs them.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.util
import io
import json
import os
import platform
import re
import secrets
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from gpusort.runtime.clusters import gpus

# Modules whose versions `gpusort info` prints and every result file records.
VERSIONED = ("gpusort", "numpy", "dask", "distributed", "zarr", "cupy", "dask_cuda", "rmm",
             "pandas", "pyarrow", "torch")


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
    """The phase (a key of :data:`gpusort.engine.graph.PHASES`) of the task ``key``; its name prefix if none.

    Examples
    --------
    >>> from gpusort.engine.graph import PHASES
    >>> prefix = PHASES["runs"][0]
    >>> phase_of((f"{prefix}-0123abcd", 4)), phase_of("nonesuch-0123abcd")
    ('runs', 'nonesuch')
    """
    from dask.utils import key_split

    from gpusort.engine.graph import PHASES

    # Fused tasks are named after their whole chain (merge-sorted-...): the first name counts.
    prefix = key_split(key).split("-")[0]
    return next((phase for phase, prefixes in PHASES.items() if prefix in prefixes), prefix)


def task_costs(client: Any, start: float) -> dict[str, dict[str, float]]:
    """Per phase, the tasks run on ``client`` since ``start`` (a ``time.time()``).

    Each phase of :data:`gpusort.engine.graph.PHASES` (in its order), and the name
    prefix of any other task, maps to ``{"tasks": count, "seconds": compute
    seconds summed over its tasks, "bytes": their output bytes}``.  Clients
    from :func:`gpusort.runtime.clusters.cluster` record the task stream
    from the start.  The seconds of an exchange's phases, which its owners
    run once P2P's barrier task (``shuffle``) has started them, come from
    the workers (:func:`gpusort.engine.exchange.recorded_phases`).  Its output tasks
    (``output``) wait for their owner's merge: a line of their own, so that
    no phase counts that wait.
    """
    from gpusort.engine.exchange import recorded_phases
    from gpusort.engine.graph import PHASES

    costs: dict[str, dict[str, float]] = {phase: {"tasks": 0, "seconds": 0.0, "bytes": 0} for phase in PHASES}
    for task in client.get_task_stream(start=start):
        entry = costs.setdefault(phase_of(task["key"]), {"tasks": 0, "seconds": 0.0, "bytes": 0})
        entry["tasks"] += 1
        entry["seconds"] += sum(s["stop"] - s["start"] for s in task["startstops"] if s["action"] == "compute")
        entry["bytes"] += task.get("nbytes", 0)
    # An exchange's phases are no tasks of their own: each worker timed them.
    for worker_seconds in client.run(recorded_phases, start).values():
        for phase, seconds in worker_seconds.items():
            costs.setdefault(phase, {"tasks": 0, "seconds": 0.0, "bytes": 0})["seconds"] += seconds
    return {phase: entry for phase, entry in costs.items() if entry["tasks"] or entry["seconds"]}


def phase_seconds(client: Any, start: float) -> dict[str, float]:
    """Compute seconds per phase since ``start``: :func:`task_costs`' seconds alone."""
    return {phase: entry["seconds"] for phase, entry in task_costs(client, start).items()}


@contextlib.contextmanager
def phase_timer(client: Any) -> Iterator[dict[str, float]]:
    """Compute seconds per phase of what runs inside the block, filled in when it ends.

    From ``client``'s task stream (:func:`phase_seconds`), or, with no client
    (Dask's threaded or synchronous scheduler), from Dask's local
    ``Profiler``; phases of :data:`gpusort.engine.graph.PHASES` first, in order.

    Examples
    --------
    >>> import dask.array as da
    >>> with phase_timer(None) as phases:
    ...     _ = (da.ones(10, chunks=5) + 1).sum().compute()
    >>> all(seconds >= 0 for seconds in phases.values()), len(phases) > 0
    (True, True)
    """
    from gpusort.engine.graph import PHASES

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
        from gpusort.engine.exchange import sent

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
