"""Test-wide markers: ``gpu`` tests skip, with the reason, where no GPU is usable."""

from __future__ import annotations

import os
import time
import zlib

import numpy as np
import pytest

from gpusort import runtime


def pytest_sessionstart(session):
    """On a GPU machine, compile every kernel module first, in parallel, into CuPy's on-disk cache.

    Tests would otherwise compile modules one after another as each first
    needs one (most of a fresh GPU suite's time); with pytest-xdist only the
    controller does it, and every worker then loads from the cache.
    ``GPUSORT_PRECOMPILE=0`` skips it.
    """
    if hasattr(session.config, "workerinput") or os.environ.get("GPUSORT_PRECOMPILE") == "0":
        return
    if not runtime.gpus()[0]:
        return
    from gpusort.cuda import build

    start = time.perf_counter()
    modules = build.precompile()
    print(f"\ngpusort: {modules} kernel modules ready in {time.perf_counter() - start:.1f} s")


def pytest_collection_modifyitems(config, items):
    names, why = runtime.gpus()
    for item in items:
        if "multi_gpu" in item.keywords and len(names) < 2:
            item.add_marker(pytest.mark.skip(reason=f"needs 2 GPUs, found {len(names)} {why}".strip()))
        elif "gpu" in item.keywords and not names:
            item.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture
def not_installed(tmp_path):
    """``not_installed(*modules)``: a folder that, first on ``PYTHONPATH``, makes each top-level module unimportable.

    A subprocess (and its own subprocesses) with it then fails to import them
    just as where their package is not installed: ``ModuleNotFoundError``
    naming the module.
    """
    def folder(*modules: str):
        where = tmp_path / "not-installed"
        for name in modules:
            (where / name).mkdir(parents=True, exist_ok=True)
            (where / name / "__init__.py").write_text(
                f"raise ModuleNotFoundError(\"No module named '{name}'\", name={name!r})\n")
        return where

    return folder


@pytest.fixture
def rng(request):
    """A generator seeded by the test's name: each test its own data, the same on every run."""
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))
