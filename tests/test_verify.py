"""verify: accepts exactly the sorted permutations, and says where it fails."""

from __future__ import annotations

import os
import subprocess
import sys

import dask.array as da
import numpy as np
import pytest
import zarr
from reference import KEY_DTYPES, TIES, make_keys, ref_argsort

import gpusort
from gpusort.backends import numpy as numpy_backend
from gpusort.verification import verify


def chunked(x: np.ndarray, chunks=97) -> da.Array:
    return da.from_array(x, chunks=chunks)


@pytest.mark.parametrize("dtype", KEY_DTYPES)
@pytest.mark.parametrize("descending", [False, True])
def test_accepts_the_sorted_permutation(dtype, descending):
    x = make_keys(7, dtype, 1_000, TIES)
    report = verify(chunked(x), chunked(x[ref_argsort(x, descending)], 130), descending=descending)
    assert report.ok and bool(report), str(report)
    assert report.n_src == report.n_dst == x.size and report.first_unsorted is None
    assert str(report).startswith("OK: dst is src sorted (1000 elements")


def test_bits_not_values():
    """The sort returns the input's exact bits: zeros keep their signs, NaNs their payloads."""
    nan2 = np.array(0x7E01, np.uint16).view(np.float16)  # a NaN with another payload
    x = np.array([0.0, np.nan, -0.0, 0.0, 1.0, nan2], np.float16)
    # -0.0 and 0.0 tie, NaNs tie: any order among them is sorted.
    for y in ([-0.0, 0.0, 0.0, 1.0, np.nan, nan2], [0.0, -0.0, 0.0, 1.0, nan2, np.nan]):
        assert verify(chunked(x, 2), chunked(np.array(y, np.float16), 3)).ok
    for y in ([-0.0, -0.0, 0.0, 1.0, np.nan, nan2],   # a zero's sign changed
              [-0.0, 0.0, 0.0, 1.0, np.nan, np.nan]):  # a NaN payload changed
        report = verify(chunked(x, 2), chunked(np.array(y, np.float16), 3))
        assert "checksums differ" in str(report) and report.first_unsorted is None


def splitmix_oracle(x: np.ndarray) -> int:
    """SplitMix64 in Python integers over every element's bits, summed mod 2^64: independent of verify."""
    total = 0
    for b in x.view(f"u{x.dtype.itemsize}").tolist():
        z = (b + 0x9E3779B97F4A7C15) % 2**64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2**64
        total += z ^ (z >> 31)
    return total % 2**64


CHECKSUM_DTYPES = ("bool", "int8", "uint16", "float16", "int32", "float32", "float64", "datetime64[ms]", ">i8")


def checksums_match_the_oracle(device: str) -> None:
    for dtype in CHECKSUM_DTYPES:
        x = make_keys(7, dtype, 3 * 1000 + 5, TIES)  # several slices (pieces) and a ragged one
        report = verify(chunked(x, 2 * 1000 + 1), chunked(x[ref_argsort(x)], 1000), device=device)
        assert report.ok and report.checksum_src == report.checksum_dst == splitmix_oracle(x), dtype


def unsorted_found_at(where: int, device: str) -> None:
    y = np.arange(3000, dtype=np.int64)
    y[[where, where + 1]] = y[[where + 1, where]]
    report = verify(chunked(np.arange(len(y)), 700), chunked(y, len(y)), device=device)
    assert report.first_unsorted == where and "checksums differ" not in str(report)


def test_checksum_is_of_the_exact_bits_for_every_width(monkeypatch):
    monkeypatch.setattr(numpy_backend, "SLICE", 1000)
    checksums_match_the_oracle("cpu")


@pytest.mark.parametrize("where", [0, 999, 1000, 2003])
def test_unsorted_at_slice_boundaries(where, monkeypatch):
    """A chunk is checked in slices; the pairs across them count too."""
    monkeypatch.setattr(numpy_backend, "SLICE", 1000)
    unsorted_found_at(where, "cpu")


def test_device_is_checked():
    with pytest.raises(ValueError, match="device='tpu'; use 'auto', 'cpu' or 'gpu'"):
        verify([1], [1], device="tpu")


@pytest.mark.gpu
def test_host_chunks_checked_on_the_gpu_in_pieces(monkeypatch):
    """NumPy chunks go up in pieces: the checksums and the pairs across pieces as on the CPU."""
    from gpusort.backends import cupy as gpu_backend

    monkeypatch.setattr(gpu_backend, "SCAN_PIECE", 1000)
    checksums_match_the_oracle("gpu")
    for where in (0, 998, 999, 1000, 2003, 2998):
        unsorted_found_at(where, "gpu")


def test_array_likes_and_descending_checked_like_sort():
    assert gpusort.verify(np.array([2, 1, 3]), [1, 2, 3]).ok
    assert gpusort.verify([2, 1, 3], (3, 2, 1), descending=True).ok
    assert gpusort.verify(np.array([2, 1, 3]), da.from_array(np.array([3, 2, 1])), descending=np.True_).ok
    with pytest.raises(TypeError, match="descending must be True or False; got 'no'"):
        gpusort.verify([1], [1], descending="no")
    with pytest.raises(TypeError, match="dst must be the path of a Zarr array, .* or a NumPy/CuPy array; got int"):
        gpusort.verify([1], 1)
    with pytest.raises(TypeError, match="src is a masked array"):
        gpusort.verify(np.ma.masked_array([1, 2], mask=[0, 1]), [1, 2])


def test_package_exports_verify_lazily():
    code = ("import sys, gpusort; assert 'gpusort.verify' not in sys.modules and 'zarr' not in sys.modules; "
            "from gpusort.verification import VerifyReport; "  # binds gpusort.verify to the module: still callable
            "assert gpusort.verify([2, 1], [1, 2]).ok and 'verify' in gpusort.__all__")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [d for d in KEY_DTYPES if np.dtype(d).kind not in "mM"])  # CuPy has no datetimes
def test_gpu_checksum_and_order_match_the_cpu(dtype):
    import cupy

    x = make_keys(7, dtype, 50_000, TIES)
    y = x[ref_argsort(x)]
    on_cpu = verify(chunked(x, 7_000), chunked(y, 9_000))
    on_gpu = verify(chunked(cupy.asarray(x), 7_000), chunked(cupy.asarray(y), 9_000))
    assert on_cpu.ok and on_gpu.ok
    assert on_gpu.checksum_src == on_cpu.checksum_src
    reversed_ = verify(chunked(x, 7_000), chunked(cupy.asarray(y[::-1].copy()), 9_000))
    assert reversed_.first_unsorted is not None and reversed_.checksum_dst == on_cpu.checksum_src


@pytest.mark.parametrize("dtype", ["int64", "float32", "datetime64[ns]", "uint8"])
def test_catches_unsorted_and_names_the_first_position(dtype):
    x = make_keys(7, dtype, 1_000, TIES)
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
    x = make_keys(7, "float64", 1_000, TIES)
    # np.sort rewrites NaN payloads on CPUs with AVX-512 (its SIMD sort writes one NaN): a stable
    # gather keeps every bit, as gpusort's sort does.
    for name, data in (("src.zarr", x), ("dst.zarr", x[np.argsort(x, kind="stable")])):
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


def test_device_gpu_without_a_gpu_is_named():
    from gpusort import runtime

    if runtime.gpus()[0]:
        pytest.skip("a GPU is here: device='gpu' runs")
    with pytest.raises(ValueError, match="device='gpu'.*device='auto'"):
        gpusort.verify(np.arange(4), np.arange(4), device="gpu")
