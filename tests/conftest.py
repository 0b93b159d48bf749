"""Test-wide markers: ``gpu`` tests skip, with the reason, where no GPU is usable."""

from __future__ import annotations

import functools

import pytest


@functools.cache
def gpu_count() -> tuple[int, str]:
    """(number of usable CUDA devices, why none) without importing CuPy eagerly."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a CuPy built for another CUDA
        return 0, f"CuPy is not importable ({exc.__class__.__name__}: {exc})"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return 0, f"CuPy finds no CUDA device ({exc})"
    return n, "" if n else "CuPy finds no CUDA device"


def pytest_collection_modifyitems(config, items):
    n, why = gpu_count()
    for item in items:
        if "multi_gpu" in item.keywords and n < 2:
            item.add_marker(pytest.mark.skip(reason=f"needs 2 GPUs, found {n} {why}".strip()))
        elif "gpu" in item.keywords and n == 0:
            item.add_marker(pytest.mark.skip(reason=why))
