"""Sort a Zarr array disk to disk on every GPU of this machine (dask-cuda LocalCUDACluster).

``gpusort.sort_zarr(..., backend="cupy")`` on one worker per GPU: the chunks
are read from disk into host memory, sorted on the GPUs (through pinned
buffers, within ``--gpu-memory-budget`` per worker), the runs kept on disk
between the phases, and each output chunk merged on a GPU and written.  The
output is then verified (``gpusort.verify``), and a summary printed and
written as JSON under ``--out``.

    python workflows/zarr_sort_gpus.py                          # makes 2^27 random int64 keys first
    python workflows/zarr_sort_gpus.py --src keys.zarr --dst sorted.zarr --overwrite
    python workflows/zarr_sort_gpus.py --keys 2**30 --chunks 64 --protocol ucx --rmm-pool-size 16GiB

Needs CuPy, dask-cuda, Zarr and an NVIDIA GPU; exits with a clear message
where they are missing.  Exit status 0 when the output is verified, 1 when not.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

_HERE = Path(__file__).resolve().parent
for path in (_HERE, _HERE.parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from cuda_cluster import add_options, cuda_client  # noqa: E402
from out_of_core_sort import count, random_keys, write_json  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", type=Path, help="a 1-D Zarr array to sort (default: random keys, made first)")
    parser.add_argument("--dst", type=Path, help="where the sorted array goes (default: beside --src, or temporary)")
    parser.add_argument("--overwrite", action="store_true", help="replace --dst if it exists")
    parser.add_argument("--keys", type=count, default=2**27, help="random keys to make without --src (default: %(default)s)")
    parser.add_argument("--chunks", type=count, default=16, help="chunks of the random keys (default: %(default)s)")
    parser.add_argument("--descending", action="store_true", help="largest first")
    parser.add_argument("--out", type=Path, default=Path("results"), help="folder for the JSON (default: %(default)s)")
    add_options(parser, budget="4GiB")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="gpusort-zarr-gpus-") as scratch, cuda_client(args) as client:
        import gpusort
        from gpusort.verify import verify

        seconds = {}
        src = args.src
        if src is None:
            src = Path(scratch) / "keys.zarr"
            start = time.perf_counter()
            random_keys(args.keys, -(-args.keys // args.chunks), np.dtype("int64"), 0).to_zarr(str(src))
            seconds["generate"] = time.perf_counter() - start
        dst = args.dst or (src.parent / (src.stem + "-sorted.zarr") if args.src else Path(scratch) / "sorted.zarr")
        options = dict(descending=args.descending, backend="cupy", overwrite=args.overwrite)
        if "gpu_memory_budget" in inspect.signature(gpusort.sort_zarr).parameters:
            options["gpu_memory_budget"] = args.gpu_memory_budget
        else:
            print("note: this gpusort's sort_zarr takes no gpu_memory_budget; the default budget applies",
                  file=sys.stderr)
        start = time.perf_counter()
        gpusort.sort_zarr(src, dst, **options)
        seconds["sort"] = time.perf_counter() - start
        start = time.perf_counter()
        report = verify(src, dst, descending=args.descending)
        seconds["verify"] = time.perf_counter() - start
        import zarr

        n = zarr.open_array(str(src)).shape[0]
        workers = len(client.scheduler_info()["workers"])

    summary = {"workflow": "zarr_sort_gpus", "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
               "keys": n, "workers": workers, "seconds": seconds, "keys_per_second": n / seconds["sort"],
               "verified": bool(report.ok), "verify": str(report)}
    path = write_json(args.out, "zarr_sort_gpus", summary)
    print(f"gpusort zarr sort on {workers} GPU(s): {n} keys from {src} into {dst}")
    for name, s in seconds.items():
        print(f"  {name:9} {s:8.2f} s" + (f"   {n / s / 1e6:.1f} Mkeys/s" if name == "sort" else ""))
    print(f"  verified  {report}")
    print(f"results: {path}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
