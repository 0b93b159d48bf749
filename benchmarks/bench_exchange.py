"""The engine: a sort through Dask against one sort of the whole array, and every worker added.

Groups (``--cases``), each a table and a JSON file, peers in the same run:

``cpu``      a 2-worker ``LocalCluster`` (one thread each): gpusort on
             ``--n-cpu`` int64 keys in 16 chunks against ``np.sort`` of the whole
             array on one core and ``dask.dataframe.sort_values`` on the same
             cluster; then ``--n-chunks`` keys in 16 and in 256 chunks (in and
             out): time, tasks, the ratio 256 / 16.
``presorted`` the same 2-worker cluster, ``--n-presorted`` int64 keys in 16 chunks:
             random, already sorted and nearly sorted (every key within one
             chunk of its place) keys, each against the random ones.
``threads``  Dask's threaded scheduler, ``--n-threads`` int64 keys in 4 chunks,
             against ``np.sort`` of the whole array on one core.
``gpus``     CuPy chunks, ``--n-gpu`` int64 keys in ``--chunks-gpu`` chunks per
             size (lists run each): ``cupy.sort`` of the whole array on one GPU
             (CUDA events), then gpusort on each of ``--gpu-counts`` GPU workers
             (``LocalCUDACluster``, ``--protocol``), a fresh cluster per size;
             its first sort (fresh workers) is reported beside the warm median.
``host``     NumPy chunks with ``backend="cupy"``, ``--n-host`` int64 keys, on 1
             and 2 GPU workers, within ``--budget`` per worker.

Inputs are fresh (new Dask keys) every repetition and persisted before the
clock starts; every result is checked with ``gpusort.verify``.  Reported per
run: tasks in the graph, seconds by phase (the exchange's phases are timed
on the workers), bytes the exchange moved between workers and its rate.

    python benchmarks/bench_exchange.py --cases cpu,threads
    python benchmarks/bench_exchange.py --cases gpus,host --protocol ucx
"""

from __future__ import annotations

import operator
import time

import dask
import numpy as np
from distributed import wait
from harness import (Case, dask_keys, dataframe_peer, gpu_keys, gpu_uniform, keys_between, parse_args, run_cases,
                     synchronize_workers, warm_gpu_keys)

import gpusort
from gpusort import runtime
from gpusort.verification import verify

GROUPS = ("cpu", "presorted", "threads", "gpus", "host")


def options(p):
    p.add_argument("--cases", default="cpu,threads", help=f"groups to run, of {GROUPS} (default: %(default)s)")
    p.add_argument("--n-cpu", type=runtime.count, default=2**23, help="keys, cpu group's peers (default: %(default)s)")
    p.add_argument("--n-chunks", type=runtime.count, default=2**22, help="keys, cpu group's 16 vs 256 chunks "
                                                                        "(default: %(default)s)")
    p.add_argument("--n-presorted", type=runtime.count, default=2**24,
                   help="keys, presorted group (default: %(default)s)")
    p.add_argument("--n-threads", type=runtime.count, default=2**26, help="keys, threads group (default: %(default)s)")
    p.add_argument("--n-gpu", default="2**30,2**31", help="keys, gpus group; a list (default: %(default)s)")
    p.add_argument("--chunks-gpu", default="32,64", help="chunks per --n-gpu size (default: %(default)s)")
    p.add_argument("--n-host", type=runtime.count, default=2**31, help="keys, host group (default: %(default)s)")
    p.add_argument("--chunks-host", type=int, default=32, help="chunks, host group (default: %(default)s)")
    p.add_argument("--budget", default="2GiB", help="GPU memory budget per worker, host group (default: %(default)s)")
    p.add_argument("--protocol", default="ucx", help="tcp or ucx, GPU groups (default: %(default)s)")
    p.add_argument("--gpu-threads", type=int, default=4, help="threads per GPU worker (default: %(default)s)")
    p.add_argument("--gpu-counts", default="1,2", help="GPU workers, gpus and host groups (default: %(default)s)")
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
    """Seconds from the first transfer task's start to the last output task's end, since ``start``."""
    first, last = None, None
    for task in client.get_task_stream(start=start):
        spans = [(s["start"], s["stop"]) for s in task["startstops"] if s["action"] == "compute"]
        if runtime.phase_of(task["key"]) not in ("exchange", "merges", "shuffle") or not spans:
            continue
        first = min([first or spans[0][0]] + [a for a, _ in spans])
        last = max([last or spans[0][1]] + [b for _, b in spans])
    return (last - first) if first is not None else 0.0


def exchange_sent(client) -> int:
    from gpusort.engine.exchange import sent

    return sum(s["bytes"] for s in client.run(sent).values())


def cluster_case(name: str, client, n: int, chunks: int, params: dict, make=dask_keys, distribution="uniform",
                 **sort_kwargs) -> Case:
    """A sort on ``client`` of ``n`` fresh int64 keys in ``chunks`` chunks, verified, with its costs.

    ``make`` makes the keys (:func:`harness.dask_keys`' arguments): host
    chunks by default.  Its first run (the harness's warm-up, in workers
    that never sorted) is kept as ``first_seconds``.
    """
    times: list[float] = []

    def setup(rep):
        x = make(n, -(-n // chunks), "int64", distribution, seed=1000 * chunks + rep)
        x = x.persist()
        wait(x)
        synchronize_workers(client)  # the keys' drawing is not timed
        return x, exchange_sent(client)

    def run(inputs):
        start = time.time()
        clock = time.perf_counter()
        y = gpusort.sort(inputs[0], chunks=-(-n // chunks), **sort_kwargs)
        tasks = len(dict(y.__dask_graph__()))
        y = y.persist()
        wait(y)
        synchronize_workers(client)  # a task ends when its kernels are queued: the GPUs must finish them too
        times.append(time.perf_counter() - clock)
        return y, start, tasks

    def check(inputs, out):
        (x, sent_before), (y, start, tasks) = inputs, out
        window = exchange_window(client, start)
        moved = exchange_sent(client) - sent_before
        report = verify(x, y)
        assert report.ok, str(report)
        return {"tasks": tasks, "phases": runtime.phase_seconds(client, start), "exchange_gib": moved / 2**30,
                "exchange_gbps": moved / window / 1e9 if window and moved else 0.0, "first_seconds": times[0]}

    return Case(name, setup, run, check, n, params)


def group_cpu(args):
    n, chunks = args.n_cpu, 16
    params = {"n": n, "chunks": chunks}
    with runtime.cluster("local", workers=2, threads=1) as client:
        cases = [cluster_case("gpusort[2 workers]", client, n, chunks, params)]

        on_cluster = lambda rep: dask_keys(n, -(-n // chunks), "int64", "uniform", seed=rep).persist()
        cases += [dataframe_peer("dask.dataframe[2 workers]", on_cluster, n, params),
                  Case("dask p2p rechunk, no sort[2 workers]", on_cluster, p2p_floor, None, n, params),
                  Case("np.sort (one core)", lambda rep: keys_between(0, n, n, "int64", "uniform", rep), np.sort,
                       None, n, params)]
        summary = run_cases("exchange-cpu", args, cases, baseline="np.sort (one core)", show=("tasks",))
        m = args.n_chunks
        scale = [cluster_case("gpusort[2 workers]", client, m, p, {"n": m, "chunks": p}) for p in (16, 256)]
        # What a task per chunk costs this cluster, whatever it does: the floor of any graph with P chunks.
        scale += [Case("dask, one view a chunk[2 workers]",
                       lambda rep, p=p: dask_keys(m, -(-m // p), "int64", "uniform", seed=7000 + rep).persist(),
                       one_task_a_chunk, None, m, {"n": m, "chunks": p}) for p in (16, 256)]
        summary += run_cases("exchange-chunks", args, scale, show=("tasks",))
    by = {(e["case"], e["params"]["n"], e["params"]["chunks"]): e for e in summary if e["status"] == "ok"}
    ours, numpy_, frame = (by.get((c, n, chunks)) for c in ("gpusort[2 workers]", "np.sort (one core)",
                                                           "dask.dataframe[2 workers]"))
    if ours and numpy_:
        print(f"goal: 2 workers {numpy_['median_seconds'] / ours['median_seconds']:.2f}x one core's np.sort (>= 1.3)")
    if ours and frame:
        print(f"goal: {frame['median_seconds'] / ours['median_seconds']:.2f}x dask.dataframe.sort_values (>= 5)")
    few, many = by.get(("gpusort[2 workers]", m, 16)), by.get(("gpusort[2 workers]", m, 256))
    if few and many:
        print(f"goal: 256 vs 16 chunks {many['median_seconds'] / few['median_seconds']:.2f}x (<= 2); "
              f"tasks at P = J = 256: {many['tasks']:.0f}")
    few, many = by.get(("dask, one view a chunk[2 workers]", m, 16)), by.get(("dask, one view a chunk[2 workers]", m, 256))
    if few and many:
        print(f"the floor: a task a chunk alone, 256 vs 16 chunks {many['median_seconds'] / few['median_seconds']:.2f}x\n")
    return summary


def p2p_floor(x: dask.array.Array) -> dask.array.Array:
    """Dask's own P2P exchange of ``x``, no sort: every chunk's second half moves to the next chunk.

    What any sort on Dask's P2P machinery pays before it sorts anything:
    a transfer task per input chunk, the barrier, an output task per chunk,
    and about half the data moved.
    """
    c = x.chunks[0]
    shifted = (c[0] // 2,) + tuple((a - a // 2) + b // 2 for a, b in zip(c, c[1:])) + (c[-1] - c[-1] // 2,)
    y = x.rechunk((shifted,), method="p2p").persist()
    wait(y)
    return y


def one_task_a_chunk(x: dask.array.Array) -> dask.array.Array:
    """A view of every chunk of ``x``, one task each, persisted: Dask's cost per chunk, no work."""
    y = x.map_blocks(operator.getitem, slice(None), dtype=x.dtype).persist()
    wait(y)
    return y


def group_presorted(args):
    n, chunks = args.n_presorted, 16
    with runtime.cluster("local", workers=2, threads=1) as client:
        cases = [cluster_case(f"gpusort[{d}]", client, n, chunks, {"n": n, "chunks": chunks}, distribution=d)
                 for d in ("uniform", "sorted", "nearly")]
        summary = run_cases("exchange-presorted", args, cases, baseline="gpusort[uniform]", show=("tasks",))
    by = {e["case"]: e for e in summary if e["status"] == "ok"}
    if "gpusort[uniform]" in by:
        for d, goal in (("sorted", 0.25), ("nearly", 0.6)):
            if f"gpusort[{d}]" in by:
                share = by[f"gpusort[{d}]"]["median_seconds"] / by["gpusort[uniform]"]["median_seconds"]
                print(f"goal: {d} input {share:.2f}x the time of random (<= {goal})")
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

    def whole(n):
        def setup(rep):
            return gpu_uniform(n, np.int64, rep)

        def check(x, y):
            assert bool(verify(x, y)), "cupy.sort's output is not x sorted"

        return setup, check

    summary = []
    for n, p in _gpu_sizes(args):
        params = {"n": n, "chunks": p}
        setup, check = whole(n)
        summary += run_cases(f"exchange-cupy-{n}", args, [Case("cupy.sort (one GPU)", setup, cupy.sort, check, n,
                                                                  params, device="gpu", requires=("cupy",))])
        cupy.get_default_memory_pool().free_all_blocks()
        for gpus in [int(g) for g in args.gpu_counts.split(",")]:
            with runtime.cluster("cuda", gpus=gpus, threads=args.gpu_threads, protocol=args.protocol) as client:
                warm_gpu_keys(client)
                case = cluster_case(f"gpusort[cupy chunks, {gpus} GPU]", client, n, p, {**params, "gpus": gpus},
                                    make=gpu_keys)
                summary += run_cases(f"exchange-gpus{gpus}-{n}", args, [case],
                                     show=("first_seconds", "exchange_gib", "exchange_gbps"))
    _ratios(summary)
    return summary


def group_host(args):
    summary = []
    n, p = args.n_host, args.chunks_host
    for gpus in [int(g) for g in args.gpu_counts.split(",")]:
        with runtime.cluster("cuda", gpus=gpus, threads=args.gpu_threads, protocol=args.protocol) as client:
            case = cluster_case(f"gpusort[host chunks, {gpus} GPU]", client, n, p, {"n": n, "chunks": p, "gpus": gpus},
                                backend="cupy", gpu_memory_budget=args.budget)
            summary += run_cases(f"exchange-host{gpus}", args, [case],
                                 show=("first_seconds", "exchange_gib", "exchange_gbps"))
    _ratios(summary)
    return summary


def _ratios(summary: list[dict]) -> None:
    """Each GPU row against ``cupy.sort`` and against one GPU on the same keys, and first against warm."""
    ok = [e for e in summary if e["status"] == "ok"]
    for e in ok:
        if "gpus" not in e["params"]:
            continue
        n = e["params"]["n"]
        peer = next((c for c in ok if c["case"].startswith("cupy.sort") and c["params"]["n"] == n), None)
        one = next((c for c in ok if c["params"].get("gpus") == 1 and c["params"]["n"] == n
                    and c["case"].split(",")[0] == e["case"].split(",")[0]), None)
        words = [f"{e['case']} n={n}: {e['items_per_second'] / 1e9:.2f} Gkeys/s warm, first "
                 f"{e['first_seconds']:.3f} s ({e['first_seconds'] / e['median_seconds']:.2f}x warm)"]
        if peer:
            words.append(f"{peer['median_seconds'] / e['median_seconds']:.2f}x cupy.sort")
        if one and e["params"]["gpus"] != 1:
            words.append(f"{one['median_seconds'] / e['median_seconds']:.2f}x 1 GPU")
        print("; ".join(words))


if __name__ == "__main__":
    raise SystemExit(main())
