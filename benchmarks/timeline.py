"""Where one sort's time goes on GPU workers: repetition by repetition, task by task.

A ``LocalCUDACluster`` of ``--gpus`` workers (UCX by default) sorts ``--n``
fresh int64 keys in ``--chunks`` CuPy chunks, made on the GPUs
(:func:`harness.gpu_keys`), ``--repeat`` times; repetition 0 runs in workers
that never sorted (its kernels loaded as they started, or not).  Each
repetition prints the graph's build, the wait for its tasks and the wait for
the GPUs (the sort's time); the first and the last also print, per task
name, the span of their starts and stops from the moment the graph was
submitted, and the phases (:func:`gpusort.runtime.phase_seconds`).  On one
GPU the last repetition's chunks are also sorted inside the worker, timed
with CUDA events: ``cupy.sort`` and ``gpusort.gpu.sort`` of their
concatenation, the peers of the same run.  Every result is verified.

bench_exchange.py gives the table; this says why the table reads as it
does (benchmarks/NOTES.md, the P2P exchange on one and two GPUs)::

    python benchmarks/timeline.py --n 2**30 --chunks 32 --gpus 1
    python benchmarks/timeline.py --n 2**31 --chunks 64 --gpus 2 --repeat 4
"""

from __future__ import annotations

import argparse
import collections
import time

import dask
from distributed import wait
from harness import gpu_keys, synchronize_workers, warm_gpu_keys

import gpusort
from gpusort import runtime


def spans(client, start: float) -> None:
    """Per task name and action: count, first start and last stop in ms after ``start``, and the summed time."""
    rows: dict = collections.defaultdict(lambda: [0, float("inf"), 0.0, 0.0])
    for task in client.get_task_stream(start=start):
        key = task["key"][0] if isinstance(task["key"], tuple) else task["key"]
        name = key.rsplit("-", 1)[0]
        for s in task["startstops"]:
            row = rows[(name, s["action"])]
            row[0] += 1
            row[1] = min(row[1], s["start"] - start)
            row[2] = max(row[2], s["stop"] - start)
            row[3] += s["stop"] - s["start"]
    for (name, action), (count, first, last, total) in sorted(rows.items(), key=lambda kv: kv[1][1]):
        print(f"   {name[:28]:28s} {action:9s} n={count:3d}  {first * 1e3:7.1f} - {last * 1e3:7.1f} ms"
              f"  sum {total * 1e3:7.1f} ms")


def tasks(client, start: float) -> None:
    """Every task after ``start``, by start: key, worker, action and its span in ms; then each worker's exchange."""
    rows = []
    for task in client.get_task_stream(start=start):
        key = task["key"] if isinstance(task["key"], str) else f"{task['key'][0].rsplit('-', 1)[0]}[{task['key'][1]}]"
        for s in task["startstops"]:
            rows.append((s["start"] - start, s["stop"] - start, key, task["worker"].rsplit(":", 1)[1], s["action"]))
    for first, last, key, worker, action in sorted(rows):
        print(f"   {key[:32]:32s} {worker:>6s} {action:9s} {first * 1e3:7.1f} - {last * 1e3:7.1f} ms")
    for worker, timed in client.run(_exchanges, start).items():
        print(f"   exchange on {worker.rsplit(':', 1)[1]}: " + ", ".join(
            f"{(s - start) * 1e3:.1f} - {(s - start + sum(d.values())) * 1e3:.1f} ms" for s, d in timed))


def _exchanges(since: float) -> list:
    from gpusort.engine import exchange

    return [(s, d) for s, d in exchange._timed if s >= since]


def kernel_seconds(*chunks) -> dict[str, float]:
    """In a worker: CUDA-event seconds (best of 3) of the concatenation, ``cupy.sort`` and ``gpu.sort`` of it."""
    import cupy

    import gpusort.gpu

    def timed(f) -> float:
        best = float("inf")
        for _ in range(3):
            a, b = cupy.cuda.Event(), cupy.cuda.Event()
            a.record()
            f()
            b.record()
            b.synchronize()
            best = min(best, cupy.cuda.get_elapsed_time(a, b) / 1e3)
        return best

    whole = cupy.concatenate(chunks)
    return {"concatenate": timed(lambda: cupy.concatenate(chunks)), "cupy.sort": timed(lambda: cupy.sort(whole)),
            "gpusort.gpu.sort": timed(lambda: gpusort.gpu.sort(whole))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--n", default="2**30", help="keys (default: %(default)s)")
    p.add_argument("--chunks", type=int, default=32, help="number of CuPy chunks (default: %(default)s)")
    p.add_argument("--gpus", type=int, default=1, help="GPU workers (default: %(default)s)")
    p.add_argument("--repeat", type=int, default=5, help="repetitions, the first in fresh workers (default: %(default)s)")
    p.add_argument("--protocol", default="ucx", help="tcp or ucx (default: %(default)s)")
    p.add_argument("--tasks", action="store_true", help="also every task of every repetition")
    args = p.parse_args(argv)
    n = runtime.count(args.n)
    chunk = -(-n // args.chunks)
    with runtime.cluster("cuda", gpus=args.gpus, threads=4, protocol=args.protocol) as client:
        warm_gpu_keys(client)
        for rep in range(args.repeat):
            x = gpu_keys(n, chunk, "int64", "uniform", seed=rep).persist()
            wait(x)
            synchronize_workers(client)
            start, clock = time.time(), time.perf_counter()
            y = gpusort.sort(x, chunks=chunk)
            built = time.perf_counter() - clock
            y = y.persist()
            wait(y)
            waited = time.perf_counter() - clock
            synchronize_workers(client)
            synced = time.perf_counter() - clock
            print(f"rep {rep}: graph {built * 1e3:.1f} ms, tasks done {waited * 1e3:.1f} ms, "
                  f"GPUs done {synced * 1e3:.1f} ms ({n / synced / 1e9:.2f} Gkeys/s)", flush=True)
            if rep in (0, args.repeat - 1) or args.tasks:
                spans(client, start)
                if args.tasks:
                    tasks(client, start)
                print("   phases:", {k: round(v, 4) for k, v in runtime.phase_seconds(client, start).items()})
            report = gpusort.verify(x, y)
            assert report.ok, str(report)
            if rep == args.repeat - 1 and args.gpus == 1:
                peers = dask.delayed(kernel_seconds)(*[x.blocks[i] for i in range(x.numblocks[0])]).compute()
                print("in the worker, CUDA events:", {k: round(v, 4) for k, v in peers.items()})
            del x, y
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
