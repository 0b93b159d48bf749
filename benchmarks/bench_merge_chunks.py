"""gpusort.merge at many input chunks (issue 48): time and peak memory on the threaded scheduler.

Each row merges two sorted int64 arrays on the NumPy backend; the clock
covers building the graph and computing it, as a user's call does, and
``build_s`` is the part spent building it.  The result is checked against
``np.sort(np.concatenate([a, b]), kind="stable")``.

``tiny4000``   ``a``: 4,000 chunks of one key; ``b``: 10 chunks of 5,000 (goal: 2 s, 300 MiB)
``tiny1000``   1,000 + 1,000 chunks of one key (goal: 1 s)
``ones17003``  ``a``: 30,011 keys in 8 chunks; ``b``: 17,003 chunks of one key (goal: 2 s, 300 MiB)

``peak_rss_mib`` is the process's peak resident memory after the case: run
one row per process (``--rows``) to read it as that row's.  Each row also
times Dask's floor on the same chunks: a task per chunk of both inputs that
returns a view, computed the same way (the threaded scheduler's cost of that
many tasks, which grows with the product of tasks and input chunks).

    python benchmarks/bench_merge_chunks.py --rows tiny4000 --repeat 3
"""

from __future__ import annotations

import resource
import time

import dask
import dask.array as da
import numpy as np
from harness import Case, parse_args, run

import gpusort

#: Each row: (length of a, chunks of a, length of b, chunks of b).
ROWS = {
    "tiny4000": (4000, 4000, 50_000, 10),
    "tiny1000": (1000, 1000, 1000, 1000),
    "ones17003": (30_011, 8, 17_003, 17_003),
}


def main(argv=None) -> int:
    def options(p):
        p.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS), help="rows (default: all)")
        p.set_defaults(repeat=3)

    args = parse_args(__doc__, argv, options)
    with dask.config.set(scheduler="threads"):
        return max(run(f"merge-chunks-{row}", args, cases(row, *ROWS[row]), baseline="gpusort.merge",
                       show=("build_s", "peak_rss_mib")) for row in args.rows)


def cases(row: str, na: int, pa: int, nb: int, pb: int) -> list[Case]:
    def inputs(rep: int) -> tuple[np.ndarray, np.ndarray, da.Array, da.Array]:
        rng = np.random.default_rng(rep)
        a, b = (np.sort(rng.integers(0, 2**40, n)) for n in (na, nb))
        return a, b, da.from_array(a, chunks=-(-na // pa)), da.from_array(b, chunks=-(-nb // pb))

    def check(ab, out) -> dict:
        y, measured = out
        np.testing.assert_array_equal(y, np.sort(np.concatenate(ab[:2]), kind="stable"))
        return measured | peak()

    def check_floor(ab, out) -> dict:
        y, measured = out
        assert len(y) == na + nb
        return measured | peak()

    def floor(ab):
        return da.concatenate(ab[2:]).map_blocks(_view, dtype=np.int64)

    params = {"n": na + nb, "dtype": "int64", "chunks": pa + pb, "row": row}
    return [Case("gpusort.merge", inputs, built(lambda ab: gpusort.merge(ab[2], ab[3])), check, na + nb, params),
            Case("Dask floor: a view a chunk", inputs, built(floor), check_floor, na + nb, params)]


def built(make):
    """A case's ``run``: build the graph with ``make``, compute it; the result and the seconds spent building."""
    def run_case(ab) -> tuple[np.ndarray, dict]:
        start = time.perf_counter()
        lazy = make(ab)
        build = time.perf_counter() - start
        return lazy.compute(), {"build_s": build}
    return run_case


def peak() -> dict:
    return {"peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _view(block: np.ndarray) -> np.ndarray:
    return block[:]


if __name__ == "__main__":
    raise SystemExit(main())
