"""A few small sorts and merges that exercise every kernel path; exits non-zero on a wrong result.

Meant to run under compute-sanitizer, where full test sizes would take too long,
from a source checkout (the expected orders come from ``tests/reference.py``)::

    compute-sanitizer --tool memcheck --error-exitcode 9 python benchmarks/gpu_smoke.py
    compute-sanitizer --tool racecheck --error-exitcode 9 python benchmarks/gpu_smoke.py

Sizes leave a partial last tile and a partial last group of runs: keys-only
sorts of 8-byte keys and packed argsorts take two four-way merge passes,
other sorts four two-way ones, whose partitions search with lane groups
ascending and with one lane a tile descending.  The last sorts begin with a
bucket pass, whose sample spans three tiles.
"""

from __future__ import annotations

import sys
from pathlib import Path

import cupy
import numpy as np

import gpusort.gpu as gpu
from gpusort.cuda import build, dispatch, tuning

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # for `reference`
from reference import ref_argsort  # noqa: E402


def main() -> None:
    tuning.FOUR_WAY_MIN_KEYS = 0  # the sizes here are far below it: make 8-byte sorts merge four ways
    rng = np.random.default_rng(0)
    arch = int(cupy.cuda.Device().compute_capability)
    for dtype in ("int8", "int32", "float64"):
        nt, vt = tuning.launch_box(arch, np.dtype(dtype).itemsize)
        n = 9 * nt * vt + 5
        x = (rng.standard_normal(n) * 50).astype(dtype)
        d = cupy.asarray(x)
        for descending in (False, True):
            tuning.PARTITION_GROUP_TILES = 0 if descending else 2**40
            perm = ref_argsort(x, descending)
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
    # Packed argsorts (int8 and int32 above) that end in the blocksort or in a two-way pass.
    nv = build.kernels(tuning.WORD, 0, False).nv
    for n in (nv - 1, 2 * nv - 3):
        x = rng.integers(-3, 3, n).astype(np.int32)
        assert (cupy.asnumpy(dispatch.packed_argsort(cupy.asarray(x))) == ref_argsort(x)).all()
    # Bucket passes (forced at this size, with a small sample): keys spread
    # over many buckets of one partial tile, and keys of a few values whose
    # buckets take two- and four-way passes; a sort and a packed argsort.
    tuning.BUCKET_MIN_BYTES, tuning.BUCKET_LEVELS_SAVED, tuning.BUCKET_SAMPLE = 0, 0, 64
    for dtype, values in (("int32", 2**31), ("float64", 0), ("int32", 3), ("float32", 0)):
        x = (rng.integers(-values, values, 70_003) if values else rng.standard_normal(70_003)).astype(dtype)
        if dtype == "float32":  # exact keys: both zeros and NaNs of two bit patterns tie
            x[::7], x[::11], x[::13], x[::17] = -0.0, 0.0, np.nan, -np.nan
        d = cupy.asarray(x)
        perm = ref_argsort(x)
        u = f"u{x.itemsize}"  # bits: NaN payloads and the sign of zero count
        assert (cupy.asnumpy(gpu.sort(d)).view(u) == x[perm].view(u)).all()
        assert (cupy.asnumpy(gpu.argsort(d)) == perm).all()
    cupy.cuda.runtime.deviceSynchronize()
    print("gpu smoke OK")


if __name__ == "__main__":
    main()
