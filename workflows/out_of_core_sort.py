"""Sort host-resident keys many times larger than the GPU memory you give gpusort, on 1, 2, ... GPUs.

Random keys are made in host memory on the workers (NumPy chunks, persisted),
then sorted with ``backend="cupy"`` and a per-worker ``--gpu-memory-budget``:
every chunk goes up to the GPU through a few pinned slots, comes back as a
sorted run in ordinary host memory, and each output chunk is merged on the GPU from
exact slices of the runs -- in pieces that fit the budget when a chunk or a
merge does not.  The result is checked (``gpusort.verify``: sorted, and a
permutation of the input by count and checksum), and the summary -- keys/s,
time by phase, the *measured* peak GPU memory and pinned host memory of each worker, bytes moved
between workers and, with ``--gpu-counts``, the speed-up over one GPU -- is
printed and written as JSON under ``--out``.

    python workflows/out_of_core_sort.py                                 # 2^28 int64 (2 GiB), 512 MiB budget
    python workflows/out_of_core_sort.py --keys 2**31 --chunks 64 --gpu-memory-budget 2GiB
    python workflows/out_of_core_sort.py --keys 2**31 --chunks 32 --gpu-memory-budget 2GiB --run-pool-bytes 17GiB
    python workflows/out_of_core_sort.py --gpu-counts 1,2,4 --protocol ucx --rmm-pool-size 8GiB
    python workflows/out_of_core_sort.py --cluster local --backend numpy  # the same job on CPUs

The cluster is ``gpusort.runtime.cluster`` (``--cluster auto``: a
LocalCUDACluster where CuPy, dask-cuda and a GPU are present).  Exit status 0
when every output is verified, 1 when not, 2 for a cluster this machine
cannot start (the message says why).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import dask
import numpy as np

_HERE = Path(__file__).resolve().parent
for path in (_HERE, _HERE.parent):  # run from a checkout: its gpusort and zarr_sort.py
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from zarr_sort import random_keys  # noqa: E402

from gpusort import runtime  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--keys", type=runtime.count, default=2**28,
                        help="number of keys, e.g. 268435456, 1e9 or 2**31 (default: %(default)s)")
    parser.add_argument("--chunks", type=runtime.count, default=16, help="number of input chunks (default: %(default)s)")
    parser.add_argument("--dtype", default="int64", help="key dtype: int*, uint*, float* (default: %(default)s)")
    parser.add_argument("--descending", action="store_true", help="largest first")
    parser.add_argument("--backend", choices=("numpy", "cupy"), default=runtime.default_backend(),
                        help="where runs are sorted and merged (default here: %(default)s)")
    parser.add_argument("--gpu-memory-budget", type=runtime.size, default="512MiB",
                        help="with --backend cupy: GPU memory per worker, e.g. 2GiB (default: 512MiB)")
    parser.add_argument("--run-pool-bytes", type=runtime.size, default=0,
                        help="with --backend cupy: pinned host memory per worker and GPU that holds runs, then "
                             "output chunks while it has room (dask config gpusort.run-pool-bytes), e.g. 17GiB "
                             "for the runs of 2**31 int64, 34GiB for runs and output (default: none)")
    parser.add_argument("--gpu-counts", help="run once per GPU count, e.g. 1,2,4, for the speed-up (default: once)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the keys (default: %(default)s)")
    parser.add_argument("--repeat", type=runtime.count, default=1,
                        help="sorts per cluster, each of fresh keys: the first is cold (fresh worker "
                             "processes), the rest warm (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=Path("results"), help="folder for the JSON (default: %(default)s)")
    runtime.add_options(parser, gpu=True)
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.gpu_counts.split(",")] if args.gpu_counts else [None]
    runs = []
    for gpus in counts:
        with dask.config.set({"gpusort.run-pool-bytes": args.run_pool_bytes}), \
                runtime.from_options(args, parser, **({} if gpus is None else {"gpus": gpus})) as client:
            for rep in range(args.repeat):
                runs.append(sort_once(client, args, args.seed + rep) | {"gpus": gpus, "cold": rep == 0})
    one = next((r["seconds"] for r in runs if r["gpus"] == 1 and r["cold"]), None)
    for r in runs:
        r["speedup_over_one_gpu"] = one / r["seconds"] if one else None
    path = runtime.write_json(args.out, "out_of_core_sort",
                              {"workflow": "out_of_core_sort", "config": vars(args), "runs": runs})
    print_summary(args, runs)
    print(f"results: {path}")
    return 0 if all(r["verified"] for r in runs) else 1


def sort_once(client, args: argparse.Namespace, seed: int) -> dict:
    """Make, sort and verify ``args.keys`` random host keys on ``client``'s workers; the measurements."""
    from distributed import wait

    import gpusort
    from gpusort.verification import verify

    on_gpu = args.backend == "cupy"
    if on_gpu:
        from gpusort.backends.cupy import memory_stats
    dtype = np.dtype(args.dtype)
    x = random_keys(args.keys, -(-args.keys // args.chunks), dtype, seed).persist()
    wait(x)
    if on_gpu:
        client.run(memory_stats, True)
    moved_before = runtime.bytes_moved(client)
    start_wall, start = time.time(), time.perf_counter()
    y = gpusort.sort(x, descending=args.descending, backend=args.backend,
                     gpu_memory_budget=args.gpu_memory_budget if on_gpu else None).persist()
    wait(y)
    seconds = time.perf_counter() - start
    peaks = {w: s for w, s in client.run(memory_stats).items() if s} if on_gpu else {}
    measured = {"seconds": seconds, "keys_per_second": args.keys / seconds,
                "phase_seconds": runtime.phase_seconds(client, start_wall),
                "bytes_between_workers": runtime.bytes_moved(client) - moved_before}
    check_start = time.perf_counter()
    report = verify(x, y, descending=args.descending)
    return {
        "keys": args.keys, "dtype": str(dtype), "chunks": args.chunks, "bytes": args.keys * dtype.itemsize,
        "workers": len(client.scheduler_info()["workers"]), **measured,
        "peak_gpu_bytes": {w: s["peak_bytes"] for w, s in peaks.items()},
        "pinned_bytes": {w: s["pinned_bytes"] for w, s in peaks.items()},
        "budget_bytes": {w: s["budget_bytes"] for w, s in peaks.items()},
        "flushes": sum(s["flushes"] for s in peaks.values()), "retries": sum(s["retries"] for s in peaks.values()),
        "verify_seconds": time.perf_counter() - check_start, "verified": bool(report.ok), "verify": str(report),
    }


def print_summary(args: argparse.Namespace, runs: list[dict]) -> None:
    gib = args.keys * np.dtype(args.dtype).itemsize / 2**30
    budget = f", budget {args.gpu_memory_budget / 2**20:.0f} MiB per worker" if args.backend == "cupy" else ""
    print(f"gpusort out-of-core sort: {args.keys} {args.dtype} keys ({gib:.2f} GiB) in {args.chunks} host chunks, "
          f"{args.backend} backend{budget}, cluster {args.cluster}")
    print(f"  {'gpus':>4}  {'start':>5}  {'workers':>7}  {'seconds':>8}  {'Gkeys/s':>8}  {'speed-up':>8}  "
          f"{'peak GPU MiB':>12}  {'pinned MiB':>10}  {'moved MiB':>10}  verified")
    for r in runs:
        peak = max(r["peak_gpu_bytes"].values(), default=0) / 2**20
        pinned = max(r["pinned_bytes"].values(), default=0) / 2**20
        speedup = f"{r['speedup_over_one_gpu']:.2f}x" if r["speedup_over_one_gpu"] else "-"
        print(f"  {r['gpus'] or 'all':>4}  {'cold' if r['cold'] else 'warm':>5}  {r['workers']:>7}  {r['seconds']:>8.3f}  "
              f"{r['keys_per_second'] / 1e9:>8.3f}  {speedup:>8}  {peak:>12.1f}  {pinned:>10.1f}  "
              f"{r['bytes_between_workers'] / 2**20:>10.1f}  {r['verified']}")
        print("        phases " + ", ".join(f"{k} {v:.2f}" for k, v in r["phase_seconds"].items())
              + f" (task seconds); GPU pool flushes {r['flushes']}, steps run again alone {r['retries']}; "
              f"verify {r['verify_seconds']:.2f} s: {r['verify']}")


if __name__ == "__main__":
    raise SystemExit(main())
