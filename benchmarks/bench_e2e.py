"""End to end in memory: gpusort vs dask.dataframe sort_values on one cluster, np.sort on one core.

Both Dask sorts get the same keys, already persisted on the same cluster, and
leave their result persisted there (gathering it is not part of a sort).
gpusort's time by phase comes from the scheduler's task stream.  With
--backend cupy the GPU peers (cupy.sort, cupy.argsort, torch.sort) run on
this process's GPU on the same number of keys, and the pinned host-to-device
bandwidth is measured: sorting host-resident keys on the GPU moves them
across the host link twice each way, so bandwidth / (2 x key bytes) keys/s
is the floor that `plot.py` compares gpusort[cupy] with.
"""

from __future__ import annotations

import numpy as np
from harness import Case, cluster, dataframe_peer, gpusort_on_cluster, keys_between, parse_args, persisted_keys, run

from gpusort import runtime


def main(argv=None) -> int:
    def options(p):
        p.add_argument("--n", type=int, default=2**24, help="number of keys (default: %(default)s)")
        p.add_argument("--chunks", type=int, default=16, help="number of input chunks (default: %(default)s)")
        p.add_argument("--dtype", default="int64", help="key dtype (default: %(default)s)")
        p.add_argument("--distribution", default="uniform", help="key distribution (default: %(default)s)")
        p.add_argument("--backend", choices=("numpy", "cupy"), default="numpy")
        p.set_defaults(repeat=3)

    args = parse_args(__doc__, argv, options, cluster=True)
    params = {"n": args.n, "dtype": args.dtype, "distribution": args.distribution, "chunks": args.chunks}
    chunk = -(-args.n // args.chunks)
    with cluster(args) as client:

        def on_cluster(rep):
            return persisted_keys(args.n, chunk, args.dtype, args.distribution, seed=rep)

        link = {"host_link_bytes_per_second": host_link_bandwidth()} if args.backend == "cupy" else {}

        def check_gpusort(x, out):
            y, start = out
            phases = runtime.phase_seconds(client, start)  # before the check adds tasks of its own
            np.testing.assert_array_equal(y.compute(), np.sort(x.compute()))
            return {"phases": phases} | link

        cases = [
            Case(f"gpusort[{args.backend}]", on_cluster, gpusort_on_cluster(backend=args.backend), check_gpusort, args.n, params),
            dataframe_peer("dask.dataframe", on_cluster, args.n, params),
            Case("np.sort", lambda rep: keys_between(0, args.n, args.n, args.dtype, args.distribution, rep),
                 np.sort, _check_sorted, args.n, params),
        ]
        cases += [Case(name, _on_gpu(args), fn, check, args.n, params, device="gpu", requires=req)
                  for name, fn, check, req in _gpu_peers()]
        return run("e2e", args, cases, baseline="dask.dataframe")


def host_link_bandwidth(nbytes: int = 2**28) -> float:
    """Pinned host-to-device copy bandwidth of this process's GPU, bytes/s (median of 5)."""
    import cupy

    host = np.frombuffer(cupy.cuda.alloc_pinned_memory(nbytes), np.uint8, nbytes)
    device = cupy.empty(nbytes, np.uint8)
    seconds = []
    for _ in range(5):
        begin, end = cupy.cuda.Event(), cupy.cuda.Event()
        begin.record()
        device.set(host)
        end.record()
        end.synchronize()
        seconds.append(cupy.cuda.get_elapsed_time(begin, end) / 1e3)
    return nbytes / float(np.median(seconds))


def _check_sorted(x, y):
    np.testing.assert_array_equal(y, np.sort(x))


def _on_gpu(args):
    def setup(rep):
        import cupy

        return cupy.asarray(keys_between(0, args.n, args.n, args.dtype, args.distribution, rep))

    return setup


def _gpu_peers():
    """(name, run, check, requires) of the single-GPU sorts gpusort is measured against."""

    def cupy_sort(x):
        import cupy

        return cupy.sort(x)

    def cupy_argsort(x):
        import cupy

        return cupy.argsort(x)

    def torch_sort(x):
        import torch

        return torch.sort(torch.as_tensor(x, device="cuda")).values

    def check_keys(x, y):
        import cupy

        np.testing.assert_array_equal(cupy.asnumpy(cupy.asarray(y)), np.sort(cupy.asnumpy(x)))

    def check_positions(x, i):
        import cupy

        np.testing.assert_array_equal(cupy.asnumpy(x[i]), np.sort(cupy.asnumpy(x)))

    return [("cupy.sort", cupy_sort, check_keys, ("cupy",)),
            ("cupy.argsort", cupy_argsort, check_positions, ("cupy",)),
            ("torch.sort", torch_sort, check_keys, ("cupy", "torch"))]


if __name__ == "__main__":
    raise SystemExit(main())
