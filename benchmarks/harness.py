"""The one benchmark harness behind every ``benchmarks/bench_*.py`` file.

In the spirit of dask-cuda's ``benchmarks/common.py``: a bench file stays
short.  It parses its options with :func:`parse_args`, describes what to time
as a list of :class:`Case` objects -- gpusort and its peers on the same
input -- and hands them to :func:`run`, which times, checks, prints a table
and writes tidy JSON.  A complete bench file::

    # benchmarks/bench_example.py; run: python benchmarks/bench_example.py --out results
    import numpy as np
    from harness import Case, parse_args, run

    def main(argv=None) -> int:
        args = parse_args(__doc__, argv, extra=lambda p: p.add_argument("--n", type=int, default=2**20))
        cases = [
            Case(
                "np.sort",
                setup=lambda rep: np.random.default_rng(rep).integers(0, 2**40, args.n),
                run=np.sort,
                check=lambda x, y: np.testing.assert_array_equal(y, np.sort(x)),
                items=args.n,
                params={"n": args.n, "dtype": "int64"},
            )
        ]
        return run("example", args, cases)

    if __name__ == "__main__":
        raise SystemExit(main())

The contract, one field of :class:`Case` at a time:

``setup(rep) -> inputs``
    Makes *fresh* inputs, untimed.  ``rep`` is unique for every warm-up and
    timed repetition of a case: use it as the seed.  That is the Dask trap
    this avoids -- computing the same graph twice on a distributed client can
    hand back results it still holds instead of doing the work again.
``run(inputs) -> output``
    The timed part.  It must leave the work *finished*: call ``.compute()``
    on lazy Dask results.
``check(inputs, output) -> dict | None``
    Untimed.  Raises (``AssertionError``) on a wrong result; a failed case is
    reported as such and never gets a time.  A returned dict is recorded with
    the run (phase seconds, chunk balance, ...); ``run`` may return a tuple
    ``(result, measurements)`` for ``check`` to pass on.
``device``
    ``"cpu"``: host clock.  ``"gpu"``: the case runs on *this process's*
    current GPU; the harness times it with CUDA events, synchronizes the
    device before the host clock stops, and records the CuPy pool's
    high-water mark (``gpu_pool_bytes``).  The pool is emptied before a
    case's first run only: timed runs find it warm.  Distributed GPU cases stay
    ``"cpu"`` and wait for the workers' GPUs themselves (:func:`synchronize_workers`):
    a task ends when its kernels are queued, not when they ran.
``requires``
    Modules the case imports; where one is missing (or ``device="gpu"`` and
    no GPU is usable) the case is reported as skipped with the reason, so
    peers such as ``cupy.sort`` or ``torch.sort`` simply drop out.
``params``
    What the input is (``n``, ``dtype``, ``chunks``, ``distribution``, ...).
    Peers timed on the same input share ``params``; ``run(..., baseline=NAME)``
    reports every case's speed relative to the case ``NAME`` whose params the
    case's include.  The plots (``benchmarks/plot.py``) read ``n`` and ``dtype``.

Every bench file defines ``main(argv=None) -> int`` so that ``gpusort bench
NAME`` and tests can run it.  Bench files that compute on a cluster take
``parse_args(..., cluster=True)``, which adds the options of
:func:`gpusort.runtime.cluster` (one thread per worker unless told), and
start it with :func:`cluster`.  Results go to ``--out DIR`` (default
``results``) as ``NAME-YYYYmmdd-HHMMSS-XXXXXX.json``
(:func:`gpusort.runtime.write_json`: opened exclusively, so nothing is ever
overwritten).  The JSON holds ``config`` (the parsed options),
``machine``, ``versions``, ``runs`` (one row per timed repetition: the tidy
table), ``summary`` (one row per case: medians, items/s, ratio) and
``skipped``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import dask
import dask.array as da
import numpy as np

# Run from a source checkout, a bench measures the checkout's gpusort rather
# than whichever one is installed.
_CHECKOUT = Path(__file__).resolve().parent.parent
if (_CHECKOUT / "gpusort" / "__init__.py").is_file() and str(_CHECKOUT) not in sys.path:
    sys.path.insert(0, str(_CHECKOUT))

from gpusort import runtime

__all__ = [
    "DISTRIBUTIONS",
    "Case",
    "add_ratios",
    "cluster",
    "dask_keys",
    "dataframe_peer",
    "format_table",
    "gpusort_on_cluster",
    "keys_between",
    "on_backend",
    "parse_args",
    "persisted",
    "persisted_keys",
    "synchronize_workers",
    "run",
    "summarize",
    "time_case",
    "to_host",
]


@dataclass
class Case:
    """One thing to time: a method (``name``) on one input (``params``)."""

    name: str
    setup: Callable[[int], Any]
    run: Callable[[Any], Any]
    check: Callable[[Any, Any], dict | None] | None
    items: int
    params: dict = field(default_factory=dict)
    device: Literal["cpu", "gpu"] = "cpu"
    requires: Sequence[str] = ()
    bytes: int | None = None
    """Bytes the case moves (for GB/s); ``None`` when items/s says it all."""
    repeat: int | None = None
    """Timed repetitions of this case; ``None``: the ``--repeat`` option (long cases run fewer)."""
    warmup: int | None = None
    """Untimed repetitions first; ``None``: the ``--warmup`` option."""


def parse_args(
    description: str | None,
    argv: Sequence[str] | None = None,
    extra: Callable[[argparse.ArgumentParser], Any] | None = None,
    cluster: bool = False,
) -> argparse.Namespace:
    """The options every bench file shares, plus its own through ``extra``.

    Parameters
    ----------
    description : str or None
        The bench file's help text (its module docstring does well).
    argv : sequence of str, optional
        Arguments; ``sys.argv[1:]`` when ``None``.
    extra : callable, optional
        ``extra(parser)`` adds the bench file's own options.
    cluster : bool
        Add the options of :func:`gpusort.runtime.cluster` (``--cluster``,
        ``--workers``, ...), with one thread per worker by default.

    Examples
    --------
    >>> args = parse_args("demo", ["--repeat", "3", "--out", "/tmp/r"])
    >>> args.repeat, args.warmup, str(args.out)
    (3, 1, '/tmp/r')
    """
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)  # --rep is no --repeat: say so, not guess
    parser.add_argument(
        "--out", type=Path, default=Path("results"),
        help="directory for the JSON results; files are never overwritten (default: %(default)s)",
    )
    parser.add_argument("--repeat", type=_positive, default=5, help="timed repetitions per case (default: %(default)s)")
    parser.add_argument("--warmup", type=_non_negative, default=1, help="untimed repetitions first (default: %(default)s)")
    parser.add_argument("--quiet", action="store_true", help="print nothing but errors")
    parser.add_argument("--only", nargs="+", metavar="TEXT",
                        help="run only the cases whose names contain one of these (default: every case)")
    if cluster:
        runtime.add_options(parser)
        parser.set_defaults(threads=1)  # a worker per core, as the peers get
    if extra is not None:
        extra(parser)
    return parser.parse_args(argv)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def skip_reason(case: Case) -> str | None:
    """Why ``case`` cannot run here (a missing module, no GPU), or ``None``."""
    needs = list(case.requires) + (["cupy"] if case.device == "gpu" else [])
    for module in needs:
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed"
    if case.device == "gpu" and not runtime.gpus()[0]:
        return runtime.gpus()[1]
    return None


def time_case(case: Case, *, repeat: int, warmup: int) -> list[dict]:
    """Warm up, then time ``case`` ``repeat`` times; one row per timed run.

    Each repetition gets fresh inputs from ``case.setup(rep)`` and its output
    is checked with ``case.check``; setup and check are not timed.  An
    exception anywhere ends the case: it propagates to the caller.

    Examples
    --------
    >>> rows = time_case(Case("sum", setup=lambda rep: list(range(rep + 10)), run=sum,
    ...                       check=None, items=10), repeat=2, warmup=1)
    >>> [row["rep"] for row in rows], rows[0]["seconds"] > 0
    ([1, 2], True)
    """
    rows = []
    for rep in range(warmup + repeat):
        inputs = case.setup(rep)
        seconds, wall, gpu_bytes, output = _timed(case, inputs, fresh_pool=rep == 0)
        measured = case.check(inputs, output) if case.check is not None else None
        del inputs, output  # free before the next setup: peak memory stays one input
        if rep < warmup:
            continue
        row = {"rep": rep, "seconds": seconds, "wall_seconds": wall}
        if gpu_bytes is not None:
            row["gpu_pool_bytes"] = gpu_bytes
        rows.append(row | (measured or {}))
    return rows


def _timed(case: Case, inputs: Any, fresh_pool: bool) -> tuple[float, float, int | None, Any]:
    """(seconds, host seconds, GPU pool bytes or None, output) of one run.

    ``fresh_pool`` (a case's first run) empties CuPy's pool first; later runs
    find it warm, as a program's repeated calls do, so they time the work
    and not cudaMalloc and cudaFree (a copy of 2 GB timed 1.51 TB/s with an
    empty pool).  The pool's size after a run is then the case's peak so far.
    """
    if case.device == "cpu":
        start = time.perf_counter()
        output = case.run(inputs)
        wall = time.perf_counter() - start
        return wall, wall, None, output
    import cupy

    pool = cupy.get_default_memory_pool()
    if fresh_pool:
        pool.free_all_blocks()
    cupy.cuda.runtime.deviceSynchronize()  # setup's GPU work is not timed
    begin, end = cupy.cuda.Event(), cupy.cuda.Event()
    start = time.perf_counter()
    begin.record()
    output = case.run(inputs)
    end.record()
    # A device-wide sync also waits for streams that are not CuPy's (torch).
    cupy.cuda.runtime.deviceSynchronize()
    wall = time.perf_counter() - start
    return cupy.cuda.get_elapsed_time(begin, end) / 1e3, wall, pool.total_bytes(), output


def summarize(case: Case, rows: list[dict]) -> dict:
    """One case's summary: median and min seconds, items/s, medians of measurements.

    ``rows`` are the case's timed runs from :func:`time_case`.  A numeric
    measurement (from ``check``) is summarized by its median; a dict of them
    (``phases``: seconds per phase) by the median of each entry.

    Examples
    --------
    >>> case = Case("a", setup=None, run=None, check=None, items=4, params={"n": 4})
    >>> rows = [{"rep": r, "seconds": s, "balance": 1.0} for r, s in enumerate((1.0, 3.0, 2.0))]
    >>> entry = summarize(case, rows)
    >>> entry["median_seconds"], entry["items_per_second"], entry["balance"]
    (2.0, 2.0, 1.0)
    """
    seconds = [row["seconds"] for row in rows]
    median = statistics.median(seconds)
    entry = {"case": case.name, "params": dict(case.params), "status": "ok", "items": case.items,
             "repetitions": len(rows), "median_seconds": median, "min_seconds": min(seconds),
             "items_per_second": case.items / median if median > 0 else float("inf")}
    if case.bytes is not None:
        entry["bytes"] = case.bytes
        entry["bytes_per_second"] = case.bytes / median if median > 0 else float("inf")
    for key, value in rows[0].items():
        if key in ("rep", "seconds"):
            continue
        if isinstance(value, dict):
            names = dict.fromkeys(k for row in rows for k in row[key])
            entry[key] = {k: statistics.median(row[key].get(k, 0.0) for row in rows) for k in names}
        elif isinstance(value, (int, float)):
            entry[key] = statistics.median(row[key] for row in rows)
    return entry


def add_ratios(summary: list[dict], baseline: str) -> None:
    """Give each case ``ratio``: the baseline's median over its own, on the baseline's params.

    A case is compared with the baseline run whose params it shares, and may
    have more of its own (``topk``'s ``k`` against the sort of the same keys);
    where several match, the one with the most params.  Above 1 means faster
    than ``baseline``; cases without a baseline on their params get no ratio.

    Examples
    --------
    >>> summary = [{"case": "a", "params": {"n": 4, "k": 2}, "status": "ok", "median_seconds": 1.0},
    ...            {"case": "b", "params": {"n": 4}, "status": "ok", "median_seconds": 4.0},
    ...            {"case": "c", "params": {"n": 8}, "status": "ok", "median_seconds": 1.0}]
    >>> add_ratios(summary, "b")
    >>> [entry.get("ratio") for entry in summary]
    [4.0, 1.0, None]
    """
    references = [e for e in summary if e["case"] == baseline and e["status"] == "ok"]
    for entry in summary:
        shared = [e for e in references if e["params"].items() <= entry["params"].items()]
        if entry["status"] == "ok" and shared and entry["median_seconds"] > 0:
            ref = max(shared, key=lambda e: len(e["params"]))["median_seconds"]
            entry["ratio"] = ref / entry["median_seconds"]


def format_table(summary: list[dict], show: Sequence[str] = ()) -> str:
    """A plain-text table of the summary: one line per case, skipped ones last.

    ``show`` names measurements (from ``Case.check``) to add as columns.

    Examples
    --------
    >>> print(format_table([
    ...     {"case": "np.sort", "params": {"n": 8}, "status": "ok", "median_seconds": 0.5,
    ...      "min_seconds": 0.25, "items_per_second": 16e6, "ratio": 2.0},
    ...     {"case": "cupy.sort", "params": {"n": 8}, "status": "skipped",
    ...      "reason": "cupy is not installed"}]))
    case       n  median s  min s  Mkeys/s  ratio
    ---------  -  --------  -----  -------  -----
    np.sort    8  0.5       0.25   16       2.00x
    cupy.sort  8  skipped: cupy is not installed
    """
    params = list(dict.fromkeys(k for entry in summary for k in entry["params"]))
    header = ["case", *params, "median s", "min s", "Mkeys/s", "ratio", *show]
    lines = []
    for entry in sorted(summary, key=lambda e: e["status"] == "skipped"):
        cells = [entry["case"], *(_cell(entry["params"].get(k, "")) for k in params)]
        if entry["status"] == "ok":
            cells += [_cell(entry["median_seconds"]), _cell(entry["min_seconds"]),
                      _cell(entry["items_per_second"] / 1e6),
                      f"{entry['ratio']:.2f}x" if "ratio" in entry else "",
                      *(_cell(entry.get(k, "")) for k in show)]
        else:  # the reason overflows the columns to its right, which are empty
            cells.append(f"{entry['status']}: {entry['reason']}")
        lines.append(cells)
    sized = [cells if len(cells) == len(header) else cells[:-1] + [""] * (4 + len(show)) for cells in lines]
    widths = [max(map(len, column)) for column in zip(header, *sized)]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *map(fmt, lines)])


def _cell(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def run(name: str, args: argparse.Namespace, cases: Sequence[Case],
        baseline: str | None = None, show: Sequence[str] = ()) -> int:
    """Time every case, print the table, write the JSON; the exit status.

    Returns 1 if any case failed, else 0 (see :func:`run_cases`).
    """
    return int(any(s["status"] == "failed" for s in run_cases(name, args, cases, baseline, show)))


def run_cases(name: str, args: argparse.Namespace, cases: Sequence[Case],
              baseline: str | None = None, show: Sequence[str] = ()) -> list[dict]:
    """Time every case, print the table, write the JSON; the summary rows.

    Cases that cannot run here are skipped with the reason; a case that raises
    (a failed check included) is reported as failed with its error and the
    others still run.  A case's own ``repeat`` and ``warmup`` win over the
    options (long cases run fewer times).  ``baseline`` names the case the others are
    compared with (the ``ratio`` column); ``show`` adds measurements to the
    table where some case has them.
    """
    rows: list[dict] = []
    summary: list[dict] = []
    wanted = getattr(args, "only", None)
    for case in cases:
        if wanted and not any(text in case.name for text in wanted):
            continue
        head = {"case": case.name, "params": dict(case.params)}
        reason = skip_reason(case)
        if reason is not None:
            summary.append(head | {"status": "skipped", "reason": reason})
            continue
        if not args.quiet:
            print(f"timing {case.name} {case.params} ...", file=sys.stderr, flush=True)
        try:
            timed = time_case(case, repeat=case.repeat or args.repeat,
                              warmup=args.warmup if case.warmup is None else case.warmup)
        except Exception as exc:
            traceback.print_exc()
            summary.append(head | {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"})
            continue
        rows += [{"case": case.name, **case.params, "items": case.items} | r for r in timed]
        summary.append(summarize(case, timed))
    if baseline is not None:
        add_ratios(summary, baseline)
    path = runtime.write_json(args.out, name, {
        "benchmark": name, "config": vars(args), "runs": rows,
        "summary": [s for s in summary if s["status"] != "skipped"],
        "skipped": [s for s in summary if s["status"] == "skipped"],
    })
    if not args.quiet:
        print(format_table(summary, [c for c in show if any(c in s for s in summary)]))
        print(f"results: {path}", flush=True)
    return summary


# --- inputs and Dask helpers shared by the sort benchmarks ---------------------------------

DISTRIBUTIONS = ("uniform", "equal", "few", "zipf", "one99", "sorted", "reverse", "nearly")
"""Key distributions: uniform over the dtype's range, all equal, 4 distinct values,
Zipf(1.1), 99% one value, already sorted, sorted in reverse, nearly sorted (every
key within a sixteenth of the input of its place: one chunk of 16)."""


def keys_between(start: int, stop: int, n: int, dtype: Any, distribution: str, seed: int) -> np.ndarray:
    """Keys at positions ``[start, stop)`` of an ``n``-key input from ``distribution``.

    Random draws are seeded by ``(seed, start)``, so any chunk of the input can
    be made on its own, on any worker.

    Examples
    --------
    >>> keys_between(0, 4, 4, "int32", "sorted", seed=0)
    array([0, 1, 2, 3], dtype=int32)
    >>> keys_between(2, 4, 4, "int64", "reverse", seed=0)
    array([1, 0])
    """
    dtype = np.dtype(dtype)
    rng = np.random.default_rng([seed, start])
    size = stop - start
    if distribution in ("sorted", "reverse"):
        ranks = np.arange(start, stop) if distribution == "sorted" else np.arange(n - start - 1, n - stop - 1, -1)
        return ranks.astype(dtype)  # wraps for narrow dtypes: still mostly ordered runs
    if distribution == "nearly":
        return (np.arange(start, stop) + rng.integers(0, max(1, n // 16), size)).astype(dtype)
    if distribution == "uniform":
        if dtype.kind == "f":
            return rng.standard_normal(size).astype(dtype)
        if dtype.kind == "b":
            return rng.integers(0, 2, size).astype(dtype)
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size, dtype=dtype, endpoint=True)
    if distribution == "equal":
        return np.full(size, 7, dtype)
    if distribution == "few":
        return rng.integers(0, 4, size).astype(dtype)
    if distribution == "zipf":  # heavy-tailed: a few values hold most keys; capped to fit the dtype
        cap = min(np.iinfo(dtype).max, 2**62) if dtype.kind in "iu" else 2**62
        return np.minimum(rng.zipf(1.1, size), cap).astype(dtype)
    if distribution == "one99":
        return np.where(rng.random(size) < 0.99, 42, rng.integers(0, 100, size)).astype(dtype)
    raise ValueError(f"distribution={distribution!r} is not known; use one of {DISTRIBUTIONS}")


def dask_keys(n: int, chunks: int, dtype: Any, distribution: str, seed: int) -> da.Array:
    """A lazy ``n``-key Dask array from :func:`keys_between`, chunk by chunk.

    A new ``seed`` gives new Dask keys, so a distributed client really computes
    it again: pass the repetition number from ``Case.setup``.

    Examples
    --------
    >>> dask_keys(10, 4, "int64", "sorted", seed=0).compute()
    array([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    """
    positions = da.arange(n, chunks=chunks, dtype=np.int64)
    return positions.map_blocks(_block_keys, n, np.dtype(dtype), distribution, seed, dtype=dtype,
                                meta=np.empty(0, dtype))


def gpu_keys(n: int, chunks: int, dtype: Any, distribution: str, seed: int) -> da.Array:
    """:func:`dask_keys` made on the workers' GPUs, as CuPy chunks: uniform keys of the dtype's whole range.

    Made where they are sorted, with no host copy: a benchmark of 2^32
    keys would spend minutes drawing them on the host.  A new ``seed``
    gives new Dask keys.
    """
    import cupy

    if distribution != "uniform":
        raise ValueError(f"gpu_keys makes uniform keys, not {distribution!r}: use dask_keys")
    sizes = [min(chunks, n - start) for start in range(0, n, chunks)]
    blocks = [da.from_delayed(dask.delayed(_gpu_block, pure=True)(np.dtype(dtype), size, seed, i), (size,),
                              dtype=dtype, meta=cupy.empty(0, dtype)) for i, size in enumerate(sizes)]
    return da.concatenate(blocks) if blocks else da.from_array(cupy.empty(0, dtype))


def warm_gpu_keys(client: Any, dtype: Any = np.int64) -> None:
    """Compile :func:`gpu_keys`' CuPy kernels in every worker before a first sort is timed.

    Their first use in a process compiles for about a second while holding
    the interpreter; a block still drawing then (work stealing runs a slow
    block twice, once on an idle worker) stalls that worker's share of the
    first sort's output.  A first sort measures the sort, not the drawing.
    """
    client.run(_warm_block, np.dtype(dtype))


def _warm_block(dtype: np.dtype) -> None:
    gpu_uniform(16, dtype, 0).sum().item()


def _gpu_block(dtype: np.dtype, size: int, seed: int, block: int) -> Any:
    return gpu_uniform(size, dtype, seed * 1_000_003 + block)


def gpu_uniform(size: int, dtype: Any, seed: int) -> Any:
    """``size`` integer keys on the current GPU, uniform over the dtype's range at 53 bits of resolution.

    Drawn as floats and scaled: CuPy's ``Generator.integers`` passed wide
    ranges through 32-bit integers until cupy/cupy#10151 (issue #9745),
    raising where nobody sees it and leaving the array partly unwritten.
    """
    import cupy

    info = np.iinfo(dtype)
    u = cupy.random.default_rng(seed).random(size)
    return (u * (float(info.max) - float(info.min)) + float(info.min)).astype(dtype)


def persisted_keys(n: int, chunk: int, dtype: Any, distribution: str, seed: int) -> da.Array:
    """:func:`dask_keys` in chunks of ``chunk``, persisted on the current client and waited for.

    A ``Case.setup`` for the cluster benchmarks: the keys are in the
    workers' memory before the clock starts.
    """
    return persisted(dask_keys(n, chunk, dtype, distribution, seed=seed))


def persisted(y: Any) -> Any:
    """A Dask array (or a list of them) persisted and, on a distributed client, waited for.

    Local schedulers (``--cluster threads``) have computed it by the time ``persist`` returns.
    """
    from distributed import futures_of, wait

    y = y.persist() if isinstance(y, da.Array) else [a.persist() for a in y]
    if futures_of(y):
        wait(y)
    return y


def on_backend(x: da.Array, backend: str) -> da.Array:
    """``x`` with CuPy chunks for ``backend="cupy"``, persisted: the input of a timed case."""
    if backend == "cupy":
        import cupy

        x = x.map_blocks(cupy.asarray)
    return persisted(x)


def to_host(a: Any) -> np.ndarray:
    """A computed result as a NumPy array, wherever it was computed."""
    return np.asarray(a.get() if hasattr(a, "get") else a)


def gpusort_on_cluster(**sort_kwargs: Any) -> Callable[[da.Array], tuple[da.Array, float]]:
    """A ``Case.run``: ``gpusort.sort(x, **sort_kwargs)`` persisted on the current client and waited for.

    Returns ``(result, start)``, ``start`` a ``time.time()`` for
    :func:`gpusort.runtime.task_costs` (the task stream's clock), so
    ``Case.check`` can read the cost by phase.
    """

    def sort(x: da.Array) -> tuple[da.Array, float]:
        import gpusort
        from distributed import default_client, wait

        start = time.time()
        y = gpusort.sort(x, **sort_kwargs).persist()
        wait(y)
        synchronize_workers(default_client())
        return y, start

    return sort


def dataframe_peer(name: str, setup: Callable[[int], Any], items: int, params: dict) -> Case:
    """``dask.dataframe``'s ``sort_values`` of the keys as one column, persisted on the current client: the peer
    of the sorts on a cluster, checked against ``np.sort``."""

    def sort(x: da.Array) -> Any:
        import dask.dataframe as dd
        from distributed import futures_of, wait

        y = dd.from_dask_array(x, columns=["k"]).sort_values("k").persist()
        if futures_of(y):
            wait(y)
        return y

    def check(x: da.Array, y: Any) -> None:
        np.testing.assert_array_equal(y.compute()["k"].to_numpy(), np.sort(x.compute()))

    return Case(name, setup, sort, check, items, params, requires=("pandas", "pyarrow"))


def synchronize_workers(client: Any) -> None:
    """Wait until every worker's GPU has run the kernels queued on it (CPU workers return at once)."""
    client.run(_synchronize)


def _synchronize() -> None:
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        cupy.cuda.runtime.deviceSynchronize()


def _block_keys(positions: np.ndarray, n: int, dtype: np.dtype, distribution: str, seed: int) -> np.ndarray:
    start = int(positions[0]) if len(positions) else 0
    return keys_between(start, start + len(positions), n, dtype, distribution, seed)


def cluster(args: argparse.Namespace) -> contextlib.AbstractContextManager:
    """:func:`gpusort.runtime.cluster` as ``parse_args(..., cluster=True)``'s options say.

    ``--cluster auto`` is ``local`` unless the bench sorts with ``--backend cupy``.
    """
    kind = args.cluster
    if kind == "auto" and getattr(args, "backend", None) != "cupy":
        kind = "local"
    return runtime.from_options(args, kind=kind)
