"""The examples in the docstrings run and print what they say.

Only the modules that import without CuPy: the GPU ones (``gpusort.gpu``,
``gpusort.staging``, ``gpusort.backends.cupy``) need a GPU to say anything.
"""

from __future__ import annotations

import doctest
import importlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))  # for `harness`

MODULES = [
    "gpusort.api", "gpusort.backends", "gpusort.backends.numpy", "gpusort.budget", "gpusort.cli",
    "gpusort.composite", "gpusort.corank", "gpusort.dataframe", "gpusort.graph", "gpusort.kernels", "gpusort.order",
    "gpusort.runtime", "gpusort.sorted_merge", "gpusort.verification", "gpusort.zarr_io", "harness",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed (output above)"
