"""Sort host-resident keys many times larger than the GPU memory you give gpusort.

Random keys are made in host memory on the workers (NumPy chunks, persisted),
then sorted with ``backend="cupy"`` and a per-worker ``--gpu-memory-budget``:
every chunk goes up to the GPU through pinned buffers, comes back as a sorted
run in pinned host memory, and each output chunk is merged on the GPU from
exact slices of the runs -- in pieces that fit the budget when a chunk or a
merge does not.  The result is checked (``gpusort.verify``: sorted, and a
permutation of the input by count and checksum), and the summary -- keys/s,
time by phase, the *measured* peak GPU memory of each worker, bytes moved
between workers -- is printed and written as JSON under ``--out``.

    python workflows/out_of_core_sort.py                                 # 2^28 int64 (2 GiB), 512 MiB budget
    python workflows/out_of_core_sort.py --keys 2**31 --chunks 64 --gpu-memory-budget 2GiB
    python workflows/out_of_core_sort.py --gpus 0,1 --protocol ucx --rmm-pool-size 8GiB

Needs CuPy, dask-cuda and an NVIDIA GPU; exits with a clear message where
they are missing.  Exit status 0 when the output is verified, 1 when not.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

_HERE = Path(__file__).resolve().parent
_CHECKOUT = _HERE.parent
for path in (_HERE, _CHECKOUT):  # run from a checkout: its gpusort and cuda_cluster.py
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from cuda_cluster import add_options, cuda_client  # noqa: E402

from gpusort.cli import count  # noqa: E402

PHASES = ("runs", "samples", "plan", "windows", "splits", "slice", "merge")


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=count, default=2**28,
                        help="number of keys, e.g. 268435456, 1e9 or 2**31 (default: %(default)s)")
    parser.add_argument("--chunks", type=count, default=16, help="number of input chunks (default: %(default)s)")
    parser.add_argument("--dtype", default="int64", help="key dtype: int*, uint*, float* (default: %(default)s)")
    parser.add_argument("--descending", action="store_true", help="largest first")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the keys (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=Path("results"), help="folder for the JSON (default: %(default)s)")
    add_options(parser, budget="512MiB")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    dtype = np.dtype(args.dtype)
    with cuda_client(args) as client:
        result = sort_once(client, args.keys, args.chunks, dtype, args.gpu_memory_budget,
                           args.descending, args.seed)
    summary = {"workflow": "out_of_core_sort",
               "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}, **result}
    path = write_json(args.out, "out_of_core_sort", summary)
    print_summary(summary)
    print(f"results: {path}")
    return 0 if result["verified"] else 1


def sort_once(client, n: int, chunks: int, dtype: np.dtype, budget, descending: bool = False,
              seed: int = 0) -> dict:
    """Make, sort and verify ``n`` random host keys on ``client``'s GPU workers; the measurements."""
    from distributed import wait

    import gpusort
    from gpusort.backends.cupy import memory_stats
    from gpusort.verify import verify

    workers = sorted(client.scheduler_info()["workers"])
    x = random_keys(n, -(-n // chunks), dtype, seed).persist()
    wait(x)
    client.run(memory_stats, True)
    moved_before = _bytes_received(client)
    start_wall = time.time()
    start = time.perf_counter()
    y = gpusort.sort(x, descending=descending, backend="cupy", gpu_memory_budget=budget).persist()
    wait(y)
    seconds = time.perf_counter() - start
    phases = _phases(client, start_wall)
    peaks = {w: s for w, s in client.run(memory_stats).items() if s}
    moved = _bytes_received(client) - moved_before
    check_start = time.perf_counter()
    report = verify(x, y, descending=descending)
    return {
        "keys": n, "dtype": str(dtype), "chunks": chunks, "bytes": n * dtype.itemsize,
        "workers": len(workers), "gpu_memory_budget": budget,
        "seconds": seconds, "keys_per_second": n / seconds,
        "phase_seconds": phases,
        "peak_gpu_bytes": {w: s["peak_bytes"] for w, s in peaks.items()},
        "budget_bytes": {w: s["budget_bytes"] for w, s in peaks.items()},
        "bytes_between_workers": moved,
        "verify_seconds": time.perf_counter() - check_start,
        "verified": bool(report.ok), "verify": str(report),
    }


def random_keys(n: int, chunk: int, dtype: np.dtype, seed: int):
    """``n`` random host keys of ``dtype`` over its range (floats: standard normal), NumPy chunks."""
    import dask.array as da

    rng = da.random.default_rng(seed)
    if dtype.kind == "f":
        return rng.standard_normal(n, chunks=chunk).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, chunks=chunk, dtype=dtype, endpoint=True)


def _bytes_received(client) -> int:
    """Bytes all workers have received from other workers so far."""

    def received(dask_worker) -> int:
        return int(sum(t.get("total", 0) for t in dask_worker.transfer_incoming_log))

    return sum(client.run(received).values())


def _phases(client, since: float) -> dict[str, float]:
    """Task seconds summed per phase (task-name prefix) since ``since``."""
    from dask.utils import key_split

    out: dict[str, float] = {}
    for task in client.get_task_stream(start=since):
        prefix = key_split(task["key"]).split("-")[0]
        if prefix in PHASES:
            out[prefix] = out.get(prefix, 0.0) + sum(
                s["stop"] - s["start"] for s in task["startstops"] if s["action"] == "compute")
    return out


def write_json(folder: Path, name: str, document: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{datetime.now():%Y%m%d-%H%M%S}-{time.time_ns() % 10**6:06d}.json"
    path.write_text(json.dumps(document, indent=1, default=str) + "\n")
    return path


def print_summary(s: dict) -> None:
    gib = s["bytes"] / 2**30
    print(f"gpusort out-of-core sort: {s['keys']} {s['dtype']} keys ({gib:.2f} GiB) in {s['chunks']} host chunks, "
          f"{s['workers']} GPU worker(s), budget {s['gpu_memory_budget']} per worker")
    print(f"  sort     {s['seconds']:8.3f} s   {s['keys_per_second'] / 1e9:.3f} Gkeys/s")
    print("  phases   " + ", ".join(f"{k} {v:.2f}" for k, v in s["phase_seconds"].items()) + "  (task seconds)")
    for worker, peak in s["peak_gpu_bytes"].items():
        print(f"  peak GPU {peak / 2**20:10.1f} MiB measured (budget {s['budget_bytes'][worker] / 2**20:.0f} MiB)"
              f"  {worker}")
    print(f"  moved    {s['bytes_between_workers'] / 2**20:10.1f} MiB between workers")
    print(f"  verify   {s['verify_seconds']:8.3f} s   {s['verify']}")


if __name__ == "__main__":
    raise SystemExit(main())
