"""A few small sorts and merges that exercise every kernel path; exits non-zero on a wrong result.

Meant to run under compute-sanitizer, where full test sizes would take too long::

    compute-sanitizer --tool memcheck --error-exitcode 9 python benchmarks/gpu_smoke.py
    compute-sanitizer --tool racecheck --error-exitcode 9 python benchmarks/gpu_smoke.py

Sizes leave a partial last tile and a partial last group of runs: keys-only
sorts of 8-byte keys and packed argsorts take two four-way merge passes,
other sorts four two-way ones, whose partitions search with lane groups
ascending and with one lane a tile descending.  The last sorts begin with a
bucket pass.  The passes that only large sorts take by default are forced
for these small ones through :func:`gpusort.cuda.tuning.forced`; the
expected orders are NumPy's (:func:`expected_order`).
"""

from __future__ import annotations

import cupy
import numpy as np

import gpusort.gpu as gpu
from gpusort.cuda import build, dispatch, tuning


def expected_order(x: np.ndarray, descending: bool = False) -> np.ndarray:
    """Stable positions that sort 1-D ``x`` in NumPy's order (NaN last), largest first if asked (NaN still last)."""
    if not descending:
        return np.argsort(x, kind="stable")
    _, rank = np.unique(x, return_inverse=True, equal_nan=True)  # ties (-0.0 and 0.0, every NaN) share a rank
    top = int(rank.max(initial=0))
    key = top - rank.ravel()
    if x.dtype.kind == "f":
        key[np.isnan(x)] = top + 1
    return np.argsort(key, kind="stable")


def main() -> None:
    with tuning.forced(FOUR_WAY_MIN_KEYS=0):  # the sizes here are far below it: make 8-byte sorts merge four ways
        rng = np.random.default_rng(0)
        sorts_and_merges(rng)
        packed_argsorts(rng)
        with tuning.forced(BUCKET_MIN_BYTES=0, BUCKET_LEVELS_SAVED=0):
            bucket_passes(rng)
    cupy.cuda.runtime.deviceSynchronize()
    print("gpu smoke OK")


def sorts_and_merges(rng: np.random.Generator) -> None:
    """Sorts, argsorts, pair sorts and a merge, each way; partitions by lane groups ascending, by lanes descending."""
    arch = int(cupy.cuda.Device().compute_capability)
    for dtype in ("int8", "int32", "float64"):
        nt, vt = tuning.launch_box(arch, np.dtype(dtype).itemsize)
        n = 9 * nt * vt + 5
        x = (rng.standard_normal(n) * 50).astype(dtype)
        d = cupy.asarray(x)
        for descending in (False, True):
            with tuning.forced(PARTITION_GROUP_TILES=0 if descending else 2**40):
                perm = expected_order(x, descending)
                assert (cupy.asnumpy(gpu.sort(d, descending=descending)) == x[perm]).all()
                assert (cupy.asnumpy(gpu.argsort(d, descending=descending)) == perm).all()
                k, v = gpu.sort_pairs(d, cupy.arange(n, dtype=np.uint64), descending=descending)
                assert (cupy.asnumpy(v) == perm).all()
                a, b = x[perm][: n // 3], x[perm][n // 3 :]
                merged = gpu.merge_runs(
                    [(cupy.asarray(a), cupy.arange(a.size)), (cupy.asarray(b), cupy.arange(b.size))],
                    descending=descending,
                )
                assert (cupy.asnumpy(merged[0]) == x[perm]).all()  # a ++ b was already in order


def packed_argsorts(rng: np.random.Generator) -> None:
    """Packed argsorts (int8 and int32 above) that end in the blocksort or in a two-way pass."""
    nv = build.kernels(tuning.WORD, 0, False).nv
    for n in (nv - 1, 2 * nv - 3):
        x = rng.integers(-3, 3, n).astype(np.int32)
        assert (cupy.asnumpy(dispatch.packed_argsort(cupy.asarray(x))) == expected_order(x)).all()


def bucket_passes(rng: np.random.Generator) -> None:
    """Sorts and packed argsorts that begin with a bucket pass (forced at this size).

    Keys spread over many buckets, and keys of a few values whose buckets
    take two- and four-way passes.  The pass needs four samples' worth of
    keys (``BUCKETS * BUCKET_SAMPLE`` each); a partial last tile.
    """
    n = 4 * tuning.BUCKETS * tuning.BUCKET_SAMPLE + 3
    for dtype, values in (("int32", 2**31), ("float64", 0), ("int32", 3), ("float32", 0)):
        x = (rng.integers(-values, values, n) if values else rng.standard_normal(n)).astype(dtype)
        if dtype == "float32":  # exact keys: both zeros and NaNs of two bit patterns tie
            x[::7], x[::11], x[::13], x[::17] = -0.0, 0.0, np.nan, -np.nan
        d = cupy.asarray(x)
        perm = expected_order(x)
        u = f"u{x.itemsize}"  # bits: NaN payloads and the sign of zero count
        assert (cupy.asnumpy(gpu.sort(d)).view(u) == x[perm].view(u)).all()
        assert (cupy.asnumpy(gpu.argsort(d)) == perm).all()


if __name__ == "__main__":
    main()
