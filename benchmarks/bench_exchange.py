"""The exchange: a sort whose cost grows with the data, and that speeds up with every GPU.

Groups (``--cases``), each a table and a JSON file:

``chunks``   a 2-worker ``LocalCluster`` (one thread each), ``--n-chunks`` int64
             keys in 16 and in 256 chunks (in and out): time, tasks in the graph,
             and the ratio 256 / 16 (goal <= 1.5).
``threads``  Dask's threaded scheduler, ``--n-threads`` int64 keys in 4 chunks,
             against ``np.sort`` of the whole array on one core (goal: within 2x).
``gpus``     CuPy chunks, ``--n-gpu`` int64 keys in ``--chunks-gpu`` chunks per size
             (lists run each), on 1 and 2 GPUs (``LocalCUDACluster``, ``--protocol``):
             time, bytes the exchange moved between workers, and its bandwidth
             (those bytes over the window from the first transfer task's start to
             the barrier's end).
``host``     NumPy chunks with ``backend="cupy"``, ``--n-host`` int64 keys, on 1 and
             2 GPUs, within ``--budget`` per worker.

Inputs are fresh (new Dask keys) every repetition and persisted before the
clock starts; every result is checked with ``gpusort.verify``.

    python benchmarks/bench_exchange.py --cases chunks,threads
    python benchmarks/bench_exchange.py --cases gpus,host --protocol ucx
"""

from __future__ import annotations

import time

import dask
import numpy as np
from distributed import wait
from harness import Case, dask_keys, parse_args, run_cases

import gpusort
from gpusort import runtime
from gpusort.verification import verify

GROUPS = ("chunks", "threads", "gpus", "host")


def options(p):
    p.add_argument("--cases", default="chunks,threads", help=f"groups to run, of {GROUPS} (default: %(default)s)")
    p.add_argument("--n-chunks", type=runtime.count, default=2**22, help="keys, chunks group (default: %(default)s)")
    p.add_argument("--n-threads", type=runtime.count, default=2**26, help="keys, threads group (default: %(default)s)")
    p.add_argument("--n-gpu", default="2**30,2**31", help="keys, gpus group; a list (default: %(default)s)")
    p.add_argument("--chunks-gpu", default="32,64", help="chunks per --n-gpu size (default: %(default)s)")
    p.add_argument("--n-host", type=runtime.count, default=2**31, help="keys, host group (default: %(default)s)")
    p.add_argument("--chunks-host", type=int, default=32, help="chunks, host group (default: %(default)s)")
    p.add_argument("--budget", default="2GiB", help="GPU memory budget per worker, host group (default: %(default)s)")
    p.add_argument("--protocol", default="ucx", help="tcp or ucx, GPU groups (default: %(default)s)")
    p.add_argument("--gpu-threads", type=int, default=4, help="threads per GPU worker (default: %(default)s)")
    p.add_argument("--gpu-counts", default="1,2", help="GPU counts of the gpus group (default: %(default)s)")
    p.set_defaults(repeat=3)


def main(argv=None) -> int:
    args = parse_args(__doc__, argv, options)
    groups = [g for g in args.cases.split(",") if g]
    if set(groups) - set(GROUPS):
        raise SystemExit(f"--cases: unknown {sorted(set(groups) - set(GROUPS))}; choose from {GROUPS}")
    failed = 0
    for group in groups:
        summary = globals()[f"group_{group}"](args)
        failed |= any(s["status"] == "failed" for s in summary)
    return int(failed)


def exchange_window(client, start: float) -> float:
    """Seconds from the first transfer task's start to the barrier's end, since ``start``."""
    first, last = None, None
    for task in client.get_task_stream(start=start):
        phase = runtime.phase_of(task["key"])
        spans = [(s["start"], s["stop"]) for s in task["startstops"] if s["action"] == "compute"]
        if phase != "exchange" or not spans:
            continue
        first = min([first or spans[0][0]] + [a for a, _ in spans])
        last = max([last or spans[0][1]] + [b for _, b in spans])
    return (last - first) if first is not None else 0.0


def exchange_sent(client) -> int:
    from gpusort.exchange import sent

    return sum(s["bytes"] for s in client.run(sent).values())


def cluster_case(name: str, client, n: int, chunks: int, params: dict, to_chunks=None, **sort_kwargs) -> Case:
    """A sort on ``client`` of ``n`` fresh int64 keys in ``chunks`` chunks, verified, with its costs."""

    def setup(rep):
        x = dask_keys(n, -(-n // chunks), "int64", "uniform", seed=1000 * chunks + rep)
        if to_chunks is not None:
            x = to_chunks(x)
        x = x.persist()
        wait(x)
        return x, exchange_sent(client)

    def run(inputs):
        start = time.time()
        y = gpusort.sort(inputs[0], chunks=-(-n // chunks), **sort_kwargs)
        tasks = len(dict(y.__dask_graph__()))
        y = y.persist()
        wait(y)
        return y, start, tasks

    def check(inputs, out):
        (x, sent_before), (y, start, tasks) = inputs, out
        window = exchange_window(client, start)
        moved = exchange_sent(client) - sent_before
        report = verify(x, y)
        assert report.ok, str(report)
        return {"tasks": tasks, "phases": runtime.phase_seconds(client, start), "exchange_gib": moved / 2**30,
                "exchange_gbps": moved / window / 1e9 if window else 0.0}

    return Case(name, setup, run, check, n, params)


def group_chunks(args):
    n = args.n_chunks
    with runtime.cluster("local", workers=2, threads=1) as client:
        cases = [cluster_case("gpusort[numpy]", client, n, p, {"n": n, "chunks": p}) for p in (16, 256)]
        summary = run_cases("exchange-chunks", args, cases, show=("tasks",))
    by = {e["params"]["chunks"]: e for e in summary if e["status"] == "ok"}
    if 16 in by and 256 in by:
        ratio = by[256]["median_seconds"] / by[16]["median_seconds"]
        print(f"goal: 256 vs 16 chunks {ratio:.2f}x (<= 1.5 {'met' if ratio <= 1.5 else 'missed'}); "
              f"tasks at P = J = 256: {by[256]['tasks']:.0f} (<= {16 * 512})\n")
    return summary


def group_threads(args):
    n = args.n_threads
    params = {"n": n, "chunks": 4}

    def keys(rep):
        return np.random.default_rng(rep).integers(-(2**62), 2**62, n)

    def gpusort_threads(x):
        with dask.config.set(scheduler="threads"):
            return gpusort.sort(dask.array.from_array(x, chunks=-(-n // 4))).compute()

    def check(x, y):
        assert np.array_equal(y, np.sort(x))

    cases = [Case("gpusort[threads]", keys, gpusort_threads, check, n, params),
             Case("np.sort (one core)", keys, np.sort, None, n, params)]
    summary = run_cases("exchange-threads", args, cases, baseline="np.sort (one core)")
    by = {e["case"]: e for e in summary if e["status"] == "ok"}
    if len(by) == 2:
        slower = by["gpusort[threads]"]["median_seconds"] / by["np.sort (one core)"]["median_seconds"]
        print(f"goal: gpusort on threads {slower:.2f}x np.sort's time (<= 2 {'met' if slower <= 2 else 'missed'})\n")
    return summary


def _gpu_sizes(args) -> list[tuple[int, int]]:
    sizes = [runtime.count(s) for s in args.n_gpu.split(",")]
    chunks = [int(c) for c in args.chunks_gpu.split(",")]
    return list(zip(sizes, chunks, strict=True))


def group_gpus(args):
    import cupy

    summary = []
    for gpus in [int(g) for g in args.gpu_counts.split(",")]:
        with runtime.cluster("cuda", gpus=gpus, threads=args.gpu_threads, protocol=args.protocol) as client:
            cases = [cluster_case(f"gpusort[cupy chunks, {gpus} GPU]", client, n, p,
                                  {"n": n, "chunks": p, "gpus": gpus},
                                  to_chunks=lambda x: x.map_blocks(cupy.asarray, meta=cupy.empty(0, np.int64)))
                     for n, p in _gpu_sizes(args)]
            summary += run_cases(f"exchange-gpus{gpus}", args, cases, show=("exchange_gib", "exchange_gbps"))
    _speedups(summary, "gpus", 1.8)
    return summary


def group_host(args):
    """Host chunks on 1 GPU, then 2: a worker per GPU (the exchange moves host slabs
    between the two processes) and one worker process driving both GPUs (no exchange)."""
    summary = []
    n, p = args.n_host, args.chunks_host
    for gpus, kind in ((1, "cuda"), (2, "cuda"), (2, "process")):
        threads = args.gpu_threads * (gpus if kind == "process" else 1)
        options = {"protocol": args.protocol} if kind == "cuda" else {}
        with runtime.cluster(kind, gpus=gpus, threads=threads, **options) as client:
            case = cluster_case(f"gpusort[host chunks, {gpus} GPU, {kind}]", client, n, p,
                                {"n": n, "chunks": p, "gpus": gpus, "cluster": kind},
                                backend="cupy", gpu_memory_budget=args.budget)
            summary += run_cases(f"exchange-host{gpus}-{kind}", args, [case], show=("exchange_gib", "exchange_gbps"))
    _speedups(summary, "host", 1.7)
    return summary


def _speedups(summary: list[dict], what: str, goal: float) -> None:
    one = {e["params"]["n"]: e for e in summary if e["status"] == "ok" and e["params"]["gpus"] == 1}
    for e in summary:
        base = one.get(e["params"]["n"])
        if e["status"] == "ok" and e["params"]["gpus"] == 2 and base:
            speedup = base["median_seconds"] / e["median_seconds"]
            print(f"goal ({what}): {e['case']} n={e['params']['n']}: {speedup:.2f}x 1 GPU (>= {goal} "
                  f"{'met' if speedup >= goal else 'missed'}); exchange {e.get('exchange_gbps', 0):.1f} GB/s")


if __name__ == "__main__":
    raise SystemExit(main())
