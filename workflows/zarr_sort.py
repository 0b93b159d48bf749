"""gpusort's main job: sort a Zarr array on disk, prove the result, report.

With no arguments it runs on an embedded default: a LocalCluster started
here, 2^25 random int64 keys (256 MiB) in 32 chunks written to a Zarr store
in a temporary folder, sorted disk to disk with ``gpusort.sort_zarr`` (runs
kept on disk between the phases), checked with ``gpusort.verify.verify``,
timed, printed, and saved as JSON under ``--out``.

    python workflows/zarr_sort.py
    python workflows/zarr_sort.py --keys 1e9 --chunks 256 --cluster cuda --backend cupy --workdir /scratch

Exit status 0 when the output is verified to be the input sorted, 1 when not.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import dask.array as da
import numpy as np

# Run from a source checkout, the job uses that checkout's gpusort.
_CHECKOUT = Path(__file__).resolve().parent.parent
if (_CHECKOUT / "gpusort" / "__init__.py").is_file() and str(_CHECKOUT) not in sys.path:
    sys.path.insert(0, str(_CHECKOUT))

import gpusort
from gpusort.cli import count, default_backend, environment, scheduler
from gpusort.verify import verify


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=count, default=2**25,
                        help="number of keys, e.g. 33554432 or 1e9 (default: %(default)s)")
    parser.add_argument("--chunks", type=count, default=32,
                        help="number of chunks; fewer where the keys do not fill them (default: %(default)s)")
    parser.add_argument("--dtype", default="int64", help="key dtype: int*, uint*, float* (default: %(default)s)")
    parser.add_argument("--descending", action="store_true", help="sort largest first")
    parser.add_argument("--backend", choices=("numpy", "cupy"), default=default_backend(),
                        help="where runs are sorted and merged (default here: %(default)s)")
    parser.add_argument("--cluster", default="local", metavar="local|cuda|threads|ADDRESS",
                        help="as for `gpusort sort` (default: %(default)s)")
    parser.add_argument("--workdir", type=Path,
                        help="folder for the Zarr stores, kept afterwards (default: a temporary folder, removed)")
    parser.add_argument("--out", type=Path, default=Path("results"),
                        help="folder for the JSON summary (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the keys (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        dtype = np.dtype(args.dtype)
    except TypeError:
        parser.error(f"--dtype {args.dtype}: not a NumPy dtype")
    if dtype.kind not in "iuf":
        parser.error(f"--dtype {args.dtype}: choose an int, uint or float dtype for random keys")

    with tempfile.TemporaryDirectory(prefix="gpusort-zarr-sort-") as scratch:
        workdir = args.workdir or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        src, dst = workdir / "keys.zarr", workdir / "sorted.zarr"
        chunk = -(-args.keys // args.chunks)
        nchunks = -(-args.keys // chunk)  # 10 keys in 6 chunks of 2 are 5 chunks
        with scheduler(args.cluster) as client:
            workers = len(client.scheduler_info()["workers"]) if client is not None else 0
            seconds = {}
            start = time.perf_counter()
            random_keys(args.keys, chunk, dtype, args.seed).to_zarr(str(src), overwrite=True)
            seconds["generate"] = time.perf_counter() - start
            start = time.perf_counter()
            gpusort.sort_zarr(src, dst, descending=args.descending, backend=args.backend, overwrite=True)
            seconds["sort"] = time.perf_counter() - start
            start = time.perf_counter()
            report = verify(src, dst, descending=args.descending)
            seconds["verify"] = time.perf_counter() - start

    summary = {
        "workflow": "zarr_sort",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "keys": args.keys, "dtype": str(dtype), "chunks": nchunks, "bytes": args.keys * dtype.itemsize,
        "workers": workers, "seconds": seconds, "keys_per_second": args.keys / seconds["sort"],
        "verified": report.ok, "verify": str(report),
        **environment(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"zarr_sort-{datetime.now():%Y%m%d-%H%M%S}-{time.time_ns() % 10**6:06d}.json"
    path.write_text(json.dumps(summary, indent=1) + "\n")

    mib = args.keys * dtype.itemsize / 2**20
    print(f"gpusort zarr_sort: {args.keys} {dtype} keys ({mib:.0f} MiB) in {nchunks} chunks, "
          f"{args.backend} backend, cluster {args.cluster} ({workers} workers)")
    print(f"  generate  {seconds['generate']:7.2f} s")
    print(f"  sort      {seconds['sort']:7.2f} s   {args.keys / seconds['sort'] / 1e6:.1f} Mkeys/s"
          f"{'  (descending)' if args.descending else ''}")
    print(f"  verify    {seconds['verify']:7.2f} s   {report}")
    print(f"results: {path}")
    return 0 if report.ok else 1


def random_keys(n: int, chunk: int, dtype: np.dtype, seed: int) -> da.Array:
    """``n`` random keys of ``dtype`` over its whole range (floats: standard normal)."""
    rng = da.random.default_rng(seed)
    if dtype.kind == "f":
        return rng.standard_normal(n, chunks=chunk).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, chunks=chunk, dtype=dtype, endpoint=True)


if __name__ == "__main__":
    raise SystemExit(main())
