"""Sort keys held in GPU memory on 1, 2, 4 ... GPUs: the strong-scaling table, against ``cupy.sort`` on one GPU.

Random keys are made on the GPUs (CuPy chunks, persisted: fresh keys and
new Dask keys every repetition), then sorted with ``gpusort.sort`` on a
``LocalCUDACluster`` of each GPU count: across several GPU workers the
sort is one task per worker talking over NCCL (``gpusort.engine.collective``).
Each repetition's clock runs from ``gpusort.sort`` to the persisted result with the GPUs idle;
the first and the last repetition of each count are checked with
``gpusort.verify`` on the GPUs (sorted, and a permutation of the input by
count and checksum).  Printed: seconds and Gkeys/s per repetition, the
median of the warm ones, the speed-up over one GPU and over ``cupy.sort``
(timed with CUDA events inside a worker of the one-GPU cluster), and the
phases each rank spent; written: the JSON and, with matplotlib, a plot of
Gkeys/s against GPUs.

    python workflows/multi_gpu_sort.py --keys 2**31 --chunks 64 --gpu-counts 1,2,4
    python workflows/multi_gpu_sort.py --keys 2**33 --chunks 512 --gpu-counts 4 --repeat 5 --protocol ucx
    python workflows/multi_gpu_sort.py --merge --keys 2**32 --chunks 128 --gpu-counts 4   # merge two sorted halves

With ``--merge`` the job is ``gpusort.merge`` of two sorted arrays of half
the keys each, half the chunks each (chunk ``i`` of each holds sorted keys
of the ``i``-th slice of the key range), checked against their union.

Exit status 0 when every checked output is exact, 1 when not, 2 for a
cluster this machine cannot start.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

_HERE = Path(__file__).resolve().parent
if str(_HERE.parent) not in sys.path:  # run from a checkout: its gpusort
    sys.path.insert(0, str(_HERE.parent))

from gpusort import runtime  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--keys", type=runtime.count, default=2**28, help="number of int64 keys (default: %(default)s)")
    parser.add_argument("--chunks", type=runtime.count, default=16, help="number of input chunks (default: %(default)s)")
    parser.add_argument("--gpu-counts", default="1", help="GPU counts to run, e.g. 1,2,4 (default: %(default)s)")
    parser.add_argument("--repeat", type=runtime.count, default=4,
                        help="sorts per GPU count, each of fresh keys; the first is the cold one (default: %(default)s)")
    parser.add_argument("--timeline", action="store_true",
                        help="print when each kind of task ran, per repetition (from the task stream)")
    parser.add_argument("--merge", action="store_true", help="merge two sorted halves instead of sorting")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the keys (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=Path("results"), help="folder for the JSON and PNG (default: %(default)s)")
    runtime.add_options(parser, gpu=True)
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.gpu_counts.split(",")]
    runs: list[dict] = []
    baseline = None
    ok = True
    for gpus in counts:
        with runtime.from_options(args, parser, kind="cuda", gpus=gpus) as client:
            if gpus == 1:
                baseline = min(client.run(cupy_sort_seconds, args.keys).values())
            for rep in range(args.repeat):
                checked = rep in (0, args.repeat - 1)
                run = sort_once(client, args, args.seed + 1000 * gpus + rep, checked)
                runs.append(run | {"gpus": gpus, "rep": rep})
                ok &= run["verified"] is not False
                print(f"  {gpus} GPU(s), rep {rep}: {run['seconds']:.4f} s, {run['gkeys']:.2f} Gkeys/s"
                      + ("" if run["verified"] is None else f", verified {run['verified']}"), flush=True)
    table = summarize(runs, baseline, args.keys)
    print_table(args, table, baseline)
    path = runtime.write_json(args.out, "multi_gpu_sort", {"workflow": "multi_gpu_sort", "config": vars(args),
                                                          "cupy_sort_seconds": baseline, "table": table, "runs": runs})
    print(f"results: {path}")
    plot(table, path.with_suffix(".png"))
    return 0 if ok else 1


def gpu_keys(n: int, chunk: int, seed: int):
    """``n`` random int64 keys in CuPy chunks of ``chunk``, made on the GPUs, chunk ``i`` from ``seed + i``."""
    import cupy
    import dask.array as da

    sizes = tuple(min(chunk, n - s) for s in range(0, n, chunk))
    return da.map_blocks(_block, seed, chunks=(sizes,), dtype=np.int64, meta=cupy.empty(0, np.int64))


def gpu_sorted_keys(n: int, chunk: int, seed: int):
    """``n`` sorted random int64 keys in CuPy chunks of ``chunk``: chunk ``i`` holds the ``i``-th slice of the range."""
    import cupy
    import dask.array as da

    sizes = tuple(min(chunk, n - s) for s in range(0, n, chunk))
    return da.map_blocks(_sorted_block, seed, len(sizes), chunks=(sizes,), dtype=np.int64,
                         meta=cupy.empty(0, np.int64))


def _sorted_block(seed: int, nblocks: int, block_info=None):
    import cupy

    (i,), (size,) = block_info[None]["chunk-location"], block_info[None]["chunk-shape"]
    width = 2**63 // nblocks
    low = -2**62 + i * (width // 2)
    keys = cupy.random.RandomState(seed * 100_003 + i).randint(low, low + width // 2, size=size, dtype=np.int64)
    return cupy.sort(keys)


def _block(seed: int, block_info=None):
    import cupy

    (i,), (size,) = block_info[None]["chunk-location"], block_info[None]["chunk-shape"]
    return cupy.random.RandomState(seed * 100_003 + i).randint(-2**62, 2**62, size=size, dtype=np.int64)


def sort_once(client, args: argparse.Namespace, seed: int, check: bool) -> dict:
    """One timed sort (or ``--merge``) of fresh keys already in GPU memory; checked with ``gpusort.verify`` if ``check``."""
    import dask.array as da
    from distributed import wait

    import gpusort

    chunk = -(-args.keys // args.chunks)
    if args.merge:
        half = args.keys // 2
        a, b = (gpu_sorted_keys(m, chunk, s).persist() for m, s in ((half, seed), (args.keys - half, seed + 500_000)))
        wait([a, b])
        x = da.concatenate([a, b])
    else:
        x = gpu_keys(args.keys, chunk, seed).persist()
        wait(x)
    client.run(_gpu_idle)  # a task ends when its kernels are queued: the keys' drawing must not run into the clock
    start_wall, start = time.time(), time.perf_counter()
    y = gpusort.merge(a, b) if args.merge else gpusort.sort(x)
    built = time.perf_counter() - start
    y = y.persist()
    wait(y)
    client.run(_gpu_idle)  # the clock stops once the GPUs have written the result, not once Dask holds its views
    seconds = time.perf_counter() - start
    phases = runtime.phase_seconds(client, start_wall)
    if args.timeline:
        print("    " + timeline(client, start_wall, built))
        print("    phases (ms, summed over the workers): "
              + ", ".join(f"{phase} {seconds * 1e3:.1f}" for phase, seconds in phases.items()))
    verified = bool(gpusort.verify(x, y).ok) if check else None
    # Released, not cancelled: distributed's cancel asserts on a graph where
    # a task is reached from several cancelled keys (every rank reads every rank's launch).
    del x, y
    if args.merge:
        del a, b
    _drained(client)
    return {"seconds": seconds, "gkeys": args.keys / seconds / 1e9, "phases": phases, "verified": verified}


def _gpu_idle() -> None:
    import cupy

    cupy.cuda.runtime.deviceSynchronize()


def timeline(client, start: float, built: float) -> str:
    """When each kind of task of the sort ran, in ms after ``gpusort.sort`` was called (the task stream)."""
    from dask.utils import key_split

    spans: dict[str, list[float]] = {}
    busy: dict[str, list[float]] = {}  # each task's compute seconds, by kind
    for task in client.get_task_stream(start=start):
        kind = key_split(task["key"]).split("-")[0]
        for s in task["startstops"]:
            if s["action"] == "compute":
                spans.setdefault(kind, []).extend([s["start"] - start, s["stop"] - start])
                busy.setdefault(kind, []).append(s["stop"] - s["start"])
    parts = [f"{kind} {min(t) * 1e3:.0f}-{max(t) * 1e3:.0f} ({len(busy[kind])} tasks, {sum(busy[kind]) * 1e3:.1f} ms)"
             for kind, t in sorted(spans.items(), key=lambda kv: min(kv[1]))]
    return f"timeline (ms): graph built {built * 1e3:.0f}; " + "; ".join(parts)


def _drained(client, timeout: float = 30.0) -> None:
    """Wait until the workers hold no data: the next sort starts with the memory this one used."""
    end = time.monotonic() + timeout
    while any(client.has_what().values()) and time.monotonic() < end:
        time.sleep(0.05)


def cupy_sort_seconds(n: int, repeat: int = 5) -> float:
    """Median seconds of ``cupy.sort`` of ``n`` random int64 keys on this worker's GPU, by CUDA events."""
    import cupy

    times = []
    for rep in range(repeat + 1):
        x = cupy.random.RandomState(rep).randint(-2**62, 2**62, size=n, dtype=np.int64)
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        y = cupy.sort(x)
        stop.record()
        stop.synchronize()
        if rep:  # the first compiles and sizes CuPy's pool
            times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
        del x, y
    cupy.get_default_memory_pool().free_all_blocks()
    return statistics.median(times)


def summarize(runs: list[dict], baseline: float | None, n: int) -> list[dict]:
    """Per GPU count: the first sort, the median of the rest, Gkeys/s and the speed-ups."""
    table = []
    for gpus in sorted({r["gpus"] for r in runs}):
        mine = [r for r in runs if r["gpus"] == gpus]
        warm = statistics.median(r["seconds"] for r in mine[1:]) if len(mine) > 1 else mine[0]["seconds"]
        table.append({"gpus": gpus, "first_seconds": mine[0]["seconds"], "warm_seconds": warm,
                      "gkeys": n / warm / 1e9, "exact": all(r["verified"] is not False for r in mine)})
    one = next((row["warm_seconds"] for row in table if row["gpus"] == 1), None)
    for row in table:
        row["vs_one_gpu"] = one / row["warm_seconds"] if one else None
        row["vs_cupy_sort"] = baseline / row["warm_seconds"] if baseline else None
    return table


def print_table(args: argparse.Namespace, table: list[dict], baseline: float | None) -> None:
    print(f"gpusort multi-GPU {'merge' if args.merge else 'sort'}: {args.keys} int64 keys ({args.keys * 8 / 2**30:.1f} GiB) in {args.chunks} "
          f"CuPy chunks; cupy.sort on one GPU: " + (f"{baseline:.4f} s" if baseline else "not run"))
    print(f"  {'gpus':>4}  {'first s':>8}  {'warm s':>8}  {'Gkeys/s':>8}  {'vs 1 GPU':>8}  {'vs cupy':>8}  exact")
    for row in table:
        fmt = lambda v: f"{v:.2f}x" if v else "-"  # noqa: E731
        print(f"  {row['gpus']:>4}  {row['first_seconds']:>8.4f}  {row['warm_seconds']:>8.4f}  {row['gkeys']:>8.2f}  "
              f"{fmt(row['vs_one_gpu']):>8}  {fmt(row['vs_cupy_sort']):>8}  {row['exact']}")


def plot(table: list[dict], path: Path) -> None:
    """Gkeys/s against GPUs, with perfect scaling from one GPU for reference (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot: skipped (pip install 'gpusort[bench]' for matplotlib)")
        return
    gpus = [row["gpus"] for row in table]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(gpus, [row["gkeys"] for row in table], "o-", label="gpusort")
    one = next((row["gkeys"] for row in table if row["gpus"] == 1), None)
    if one:
        ax.plot(gpus, [one * g for g in gpus], ":", color="grey", label="perfect scaling")
    ax.set_xlabel("GPUs")
    ax.set_ylabel("Gkeys/s")
    ax.set_xticks(gpus)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


if __name__ == "__main__":
    raise SystemExit(main())
