"""verify: accepts exactly the sorted permutations, and says where it fails."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import zarr
from reference import KEY_DTYPES, ref_argsort

from gpusort.verify import verify


def keys(dtype: str, n: int = 1_000) -> np.ndarray:
    rng = np.random.default_rng(7)
    dt = np.dtype(dtype)
    if dt.kind in "mM":
        x = rng.integers(-50, 50, n).view(dt)
        x[::9] = np.array("NaT", dtype=dt)
        return x
    x = rng.integers(0, 2 if dt.kind == "b" else 100, n).astype(dt)
    if dt.kind == "f":
        x[::7], x[::11] = np.nan, -0.0
    return x


def chunked(x: np.ndarray, chunks=97) -> da.Array:
    return da.from_array(x, chunks=chunks)


@pytest.mark.parametrize("dtype", KEY_DTYPES)
@pytest.mark.parametrize("descending", [False, True])
def test_accepts_the_sorted_permutation(dtype, descending):
    x = keys(dtype)
    report = verify(chunked(x), chunked(x[ref_argsort(x, descending)], 130), descending=descending)
    assert report.ok and bool(report), str(report)
    assert report.n_src == report.n_dst == x.size and report.first_unsorted is None
    assert str(report).startswith("OK: dst is src sorted (1000 elements")


def test_values_not_bits():
    # np.sort itself turns some 0.0 into -0.0 and rewrites float16 NaN payloads.
    x = np.array([0.0, np.nan, -0.0, 0.0, 1.0], np.float16)
    assert verify(chunked(x, 2), chunked(np.array([-0.0, -0.0, 0.0, 1.0, np.nan], np.float16), 3)).ok


@pytest.mark.parametrize("dtype", ["int64", "float32", "datetime64[ns]", "uint8"])
def test_catches_unsorted_and_names_the_first_position(dtype):
    x = keys(dtype)
    y = x[ref_argsort(x)]
    bad = y.copy()
    i = 200 + int(np.flatnonzero(y[200:-1] < y[201:])[0])  # swapping y[i], y[i + 1] breaks the order
    bad[[i, i + 1]] = bad[[i + 1, i]]
    report = verify(chunked(x), chunked(bad, 100))
    assert not report.ok and report.first_unsorted == i
    assert f"dst is not sorted ascending: dst[{i}] = {bad[i]} comes before dst[{i + 1}] = {bad[i + 1]}" in str(report)
    assert "checksums differ" not in str(report)  # still a permutation


def test_catches_unsorted_across_a_chunk_boundary():
    x = np.arange(100)
    y = x.copy()
    y[[49, 50]] = y[[50, 49]]
    report = verify(chunked(x, 10), chunked(y, 50))  # 49 | 50 is the boundary of dst's chunks
    assert report.first_unsorted == 49 and "dst[49] = 50 comes before dst[50] = 49" in str(report)


def test_empty_chunks_are_skipped_at_boundaries():
    def with_empty_chunk(a, b):
        return da.concatenate([da.from_array(np.array(a)), da.zeros(0, dtype=np.int64), da.from_array(np.array(b))])

    assert verify(chunked(np.array([0, 1, 2])), with_empty_chunk([1, 2], [0])).first_unsorted == 1
    assert verify(chunked(np.array([2, 1, 0])), with_empty_chunk([0, 1], [2])).ok


def test_catches_missing_extra_and_changed_elements():
    x = np.random.default_rng(1).permutation(1000)
    y = np.sort(x)
    missing = verify(chunked(x), chunked(y[:-1]))
    assert "dst has 999 elements but src has 1000" in str(missing)
    changed = y.copy()
    changed[500] += 1  # still sorted: the checksum alone can see it
    changed = np.sort(changed)
    report = verify(chunked(x), chunked(changed))
    assert not report.ok and report.first_unsorted is None
    assert "checksums differ" in str(report) and report.checksum_src != report.checksum_dst
    duplicated = np.concatenate([y[:-2], y[-3:-2], y[-1:]])  # one lost, one doubled
    assert "checksums differ" in str(verify(chunked(x), chunked(duplicated)))


def test_nan_must_come_last_in_both_directions():
    x = np.array([1.0, np.nan, 2.0])
    assert not verify(chunked(x), chunked(np.array([np.nan, 1.0, 2.0]))).ok
    assert verify(chunked(x), chunked(np.array([2.0, 1.0, np.nan])), descending=True).ok
    assert verify(chunked(x), chunked(np.array([np.nan, 2.0, 1.0])), descending=True).first_unsorted == 0


def test_zarr_paths(tmp_path):
    x = keys("float64")
    for name, data in (("src.zarr", x), ("dst.zarr", np.sort(x))):
        zarr.create_array(str(tmp_path / name), data=data, chunks=(300,))
    assert verify(tmp_path / "src.zarr", str(tmp_path / "dst.zarr")).ok


@pytest.mark.parametrize("src, dst, error, message", [
    ("missing.zarr", np.arange(3), FileNotFoundError, "src: .*missing.zarr does not exist"),
    (np.arange(3), np.arange(3.0), TypeError, "dst has dtype float64 but src has dtype int64"),
    (np.array([1j]), np.array([1j]), TypeError, "src has dtype complex128"),
])
def test_bad_arguments(tmp_path, src, dst, error, message):
    src = tmp_path / src if isinstance(src, str) else chunked(src)
    with pytest.raises(error, match=message):
        verify(src, chunked(dst))
