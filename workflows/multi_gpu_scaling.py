"""Multi-GPU scaling: the same out-of-core sort on 1, 2, ... GPUs of this machine.

For every GPU count a fresh LocalCUDACluster (one worker per GPU) makes the
same random host keys, sorts them with ``backend="cupy"`` within the
per-worker ``--gpu-memory-budget``, verifies the result, and records the
time, the speed-up over one GPU, the time by phase, each worker's measured
peak GPU memory and the bytes moved between workers.  A table is printed and
the whole is written as JSON under ``--out``.

    python workflows/multi_gpu_scaling.py                                # all GPUs, 2^28 int64
    python workflows/multi_gpu_scaling.py --keys 2**31 --chunks 64 --gpu-counts 1,2
    python workflows/multi_gpu_scaling.py --protocol ucx                 # NVLink via distributed-ucxx

Needs CuPy, dask-cuda and NVIDIA GPUs; exits with a clear message where they
are missing.  Exit status 0 when every output is verified, 1 when not.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))

from cuda_cluster import add_options, cuda_client, require_gpu_stack  # noqa: E402
from out_of_core_sort import count, sort_once, write_json  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=count, default=2**28, help="number of keys (default: %(default)s)")
    parser.add_argument("--chunks", type=count, default=32, help="number of input chunks (default: %(default)s)")
    parser.add_argument("--dtype", default="int64", help="key dtype (default: %(default)s)")
    parser.add_argument("--gpu-counts", default=None,
                        help="GPU counts to run, e.g. 1,2,4 (default: 1 and every power of two up to all)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the keys (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=Path("results"), help="folder for the JSON (default: %(default)s)")
    add_options(parser, budget="2GiB")
    args = parser.parse_args(argv)
    require_gpu_stack(args.protocol)
    import cupy

    available = cupy.cuda.runtime.getDeviceCount()
    counts = ([int(c) for c in args.gpu_counts.split(",")] if args.gpu_counts
              else sorted({1, available} | {2**i for i in range(available.bit_length()) if 2**i <= available}))
    if max(counts) > available:
        parser.error(f"--gpu-counts {args.gpu_counts}: this machine has {available} GPU(s)")

    runs = []
    for gpus in counts:
        with cuda_client(args, gpus=str(gpus)) as client:
            runs.append(sort_once(client, args.keys, args.chunks, np.dtype(args.dtype),
                                  args.gpu_memory_budget, seed=args.seed) | {"gpus": gpus})
    one = next((r["seconds"] for r in runs if r["gpus"] == 1), None)
    for r in runs:
        r["speedup_over_one_gpu"] = one / r["seconds"] if one else None
    summary = {"workflow": "multi_gpu_scaling",
               "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
               "runs": runs}
    path = write_json(args.out, "multi_gpu_scaling", summary)

    print(f"gpusort multi-GPU scaling: {args.keys} {args.dtype} keys in {args.chunks} host chunks, "
          f"budget {args.gpu_memory_budget} per GPU, protocol {args.protocol}")
    print(f"  {'gpus':>4}  {'seconds':>8}  {'Gkeys/s':>8}  {'speed-up':>8}  {'peak GPU MiB':>12}  "
          f"{'moved MiB':>10}  verified")
    for r in runs:
        peak = max(r["peak_gpu_bytes"].values(), default=0) / 2**20
        speedup = f"{r['speedup_over_one_gpu']:.2f}x" if r["speedup_over_one_gpu"] else "-"
        print(f"  {r['gpus']:>4}  {r['seconds']:>8.3f}  {r['keys_per_second'] / 1e9:>8.3f}  {speedup:>8}  "
              f"{peak:>12.1f}  {r['bytes_between_workers'] / 2**20:>10.1f}  {r['verified']}")
    print(f"results: {path}")
    return 0 if all(r["verified"] for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
