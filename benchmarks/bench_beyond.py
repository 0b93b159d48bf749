"""Beyond sort (issue 31): gpusort.merge and gpusort.sort_values against their peers, results checked.

Rows (``--rows``), each a table and a JSON file of its own, inputs persisted
before the clock starts and fresh every repetition:

``merge``            two sorted int64 arrays of ``--merge-n`` keys each (the second
                     ``--merge-b-n`` if given), ``--merge-chunks`` chunks each, on the
                     cluster: ``gpusort.merge`` against ``gpusort.sort`` of their
                     concatenation (goal: 3x faster).
``gpu-merge``        the same in CuPy chunks of ``--gpu-merge-n`` keys each, on this
                     process's GPU: against ``gpusort.gpu.merge`` of the two whole
                     arrays (goal: half its rate or more), and Dask's floor: a task
                     per chunk over the same persisted inputs that returns a view.
                     Skipped without CuPy.
``sort_values``      ``--frame-n`` rows (int64 keys k1, k2; float64 v) in
                     ``--frame-partitions`` partitions, sorted by [k1, k2] on the
                     cluster: ``gpusort.sort_values`` against ``dask.dataframe``'s
                     (goal: 3x faster; gpusort exact against pandas).
``sort_values-big``  ``--big-frame-n`` rows the same way on a new cluster of the same
                     workers with ``--big-memory-limit`` each: does each finish, exact.
``sort_values-string`` ``--frame-n`` rows (int64 k, float64 v, Arrow string s of 8 to
                     16 ASCII letters, one of ``--distinct-strings`` values) in
                     ``--frame-partitions`` partitions, sorted by s on the cluster:
                     ``gpusort.sort_values`` against ``dask.dataframe``'s (issue 48's
                     goal: 1.5x faster; gpusort exact against pandas' stable sort).

    python benchmarks/bench_beyond.py --workers 2           # every row at full size, 2 one-thread workers
    python benchmarks/bench_beyond.py --rows merge --merge-n 2**22 --repeat 1
"""

from __future__ import annotations

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
from harness import Case, cluster, parse_args, persisted, run

import gpusort
from gpusort import runtime

ROWS = ("merge", "gpu-merge", "sort_values", "sort_values-big", "sort_values-string")


def main(argv=None) -> int:
    def options(p):
        p.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS), help="rows to run (default: all)")
        p.add_argument("--merge-n", type=runtime.count, default=2**26, help="keys in each merge input")
        p.add_argument("--merge-b-n", type=runtime.count, help="keys in the second merge input (default: --merge-n)")
        p.add_argument("--merge-chunks", type=runtime.count, default=16, help="chunks of each merge input")
        p.add_argument("--gpu-merge-n", type=runtime.count, default=2**29, help="keys in each GPU merge input")
        p.add_argument("--gpu-merge-chunks", type=runtime.count, default=8, help="chunks of each GPU merge input")
        p.add_argument("--frame-n", type=runtime.count, default=2**24, help="rows of the sort_values frame")
        p.add_argument("--frame-partitions", type=runtime.count, default=16, help="its partitions")
        p.add_argument("--distinct-strings", type=runtime.count, default=300_000,
                       help="distinct values of the string frame's key")
        p.add_argument("--big-frame-n", type=runtime.count, default=2**26, help="rows of the big frame")
        p.add_argument("--big-frame-partitions", type=runtime.count, default=32, help="its partitions")
        p.add_argument("--big-memory-limit", type=runtime.size, default=2 * 2**30,
                       help="memory per worker for the big frame (default: 2GiB)")
        p.set_defaults(repeat=3)

    args = parse_args(__doc__, argv, options, cluster=True)
    failed = 0
    if {"merge", "sort_values", "sort_values-string"} & set(args.rows):
        with cluster(args):
            if "merge" in args.rows:
                failed |= run("beyond-merge", args, merge_cases(args.merge_n, args.merge_b_n or args.merge_n,
                                                                args.merge_chunks), baseline="gpusort.sort")
            if "sort_values" in args.rows:
                failed |= run("beyond-sort_values", args, frame_cases(args.frame_n, args.frame_partitions),
                              baseline="dask.dataframe", show=("partition_imbalance",))
            if "sort_values-string" in args.rows:
                cases = frame_cases(args.frame_n, args.frame_partitions, by=["s"],
                                    make=lambda n, parts, seed: string_frame(n, parts, seed, args.distinct_strings))
                failed |= run("beyond-sort_values-string", args, cases, baseline="dask.dataframe",
                              show=("partition_imbalance",))
    if "sort_values-big" in args.rows:
        with runtime.from_options(args, kind="local", memory_limit=args.big_memory_limit):
            cases = frame_cases(args.big_frame_n, args.big_frame_partitions, once=True)
            failed |= run("beyond-sort_values-big", args, cases, baseline="dask.dataframe",
                          show=("partition_imbalance",))
    if "gpu-merge" in args.rows:
        with dask.config.set(scheduler="threads"):
            failed |= run("beyond-gpu-merge", args, gpu_merge_cases(args.gpu_merge_n, args.gpu_merge_chunks),
                          baseline="gpusort.gpu.merge")
    return failed


def sorted_keys(n: int, chunks: int, seed: int, width: int = 2**20) -> da.Array:
    """``n`` sorted random int64 keys in ``chunks`` chunks, each chunk made where it is computed.

    Position ``i`` draws from ``[i·width, (i+1)·width)``, so any chunking is
    sorted, and two inputs that span one range interleave evenly.
    """
    positions = da.arange(n, chunks=-(-n // chunks), dtype=np.int64)
    return positions.map_blocks(_sorted_block, seed, width, dtype=np.int64)


def _sorted_block(positions: np.ndarray, seed: int, width: int) -> np.ndarray:
    start, stop = (int(positions[0]), int(positions[-1]) + 1) if len(positions) else (0, 0)
    rng = np.random.default_rng([seed, start])
    return np.sort(rng.integers(start * width, stop * width, stop - start))


def merge_cases(n: int, nb: int, chunks: int) -> list[Case]:
    params = {"n": n + nb, "dtype": "int64", "chunks": 2 * chunks}

    def inputs(rep):
        return persisted([sorted_keys(n, chunks, 2 * rep), sorted_keys(nb, chunks, 2 * rep + 1, 2**20 * n // nb)])

    def check(ab, y):
        want = np.sort(np.concatenate([x.compute() for x in ab]), kind="stable")
        np.testing.assert_array_equal(y.compute(), want)

    return [
        Case("gpusort.merge", inputs, lambda ab: persisted(gpusort.merge(*ab)), check, n + nb, params),
        Case("gpusort.sort", inputs, lambda ab: persisted(gpusort.sort(da.concatenate(ab))), check, n + nb, params),
    ]


def gpu_merge_cases(n: int, chunks: int) -> list[Case]:
    params = {"n": 2 * n, "dtype": "int64", "chunks": 2 * chunks}

    def whole(rep):
        # Made and checked on the GPU: a host sort of 2^30 keys takes minutes.
        return [gpu_sorted_keys(n, 2 * rep), gpu_sorted_keys(n, 2 * rep + 1)]

    def chunked(rep):
        return persisted([da.from_array(x, chunks=-(-n // chunks), asarray=False, name=False) for x in whole(rep)])

    def check(ab, y):
        import cupy

        ab = [x.compute() if isinstance(x, da.Array) else x for x in ab]
        got = y.compute() if isinstance(y, da.Array) else y
        assert bool(cupy.array_equal(got, cupy.sort(cupy.concatenate(ab)))), "the merge is not the sorted union"

    def merge_gpu(ab):
        import gpusort.gpu

        return gpusort.gpu.merge(*ab)

    def floor(ab):
        # Dask's own cost of one task per output chunk over the persisted inputs: a view each, no work.
        return persisted(da.concatenate(ab).map_blocks(_view, dtype=ab[0].dtype))

    def check_floor(ab, y):
        assert y.numblocks == (2 * chunks,), y.numblocks

    return [
        Case("gpusort.merge", chunked, lambda ab: persisted(gpusort.merge(*ab)), check, 2 * n, params,
             device="gpu", bytes=2 * 2 * n * 8),
        Case("gpusort.gpu.merge", whole, merge_gpu, check, 2 * n, params, device="gpu", bytes=2 * 2 * n * 8),
        Case("Dask floor: a view a chunk", chunked, floor, check_floor, 2 * n, params, device="gpu"),
    ]


def _view(block):
    return block[:]


def gpu_sorted_keys(n: int, seed: int, width: int = 2**20):
    """``n`` sorted random int64 keys on the GPU, drawn as :func:`sorted_keys` draws them: no sort needed."""
    import cupy

    rng = cupy.random.default_rng(seed)
    return cupy.arange(n, dtype=np.int64) * width + rng.integers(0, width, n, dtype=np.int64)


def frame(n: int, partitions: int, seed: int) -> dd.DataFrame:
    """``n`` rows: k1 of 1024 values (so k2 often decides), k2 any int64, v float64; index 0 … n-1."""
    per = -(-n // partitions)
    starts = list(range(0, n, per))
    meta = pd.DataFrame({"k1": np.zeros(0, np.int64), "k2": np.zeros(0, np.int64), "v": np.zeros(0)})
    return dd.from_map(_frame_part, starts, n=n, per=per, seed=seed, meta=meta, enforce_metadata=False)


def _frame_part(start: int, n: int, per: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng([seed, start])
    rows = min(per, n - start)
    return pd.DataFrame({"k1": rng.integers(0, 1024, rows), "k2": rng.integers(-(2**62), 2**62, rows),
                         "v": rng.standard_normal(rows)}, index=pd.RangeIndex(start, start + rows))


def string_frame(n: int, partitions: int, seed: int, distinct: int) -> dd.DataFrame:
    """``n`` rows: k any int64, v float64, s an Arrow string drawn from ``distinct`` values; index 0 … n-1."""
    per = -(-n // partitions)
    meta = pd.DataFrame({"k": np.zeros(0, np.int64), "v": np.zeros(0),
                         "s": pd.Series([], dtype=pd.StringDtype("pyarrow"))})
    return dd.from_map(_string_part, list(range(0, n, per)), n=n, per=per, seed=seed, distinct=distinct, meta=meta,
                       enforce_metadata=False)


def _string_part(start: int, n: int, per: int, seed: int, distinct: int) -> pd.DataFrame:
    rng = np.random.default_rng([seed, start])
    rows = min(per, n - start)
    s = pd.array(_vocabulary(distinct).take(rng.integers(0, distinct, rows)), dtype=pd.StringDtype("pyarrow"))
    return pd.DataFrame({"k": rng.integers(-(2**62), 2**62, rows), "v": rng.standard_normal(rows), "s": s},
                        index=pd.RangeIndex(start, start + rows))


def _vocabulary(distinct: int) -> np.ndarray:
    """``distinct`` strings of 8 to 16 lowercase ASCII letters (as names and words are), the same in every task.

    Made again by every partition's task (untimed, in the setup): a cached
    one would make ``from_map``'s function impossible to tokenize.
    """
    rng = np.random.default_rng(48)
    letters = rng.integers(ord("a"), ord("z") + 1, (distinct, 16), dtype=np.uint8)
    lengths = rng.integers(8, 17, distinct)
    return np.array([row[:length].tobytes().decode() for row, length in zip(letters, lengths)], dtype=object)


def frame_cases(n: int, partitions: int, once: bool = False, by: list[str] | None = None,
                make=None) -> list[Case]:
    """gpusort's sort_values (checked exactly against pandas) and dask.dataframe's (checked by its keys).

    ``by`` defaults to ``["k1", "k2"]`` of :func:`frame`; ``make(n, partitions, seed)`` builds another frame.
    """
    make = make or frame
    by = by or ["k1", "k2"]
    probe = make(1, 1, 0)._meta
    params = {"n": n, "dtype": ",".join(str(t) for t in probe.dtypes), "chunks": partitions}

    def inputs(rep):
        return persisted_frame(make(n, partitions, rep))

    def check(exact):
        def compare(df, out):
            want = gathered(df).sort_values(by, kind="stable")
            got = gathered(out)
            if exact:
                pd.testing.assert_frame_equal(got, want)
            else:  # dask's sort is not stable: the keys alone
                pd.testing.assert_frame_equal(got[by].reset_index(drop=True), want[by].reset_index(drop=True))
            lengths = out.map_partitions(len).compute().to_numpy()
            return {"partition_imbalance": float(lengths.max() / lengths.mean())}

        return compare

    times = {"repeat": 1, "warmup": 0} if once else {}
    return [
        Case("gpusort.sort_values", inputs, lambda df: persisted_frame(gpusort.sort_values(df, by)), check(True),
             n, params, **times),
        Case("dask.dataframe", inputs, lambda df: persisted_frame(df.sort_values(by)), check(False), n, params,
             requires=("pyarrow",), **times),
    ]


def gathered(df: dd.DataFrame) -> pd.DataFrame:
    """``df`` in this process, one partition at a time.

    ``compute()`` would first join the partitions on one worker, and asking
    for all at once has every worker read back all it spilled: either can
    take more memory than the workers of the big row have.
    """
    return pd.concat([part.compute() for part in df.to_delayed()])


def persisted_frame(df: dd.DataFrame) -> dd.DataFrame:
    """``df`` persisted and, on a distributed client, waited for."""
    from distributed import futures_of, wait

    df = df.persist()
    if futures_of(df):
        wait(df)
    return df


if __name__ == "__main__":
    raise SystemExit(main())
