"""gpusort's main job: sort a Zarr array on disk, prove the result, report.

With no arguments it runs on an embedded default: 2^25 random int64 keys
(256 MiB) in 32 chunks written to a Zarr store in a temporary folder, sorted
disk to disk with ``gpusort.sort_zarr`` (its runs in memory where they fit,
else on disk: ``--runs``), checked with ``gpusort.verify``, timed, printed, and saved as
JSON under ``--out``.  It computes where ``--cluster`` says
(``gpusort.runtime.cluster``; ``auto``: a LocalCUDACluster, one worker per
GPU, where CuPy, dask-cuda and a GPU are present, else a LocalCluster), with
``--backend cupy`` by default where a GPU is seen.  ``--src`` sorts an
existing array instead.

    python workflows/zarr_sort.py
    python workflows/zarr_sort.py --keys 1e9 --chunks 256 --workdir /scratch
    python workflows/zarr_sort.py --src keys.zarr --dst sorted.zarr --overwrite --gpu-memory-budget 4GiB
    python workflows/zarr_sort.py --keys 2**30 --chunks 64 --protocol ucx --rmm-pool-size 16GiB

Exit status 0 when the output is verified to be the input sorted, 1 when
not, 2 for a cluster this machine cannot start (the message says why).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import dask.array as da
import numpy as np

# Run from a source checkout, the job uses that checkout's gpusort.
_CHECKOUT = Path(__file__).resolve().parent.parent
if (_CHECKOUT / "gpusort" / "__init__.py").is_file() and str(_CHECKOUT) not in sys.path:
    sys.path.insert(0, str(_CHECKOUT))

import gpusort  # noqa: E402
from gpusort import runtime, zarr_io  # noqa: E402
from gpusort.verification import verify  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--src", type=Path, help="a 1-D Zarr array to sort (default: random keys, made first)")
    parser.add_argument("--dst", type=Path,
                        help="where the sorted array goes (default: beside --src as NAME-sorted.zarr, "
                             "else sorted.zarr in the work folder)")
    parser.add_argument("--overwrite", action="store_true", help="replace --dst if it exists")
    parser.add_argument("--keys", type=runtime.count, default=2**25,
                        help="random keys to make without --src, e.g. 33554432 or 1e9 (default: %(default)s)")
    parser.add_argument("--chunks", type=runtime.count, default=32,
                        help="number of chunks of the random keys; fewer where the keys do not fill them "
                             "(default: %(default)s)")
    parser.add_argument("--dtype", default="int64", help="random key dtype: int*, uint*, float* (default: %(default)s)")
    parser.add_argument("--descending", action="store_true", help="sort largest first")
    parser.add_argument("--backend", choices=("numpy", "cupy"), default=runtime.default_backend(),
                        help="where runs are sorted and merged (default here: %(default)s)")
    parser.add_argument("--runs", choices=("auto", "memory", "disk"), default="auto",
                        help="where the sorted runs wait between reading and writing (default: %(default)s, "
                             "memory where they fit)")
    parser.add_argument("--gpu-memory-budget", type=runtime.size,
                        help="with --backend cupy: GPU memory per worker, e.g. 4GiB (default: gpusort's)")
    parser.add_argument("--workdir", type=Path,
                        help="folder for the random keys and their sorted copy, kept afterwards "
                             "(default: a temporary folder, removed)")
    parser.add_argument("--out", type=Path, default=Path("results"),
                        help="folder for the JSON summary (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the keys (default: %(default)s)")
    runtime.add_options(parser, gpu=True)
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
        src = args.src or workdir / "keys.zarr"
        dst = args.dst or (src.parent / f"{src.stem}-sorted.zarr" if args.src else workdir / "sorted.zarr")
        options = dict(descending=args.descending, backend=args.backend, overwrite=args.overwrite or args.src is args.dst is None,
                       gpu_memory_budget=args.gpu_memory_budget, runs=args.runs)
        with runtime.from_options(args, parser, codecs=True) as client:
            workers = len(client.scheduler_info()["workers"]) if client is not None else 0
            threads = sum(client.nthreads().values()) if client is not None else None
            seconds = {}
            if args.src is None:
                start = time.perf_counter()
                chunk = -(-args.keys // args.chunks)
                random_keys(args.keys, chunk, dtype, args.seed).to_zarr(str(src), overwrite=True)
                seconds["generate"] = time.perf_counter() - start
            nbytes = zarr_io.as_dask_array(src, "src").nbytes
            in_memory = zarr_io.runs_in_memory(nbytes, args.runs)  # as sort_zarr decides
            start = time.perf_counter()
            with runtime.phase_timer(client) as phases:
                gpusort.sort_zarr(src, dst, **options)
            seconds["sort"] = time.perf_counter() - start
            start = time.perf_counter()
            report = verify(src, dst, descending=args.descending)
            seconds["verify"] = time.perf_counter() - start
        n, key_dtype, nchunks = report.n_dst, *_shape(src)
        floor = disk_floor(src, dst, passes=2 if in_memory else 4)


    summary = {
        "workflow": "zarr_sort", "config": vars(args), "src": src, "dst": dst,
        "keys": n, "dtype": key_dtype, "chunks": nchunks, "bytes": n * np.dtype(key_dtype).itemsize,
        "workers": workers, "threads": threads, "runs": "memory" if in_memory else "disk",
        "seconds": seconds, "keys_per_second": n / seconds["sort"],
        "phase_seconds": phases, "disk": floor, "fraction_of_disk_floor": floor["floor_seconds"] / seconds["sort"],
        "verified": report.ok, "verify": str(report),
    }
    path = runtime.write_json(args.out, "zarr_sort", summary)

    print(f"gpusort zarr_sort: {n} {key_dtype} keys ({summary['bytes'] / 2**20:.0f} MiB) in {nchunks} chunks, "
          f"{args.backend} backend, runs {'in memory' if in_memory else 'on disk'}, "
          f"cluster {args.cluster} ({workers} workers, {threads} threads)")
    for name, s in seconds.items():
        print(f"  {name:9} {s:7.2f} s" + (f"   {n / s / 1e6:.1f} Mkeys/s" if name == "sort" else "")
              + ("  (descending)" if name == "sort" and args.descending else ""))
    print("  phases    " + ", ".join(f"{k} {v:.2f}" for k, v in phases.items()) + " (task seconds)")
    print(f"  disk      write {floor['write_bytes_per_second'] / 1e9:.2f} GB/s, read "
          f"{floor['read_bytes_per_second'] / 1e9:.2f} GB/s{' (page cache)' if floor['read_from_cache'] else ''}: "
          f"{floor['passes']} passes over {floor['stored_bytes'] / 2**20:.0f} MiB take {floor['floor_seconds']:.2f} s, "
          f"the sort ran at {summary['fraction_of_disk_floor']:.0%} of that floor")
    print(f"  verified  {report}")
    print(f"results: {path}")
    return 0 if report.ok else 1


def disk_floor(src: Path, dst: Path, passes: int) -> dict:
    """The disk's speed under ``dst``, measured now, and the time of a disk-to-disk sort's ``passes``.

    A sort reads the input and writes the output; an external sort also
    writes its runs and reads them back (four passes).  Each pass moves
    about the input's stored bytes, half of them reads.
    """
    stored = sum(f.stat().st_size for f in Path(src).rglob("*") if f.is_file())
    speed = runtime.disk_speed(Path(dst).parent, min(2**30, max(2**24, stored)))
    floor = passes / 2 * (stored / speed["read_bytes_per_second"] + stored / speed["write_bytes_per_second"])
    return {**speed, "passes": passes, "stored_bytes": stored, "floor_seconds": floor}


def _shape(path: Path) -> tuple[str, int]:
    """(dtype, number of chunks) of the Zarr array at ``path``."""
    import zarr

    z = zarr.open_array(str(path), mode="r")
    return str(z.dtype), -(-z.shape[0] // z.chunks[0]) if z.shape[0] else 0


def random_keys(n: int, chunk: int, dtype: np.dtype, seed: int) -> da.Array:
    """``n`` random keys of ``dtype`` over its whole range (floats: standard normal)."""
    rng = da.random.default_rng(seed)
    if dtype.kind == "f":
        return rng.standard_normal(n, chunks=chunk).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, chunks=chunk, dtype=dtype, endpoint=True)


if __name__ == "__main__":
    raise SystemExit(main())
