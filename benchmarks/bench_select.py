"""Around the sort: gpusort.topk, unique and searchsorted against a full sort and Dask's own, one cluster.

Cases, every one on the same keys (``--n`` of ``--dtype`` in ``--chunks``
chunks, persisted on the cluster before the clock starts, fresh keys and new
Dask keys each repetition), each result persisted and checked:

``gpusort.sort``       the full sort (the baseline: the ``ratio`` column says
                       how many times faster than it each case runs)
``gpusort.topk``       ``topk(x, --k)``: a sample select per chunk, a sort of the survivors
``dask.array.topk``    Dask's own
``gpusort.unique``     ``unique(x, return_counts=True)`` (one sort and a pass)
``dask.array.unique``  Dask's own, same flag
``gpusort.searchsorted``  ``--needles`` random needles in the sorted keys

The issue's goal: ``topk(x, 100)`` at 5x or more the speed of the full sort.
``--backend cupy`` moves the chunks to the GPU first (CuPy chunks).

    python benchmarks/bench_select.py --n 2**24 --chunks 16
    python benchmarks/bench_select.py --backend cupy --n 2**30 --chunks 32 --cluster cuda
"""

from __future__ import annotations

import dask.array as da
import numpy as np
from harness import Case, cluster, dask_keys, on_backend, parse_args, persisted, run, to_host as host

import gpusort
from gpusort import runtime


def main(argv=None) -> int:
    def options(p):
        p.add_argument("--n", type=runtime.count, default=2**24, help="number of keys (default: %(default)s)")
        p.add_argument("--chunks", type=runtime.count, default=16, help="number of chunks (default: %(default)s)")
        p.add_argument("--dtype", default="int64", help="key dtype (default: %(default)s)")
        p.add_argument("--k", type=int, default=100, help="topk's k (default: %(default)s)")
        p.add_argument("--needles", type=runtime.count, default=2**20, help="searchsorted needles (default: %(default)s)")
        p.add_argument("--distinct", type=runtime.count, default=2**16,
                       help="distinct keys for the unique cases (default: %(default)s)")
        p.add_argument("--backend", choices=("numpy", "cupy"), default="numpy")
        p.set_defaults(repeat=3)

    args = parse_args(__doc__, argv, options, cluster=True)
    params = {"n": args.n, "dtype": args.dtype, "chunks": args.chunks, "backend": args.backend}
    chunk = -(-args.n // args.chunks)

    with cluster(args):
        def keys(rep, distinct=None):
            x = dask_keys(args.n, chunk, args.dtype, "uniform", seed=rep)
            return on_backend(x % distinct if distinct else x, args.backend)

        def check_topk(x, y):
            keys = host(x.compute())  # a partition, not a sort: the check must not outlast the cases
            want = np.sort(np.partition(keys, len(keys) - args.k)[-args.k:])[::-1]
            np.testing.assert_array_equal(host(y.compute()), want)

        def check_unique(x, y):
            values, counts = np.unique(host(x.compute()), return_counts=True)
            np.testing.assert_array_equal(host(y[0].compute()), values)
            np.testing.assert_array_equal(host(y[1].compute()), counts)

        def sorted_and_needles(rep):
            x = keys(rep)
            s = persisted(gpusort.sort(x))
            v = da.from_array(np.random.default_rng(rep).integers(-(2**62), 2**62, args.needles), chunks=2**18)
            return s, v

        def check_search(inputs, y):
            s, v = inputs
            np.testing.assert_array_equal(host(y.compute()), np.searchsorted(host(s.compute()), v.compute()))

        cases = [
            Case("gpusort.sort", keys, lambda x: persisted(gpusort.sort(x)), None, args.n, params),
            Case("gpusort.topk", keys, lambda x: persisted(gpusort.topk(x, args.k)), check_topk, args.n,
                 params | {"k": args.k}),
            Case("dask.array.topk", keys, lambda x: persisted(da.topk(x, args.k)), check_topk, args.n,
                 params | {"k": args.k}),
            Case("gpusort.unique", lambda rep: keys(rep, args.distinct),
                 lambda x: persisted(gpusort.unique(x, return_counts=True)), check_unique, args.n,
                 params | {"distinct": args.distinct}),
            # Dask's unique combines per-chunk results through structured arrays
            # in Python: 84 s for 2^22 keys of 2^16 distinct on the 2-core box,
            # so it runs once, after no warm-up.
            Case("dask.array.unique", lambda rep: keys(rep, args.distinct),
                 lambda x: persisted(da.unique(x, return_counts=True)), check_unique, args.n,
                 params | {"distinct": args.distinct}, repeat=1, warmup=0),
            Case("gpusort.searchsorted", sorted_and_needles,
                 lambda sv: persisted(gpusort.searchsorted(sv[0], sv[1])), check_search, args.needles,
                 params | {"needles": args.needles}),
        ]
        return run("select", args, cases, baseline="gpusort.sort")


if __name__ == "__main__":
    raise SystemExit(main())
