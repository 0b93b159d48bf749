"""Skewed keys: time and output balance of gpusort and dask.dataframe sort_values.

Distributions: uniform (the reference), all equal, few distinct, Zipf(1.1),
99% one value, sorted, reverse.  gpusort's output chunks are balanced by
construction (co-rank splitters); dask.dataframe's partitions follow its
quantile divisions, so duplicates pile up.  ``chunk_imbalance`` is the longest
output chunk over the mean chunk: 1.0 is perfect.
"""

from __future__ import annotations

import time

import numpy as np
from distributed import wait
from harness import DISTRIBUTIONS, Case, cluster, gpusort_on_cluster, parse_args, persisted_keys, run

from gpusort import runtime


def main(argv=None) -> int:
    def options(p):
        p.add_argument("--n", type=int, default=2**22, help="number of keys (default: %(default)s)")
        p.add_argument("--chunks", type=int, default=16, help="number of input chunks (default: %(default)s)")
        p.add_argument("--dtype", default="int64", help="key dtype (default: %(default)s)")
        p.add_argument("--distributions", nargs="+", choices=DISTRIBUTIONS, default=list(DISTRIBUTIONS))
        p.add_argument("--backend", choices=("numpy", "cupy"), default="numpy")
        p.set_defaults(repeat=3)

    args = parse_args(__doc__, argv, options, cluster=True)
    chunk = -(-args.n // args.chunks)
    with cluster(args) as client:
        cases = []
        for distribution in args.distributions:
            params = {"n": args.n, "dtype": args.dtype, "distribution": distribution, "chunks": args.chunks}

            def setup(rep, distribution=distribution):
                return persisted_keys(args.n, chunk, args.dtype, distribution, seed=rep)

            cases += [
                Case(f"gpusort[{args.backend}]", setup, gpusort_on_cluster(backend=args.backend), _check(client, _array_lengths),
                     args.n, params),
                Case("dask.dataframe", setup, _dataframe, _check(client, _series_lengths), args.n, params,
                     requires=("pandas", "pyarrow")),
            ]
        return run("skew", args, cases, baseline="dask.dataframe", show=("chunk_imbalance", "empty_chunks"))


def _dataframe(x):
    import dask.dataframe as dd

    start = time.time()
    y = dd.from_dask_array(x, columns=["k"]).sort_values("k").persist()
    wait(y)
    return y["k"], start


def _check(client, chunk_lengths):
    """Check against np.sort; measure the output's balance and the task-seconds spent."""

    def check(x, out):
        y, start = out
        np.testing.assert_array_equal(y.compute(), np.sort(x.compute()))
        lengths = np.asarray(chunk_lengths(y))
        return {"chunk_imbalance": float(lengths.max() / lengths.mean()),
                "empty_chunks": int((lengths == 0).sum()),
                "task_seconds": sum(runtime.phase_seconds(client, start).values())}

    return check


def _array_lengths(y):
    """Lengths of the computed blocks (not the declared chunks)."""
    return y.map_blocks(lambda b: np.array([len(b)]), chunks=((1,) * y.numblocks[0],), dtype=int).compute()


def _series_lengths(y):
    return y.map_partitions(len).compute()


if __name__ == "__main__":
    raise SystemExit(main())
