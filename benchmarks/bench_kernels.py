"""gpusort's CUDA mergesort kernels on one GPU, against CuPy (CUB) and PyTorch in the same run.

Cases (n = 2**log2_n, 2**28 by default): sort int32, int64, float64 and float32 of n
keys; argsort int32 of n/2 keys; merge two sorted int32 arrays of n/2 each
(peer: a device-to-device copy of the same bytes); merge_runs of 16 sorted
int64 runs, n keys in all (peer: cupy.sort of their concatenation).  Along
an axis (gpusort.gpu as cupy.sort's stand-in; CuPy's N-D sorts are thrust
comparison sorts of (row, key) tuples): sort_rows and argsort_rows of
(2**(log2_n/2), 2**(log2_n/2)) float32 along the last axis (the segmented
sort, long rows), sort_short_rows of (n/256, 256) float32 (composite keys),
and lexsort of two int32 keys of n/4.  ``--ops`` picks cases by op.  Every
repetition gets fresh random keys; every output is checked against the peer.
Prints the kernels' version and tuning table, the harness table (ratio: the
CuPy peer's time over the case's) and the issue's goals.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from harness import Case, parse_args, run

from gpusort import runtime
from gpusort.cuda import buckets, build, launch, tuning

GOALS = [  # (op, dtype, unit, goal), read off the summary: issue 14's (float32's is at 2**24: --log2-n 24)
    ("sort", "int32", "Gkeys/s", 25.0),
    ("sort", "int64", "Gkeys/s", 16.0),
    ("sort", "float64", "Gkeys/s", 16.0),
    ("sort", "float32", "Gkeys/s", 20.0),
    ("argsort", "int32", "Gkeys/s", 15.0),
    ("merge", "int32", "TB/s", 2.8),
    ("merge_runs", "int64", "x cupy", 2.0),
    ("sort_rows", "float32", "x cupy", 0.8),
]
OPS = ("sort", "argsort", "merge", "merge_runs", "sort_rows", "argsort_rows", "sort_short_rows", "lexsort")


def random_keys(n: int, dtype: str, seed: int):
    import cupy

    rs = cupy.random.RandomState(seed)
    if dtype in ("float32", "float64"):
        return rs.standard_normal(n, dtype=dtype)
    words = rs.randint(-(2**31), 2**31 - 1, size=n * (2 if dtype == "int64" else 1), dtype=np.int32)
    return words.view(dtype)


def same(expected):
    """A check: the output (CuPy, or anything cupy.asarray takes) equals ``expected(inputs)``."""
    import cupy

    def check(inputs, output):
        assert bool(cupy.array_equal(cupy.asarray(output), expected(inputs))), "result differs"

    return check


def cases(log2_n: int) -> list[Case]:
    import cupy

    import gpusort.gpu as gpu

    n = 2**log2_n
    out: list[Case] = []

    def torch_of(x):
        import torch

        return torch.from_dlpack(x)

    torch_takes = n < 2**31  # torch sorts at most INT_MAX keys along a dimension

    for dtype in ("int32", "int64", "float64", "float32"):
        params = {"op": "sort", "n": n, "dtype": dtype, "tuning": tuning_row(np.dtype(dtype).itemsize)}
        setup = lambda rep, dtype=dtype: random_keys(n, dtype, rep)
        check = same(cupy.sort)
        out += [
            Case("gpusort", setup, gpu.sort, check, n, params, "gpu"),
            Case("cupy", setup, cupy.sort, check, n, params, "gpu"),
        ] + [
            Case("torch", setup, lambda x: torch_of(x).sort().values, check, n, params, "gpu",
                 requires=["torch"]),
        ] * torch_takes  # fmt: skip

    m = n // 2
    params = {"op": "argsort", "n": m, "dtype": "int32", "tuning": tuning_row(8)}  # keys and positions packed in 8 bytes
    setup = lambda rep: random_keys(m, "int32", rep)
    check = same(cupy.argsort)  # CUB's radix sort is stable, so the positions must agree
    out += [
        Case("gpusort", setup, gpu.argsort, check, m, params, "gpu"),
        Case("cupy", setup, cupy.argsort, check, m, params, "gpu"),
        Case("torch", setup, lambda x: torch_of(x).argsort(stable=True), check, m, params, "gpu",
             requires=["torch"]),
    ]  # fmt: skip

    params = {"op": "merge", "n": 2 * m, "dtype": "int32", "tuning": tuning_row(4)}
    setup = lambda rep: (cupy.sort(random_keys(m, "int32", 2 * rep)),
                         cupy.sort(random_keys(m, "int32", 2 * rep + 1)))  # fmt: skip
    moved = 2 * (2 * m) * 4  # every key read once and written once
    out += [
        Case("gpusort", setup, lambda ab: gpu.merge(*ab),
             lambda ab, y: same(lambda ab: cupy.sort(cupy.concatenate(ab)))(ab, y),
             2 * m, params, "gpu", bytes=moved),
        Case("cupy", lambda rep: random_keys(2 * m, "int32", rep), cupy.copy, None, 2 * m, params,
             "gpu", bytes=moved),
    ]  # fmt: skip

    runs = 16
    params = {"op": "merge_runs", "n": n, "dtype": "int64", "runs": runs}
    setup = lambda rep: [cupy.sort(random_keys(n // runs, "int64", runs * rep + i)) for i in range(runs)]
    check = same(lambda rs: cupy.sort(cupy.concatenate(rs)))
    out += [
        Case("gpusort", setup, gpu.merge_runs, check, n, params, "gpu"),
        Case("cupy", setup, lambda rs: cupy.sort(cupy.concatenate(rs)), check, n, params, "gpu"),
    ]
    return out + axis_cases(log2_n)


def axis_cases(log2_n: int) -> list[Case]:
    """gpusort.gpu's sort, argsort and lexsort along an axis against CuPy's, on the same keys."""
    import cupy

    import gpusort.gpu as gpu

    def stable_positions(x, positions):
        """The positions gather the sorted rows, and increase within ties: the stable argsort, nothing else."""
        keys = cupy.take_along_axis(x, positions, axis=-1)
        assert bool(cupy.array_equal(keys, cupy.sort(x, axis=-1))), "positions do not sort the rows"
        ties = keys[:, 1:] == keys[:, :-1]
        assert not bool(cupy.any(ties & (positions[:, 1:] <= positions[:, :-1]))), "ties out of input order"

    out: list[Case] = []
    half = log2_n // 2
    rows = [("sort_rows", (2**half, 2**(log2_n - half))),
            ("sort_short_rows", (2**(log2_n - 8), 2**8))]  # fmt: skip
    for op, shape in rows:
        params = {"op": op, "n": shape[0] * shape[1], "dtype": "float32", "shape": f"{shape[0]}x{shape[1]}"}
        setup = lambda rep, shape=shape: random_keys(shape[0] * shape[1], "float32", rep).reshape(shape)
        check = same(lambda x: cupy.sort(x, axis=-1))
        out += [
            Case("gpusort", setup, lambda x: gpu.sort(x, axis=-1), check, params["n"], params, "gpu"),
            Case("cupy", setup, lambda x: cupy.sort(x, axis=-1), check, params["n"], params, "gpu"),
        ]
    shape = rows[0][1]
    params = {"op": "argsort_rows", "n": shape[0] * shape[1], "dtype": "float32", "shape": f"{shape[0]}x{shape[1]}"}
    setup = lambda rep: random_keys(shape[0] * shape[1], "float32", rep).reshape(shape)
    out += [
        Case("gpusort", setup, lambda x: gpu.argsort(x, axis=-1), stable_positions, params["n"], params, "gpu"),
        Case("cupy", setup, lambda x: cupy.argsort(x, axis=-1), stable_positions, params["n"], params, "gpu"),
    ]  # fmt: skip

    m = 2 ** (log2_n - 2)
    params = {"op": "lexsort", "n": m, "dtype": "int32", "keys": 2}
    setup = lambda rep: random_keys(2 * m, "int32", rep).reshape(2, m)  # row 1 is the primary key
    check = same(cupy.lexsort)  # no tie on both keys in practice: the positions must agree
    out += [
        Case("gpusort", setup, gpu.lexsort, check, m, params, "gpu"),
        Case("cupy", setup, cupy.lexsort, check, m, params, "gpu"),
    ]
    return out


def tuning_row(key_size: int, value_size: int = 0) -> str:
    """The tuning row a sort of these key and value sizes uses on this device, as ``sm_90 256x23``."""
    import cupy

    arch = int(cupy.cuda.Device().compute_capability)
    nt, vt = tuning.launch_box(arch, key_size, value_size)
    return f"sm_{arch} {nt}x{vt}"


def print_kernels() -> None:
    import cupy

    arch = int(cupy.cuda.Device().compute_capability)
    print(f"gpusort kernels {build.version()}, device sm_{arch} "
          f"({cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()})")  # fmt: skip
    print("tuning (arch, key bytes, value bytes) -> NT x VT (1- and 2-byte keys and values count as 4):")
    for key_size in (4, 8):
        for value_size in (0, 4, 8):
            nt, vt = tuning.launch_box(arch, key_size, value_size)
            print(f"  (sm_{arch}, {key_size}, {value_size}) -> {nt} x {vt} = {nt * vt} keys per tile")


def print_goals(path) -> None:
    """The issue's goals against this run's summary."""
    summary = json.loads(open(path).read())["summary"]
    ok = {(e["case"], e["params"]["op"], e["params"]["dtype"]): e for e in summary if e["status"] == "ok"}
    print("\ngoal                      measured     goal")
    for op, dtype, unit, goal in GOALS:
        mine = ok.get(("gpusort", op, dtype))
        if mine is None:
            print(f"{op} {dtype:<20} failed or skipped")
            continue
        if unit == "TB/s":
            value = mine["bytes_per_second"] / 1e12
        elif unit == "x cupy":
            value = mine.get("ratio", float("nan"))
        else:
            value = mine["items_per_second"] / 1e9
        mark = "met" if value >= goal else "missed"
        print(f"{op + ' ' + dtype:<25} {value:6.2f} {unit:<8} >= {goal:g}  {mark}")


def print_breakdown(log2_n: int, repeat: int) -> None:
    """Kernel time alone (buffers allocated beforehand): the blocksort, the last two-way and four-way passes.

    The harness's times include every launch, allocation from CuPy's warm
    pool and the passes' partitions; these are each kernel alone, except
    that a pass is its partition and its merge.
    """
    import cupy

    n = 2**log2_n
    print(f"\nkernels alone, n = 2**{log2_n}, median of {repeat} (bytes: read + written once)")
    for dtype in ("int32", "int64", "float64"):
        k = build.kernels(np.dtype(dtype), 0, False)
        x = random_keys(n, dtype, 0)
        b = cupy.empty_like(x)
        tiles = launch.Tiles.whole(n, k.nv)
        levels = tiles.levels
        four_way = k.merge_four is not None
        plan = tuning.pass_plan(levels, four_way)
        splits = cupy.empty(4 * tiles.count, np.int64)

        def runs(ways):  # the last pass of these ways: sorted runs of n / ways keys or so
            run = k.nv << (levels - ways // 2)
            a = x.copy()
            for begin in range(0, n, run):
                a[begin:begin + run] = cupy.sort(x[begin:begin + run])
            return a, run

        a2, run2 = runs(2)  # the last two-way pass's input
        steps = {}
        if buckets.bucket_pass(k, x, False, x.dtype):  # the sample's sort, the count, the tables, the scatter
            steps["bucket pass"] = lambda: buckets.bucket_pass(k, x, False, x.dtype)
        steps["blocksort"] = lambda: launch.blocksort(k, x, tuning.NULL, b, tuning.NULL, tiles)
        steps["2-way pass"] = lambda: launch.merge_pass(k, a2, tuning.NULL, a2[run2:], tuning.NULL, run2, n,
                                                         n - run2, splits[:tiles.count], b, tuning.NULL, tiles)
        if four_way:
            a4, run4 = runs(4)  # the last four-way pass's input
            steps["4-way pass"] = lambda: launch.merge_pass_four(k, a4, run4, n, splits, b, tiles)
        for name, step in steps.items():
            times = []
            for _ in range(repeat + 1):
                begin, end = cupy.cuda.Event(), cupy.cuda.Event()
                begin.record()
                step()
                end.record()
                end.synchronize()
                times.append(cupy.cuda.get_elapsed_time(begin, end) / 1e3)
            t = sorted(times[1:])[repeat // 2]
            print(f"  {dtype:<8} {name:<11} {t * 1e3:7.3f} ms  {2 * x.nbytes / t / 1e12:5.2f} TB/s"
                  f"  ({tiles.count} tiles of {k.nt} x {k.vt}; passes {'+'.join(map(str, plan))})")
        if not cupy.array_equal(b, cupy.sort(x)):
            raise AssertionError(f"the last timed pass did not sort {dtype}")


def main(argv=None) -> int:
    def options(p):
        p.add_argument("--log2-n", type=int, default=28, help="log2 of the sort size (default: %(default)s)")
        p.add_argument("--ops", type=lambda text: text.split(","), default=list(OPS),
                       help=f"comma-separated ops to time, of {','.join(OPS)} (default: all)")

    args = parse_args(__doc__, argv, options)
    unknown = set(args.ops) - set(OPS)
    if unknown:
        print(f"--ops: unknown {','.join(sorted(unknown))}; choose from {','.join(OPS)}", file=sys.stderr)
        return 2
    names, why = runtime.gpus()
    if not names:  # a setup error, as the command line reports them: one line, status 2
        print(f"bench kernels needs CuPy and a CUDA GPU, and here {why}", file=sys.stderr)
        return 2
    print_kernels()
    chosen = [c for c in cases(args.log2_n) if c.params["op"] in args.ops]
    status = run("kernels", args, chosen, baseline="cupy")
    written = sorted(args.out.glob("kernels-*.json"), key=lambda p: p.stat().st_mtime)
    if written:
        print_goals(written[-1])
    if "sort" in args.ops:
        print_breakdown(args.log2_n, args.repeat)
    return status


if __name__ == "__main__":
    sys.exit(main())
