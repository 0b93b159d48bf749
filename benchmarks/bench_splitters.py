"""Splitter overhead: what the exact co-rank splitters cost, against N, P and J.

N keys in P input chunks (so P sorted runs), sorted into J output chunks.
The splitters are a phase of ``gpusort.engine.graph.PHASES``; its tasks' output
bytes and compute seconds (from the scheduler's task stream)
are reported absolutely and as a share: of the key bytes, and of the task
seconds of the whole sort.  Both shares should stay small as N grows.
"""

from __future__ import annotations

import functools

import numpy as np
from harness import Case, cluster, gpusort_on_cluster, parse_args, persisted_keys, run

from gpusort import runtime


def main(argv=None) -> int:
    def options(p):
        p.add_argument("--n", type=int, nargs="+", default=[2**20, 2**22, 2**24], help="numbers of keys (N)")
        p.add_argument("--runs", type=int, nargs="+", default=[4, 16, 64], help="input chunks (P)")
        p.add_argument("--out-chunks", type=int, nargs="+", default=[0],
                       help="output chunks (J); 0 means J = P (default: %(default)s)")
        p.add_argument("--dtype", default="int64", help="key dtype (default: %(default)s)")
        p.add_argument("--backend", choices=("numpy", "cupy"), default="numpy")
        p.set_defaults(repeat=3)

    args = parse_args(__doc__, argv, options, cluster=True)
    with cluster(args) as client:

        def check(x, out):
            y, start = out
            np.testing.assert_array_equal(y.compute(), np.sort(x.compute()))
            stats = runtime.task_costs(client, start)
            splitters = stats.get("splitters", {"seconds": 0.0, "bytes": 0})
            seconds, nbytes = splitters["seconds"], splitters["bytes"]
            return {"splitter_bytes": nbytes, "splitter_seconds": seconds,
                    "splitter_byte_share": nbytes / x.nbytes,
                    "splitter_time_share": seconds / sum(s["seconds"] for s in stats.values())}

        cases = []
        for n in args.n:
            for runs in args.runs:
                for out_chunks in args.out_chunks:
                    out_chunks = out_chunks or runs
                    params = {"n": n, "dtype": args.dtype, "runs": runs, "out_chunks": out_chunks}
                    setup = functools.partial(persisted_keys, n, -(-n // runs), args.dtype, "uniform")  # (seed)
                    sort = gpusort_on_cluster(chunks=-(-n // out_chunks), backend=args.backend)
                    cases.append(Case(f"gpusort[{args.backend}]", setup, sort, check, n, params))
        return run("splitters", args, cases, show=("splitter_bytes", "splitter_byte_share",
                                                   "splitter_seconds", "splitter_time_share"))


if __name__ == "__main__":
    raise SystemExit(main())
