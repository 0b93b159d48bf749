"""Scale: graph size and scheduling time with a thousand chunks in and out.

N keys in P input chunks sorted into J output chunks.  gpusort's graph has
about 4P + 3J + P*J tasks (runs, samples, windows and P*J slices, merges and
their getitems): past a few hundred chunks the P*J slice tasks are the graph.
Each case reports, with the keys already in memory (persisted):

``tasks``, ``merge_tasks``  the graph's size, and its merges phase (the P*J slices among them)
``build_s``                 ``gpusort.sort(...)``: building the graph
``optimize_s``              ``dask.optimize``: the cull and fusion ``compute`` does first
``submit_s``                (distributed) ``persist`` until the scheduler holds the graph
``wall_s``                  build, optimize, submit, schedule and run, until done
``task_s``                  (distributed) compute seconds summed over the tasks
``us_per_task``             scheduling cost per task: (wall_s - task_s / threads) / tasks
                            (threads: wall_s / tasks, an upper bound)
``split_bytes``             the splitters phase's real output bytes (samples, windows,
                            split vectors), against
``split_bound``             ``corank.split_cost`` in bytes, the promised bound
``split_s``                 (distributed) compute seconds of the splitters phase
``imbalance``               the longest computed output chunk over the requested length

``--distributions`` runs the same grid on skewed keys (harness.DISTRIBUTIONS),
so one run also gives the splitter cost under skew.  Every output is checked
against ``np.sort``.  Run: ``python benchmarks/bench_scale.py --out DIR``.
"""

from __future__ import annotations

import contextlib
import time

import dask
import numpy as np
from dask.callbacks import Callback
from dask.sizeof import sizeof
from harness import DISTRIBUTIONS, Case, dask_keys, parse_args, run

from gpusort import runtime

SHOW = ("tasks", "merge_tasks", "build_s", "optimize_s", "submit_s", "task_s", "us_per_task",
        "split_bytes", "split_bound", "split_s", "imbalance")


def grid(text: str) -> tuple[int, int]:
    p, j = text.lower().split("x")
    return int(p), int(j)


def main(argv=None) -> int:
    def options(p):
        p.add_argument("--n", type=int, default=2**20, help="number of keys (default: %(default)s)")
        p.add_argument("--grid", type=grid, nargs="+", default=[(100, 100), (1000, 100), (100, 1000), (1000, 1000)],
                       help="PxJ: input chunks x output chunks (default: 100x100 1000x100 100x1000 1000x1000)")
        p.add_argument("--dtype", default="int64", help="key dtype (default: %(default)s)")
        p.add_argument("--distributions", nargs="+", choices=DISTRIBUTIONS, default=["uniform"])
        p.add_argument("--schedulers", nargs="+", choices=("threads", "distributed"),
                       default=["threads", "distributed"])
        p.add_argument("--workers", type=int, help="LocalCluster worker processes (default: one per core)")
        p.set_defaults(repeat=1, warmup=0)  # a 1000x1000 graph is a million tasks: once is plenty

    args = parse_args(__doc__, argv, options)
    distributed = "distributed" in args.schedulers
    # The scheduler keeps the last 100,000 tasks of its task stream by default:
    # too few for a 1000x100 graph, whose splitter tasks run first.
    with dask.config.set({"distributed.scheduler.dashboard.tasks.task-stream-length": 4_000_000}), \
            runtime.cluster("local", workers=args.workers, threads=1) if distributed else contextlib.nullcontext() as client:
        stamp = _stamp(client) if distributed else None
        cases = []
        for scheduler in args.schedulers:
            for distribution in args.distributions:
                for p, j in args.grid:
                    params = {"n": args.n, "dtype": args.dtype, "distribution": distribution,
                              "in_chunks": p, "out_chunks": j}
                    setup = _setup(args.n, p, args.dtype, distribution, client if scheduler == "distributed" else None)
                    sort = _sort_distributed(client, stamp, -(-args.n // j)) if scheduler == "distributed" else \
                        _sort_threads(-(-args.n // j))
                    cases.append(Case(f"gpusort[{scheduler}]", setup, sort, _check, args.n, params))
        return run("scale", args, cases, show=SHOW)


def _setup(n, p, dtype, distribution, client):
    def setup(rep):
        x = dask_keys(n, -(-n // p), dtype, distribution, seed=rep)
        if client is None:
            return x.persist(scheduler="threads")
        x = client.persist(x)
        client.gather(client.futures_of(x))
        return x

    return setup


def _graph_measures(y, x) -> dict:
    from gpusort.keys import corank

    phases = [runtime.phase_of(k) for k in dict(y.__dask_graph__())]
    n, lengths = x.shape[0], x.chunks[0]
    nbounds = len(y.chunks[0]) - 1
    g = corank.sample_stride(n, len(lengths), nbounds)
    return {"tasks": len(phases), "merge_tasks": phases.count("merges"),
            "split_bound": corank.split_cost(lengths, nbounds, g) * x.dtype.itemsize if nbounds else 0}


class _SplitBytes(Callback):
    def __init__(self):
        super().__init__()
        self.bytes = 0

    def _posttask(self, key, result, dsk, state, id):
        if runtime.phase_of(key) == "splitters":
            self.bytes += sizeof(result)


def _sort_threads(chunk):
    def sort(x):
        import gpusort

        start = time.perf_counter()
        y = gpusort.sort(x, chunks=chunk)
        built = time.perf_counter()
        (yo,) = dask.optimize(y)
        optimized = time.perf_counter()
        spy = _SplitBytes()
        with spy:
            blocks = dask.compute(*yo.to_delayed().ravel(), scheduler="threads")
        wall = time.perf_counter() - start
        m = _graph_measures(y, x)
        return blocks, m | {"build_s": built - start, "optimize_s": optimized - built, "wall_s": wall,
                            "us_per_task": wall / m["tasks"] * 1e6, "split_bytes": spy.bytes,
                            "out_chunk": chunk}

    return sort


def _stamp(client):
    """A scheduler plugin whose ``at`` is when the scheduler last took in a
    graph: a LocalCluster's scheduler runs in this process, so its clock is ours."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    class Stamp(SchedulerPlugin):
        name = "bench-scale-stamp"
        at = None

        def update_graph(self, scheduler, **kwargs):
            self.at = time.perf_counter()

    stamp = Stamp()
    client.cluster.scheduler.add_plugin(stamp)
    return stamp


def _sort_distributed(client, stamp, chunk):
    from distributed import wait

    def sort(x):
        import gpusort

        wall_start, start = time.time(), time.perf_counter()
        y = gpusort.sort(x, chunks=chunk)
        built = time.perf_counter()
        (yo,) = dask.optimize(y)  # what persist would do; timed on its own
        optimized = time.perf_counter()
        stamp.at = None
        y_on_cluster = client.persist(yo, optimize_graph=False)
        wait(y_on_cluster)
        wall = time.perf_counter() - start
        stats = runtime.task_costs(client, wall_start)
        task_s = sum(s["seconds"] for s in stats.values())
        threads = sum(client.nthreads().values())
        m = _graph_measures(y, x)
        return y_on_cluster, m | {
            "build_s": built - start, "optimize_s": optimized - built,
            "submit_s": stamp.at - optimized if stamp.at else float("nan"), "wall_s": wall, "task_s": task_s,
            "us_per_task": (wall - task_s / threads) / m["tasks"] * 1e6,
            "split_bytes": stats.get("splitters", {}).get("bytes", 0),
            "split_s": stats.get("splitters", {}).get("seconds", 0.0), "out_chunk": chunk,
        }

    return sort


def _check(x, out):
    result, measures = out
    chunk = measures.pop("out_chunk")
    if isinstance(result, tuple):  # threads: the computed blocks
        blocks = result
    else:
        blocks = dask.compute(*result.to_delayed().ravel())
    got = np.concatenate(blocks)
    np.testing.assert_array_equal(got, np.sort(x.compute()))
    lengths = [len(b) for b in blocks]
    assert lengths[:-1] == [chunk] * (len(lengths) - 1), "output chunks not exactly balanced"
    return measures | {"imbalance": max(lengths) / chunk}


if __name__ == "__main__":
    raise SystemExit(main())
