"""The examples in the docstrings run and print what they say, and leave nothing behind.

Only the modules that import without CuPy: the GPU ones (``gpusort.gpu``,
``gpusort.memory.staging``, ``gpusort.backends.cupy``) need a GPU to say anything.
"""

from __future__ import annotations

import doctest
import importlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))  # for `harness`

MODULES = [
    "gpusort.front.api", "gpusort.arrays", "gpusort.backends", "gpusort.backends.numpy", "gpusort.memory.plan", "gpusort.cli",
    "gpusort.engine.tasks", "gpusort.keys.composite", "gpusort.keys.corank", "gpusort.front.dataframe", "gpusort.engine.graph", "gpusort.memory.hostpool",
    "gpusort.cuda.build", "gpusort.cuda.tuning", "gpusort.cuda.buckets", "gpusort.keys.order", "gpusort.warmup",
    "gpusort.runtime.clusters", "gpusort.runtime.options", "gpusort.runtime.record",
    "gpusort.front.sorted_merge", "gpusort.keys.text", "gpusort.verification", "gpusort.zarr_io", "harness",
    "gpusort.engine.collective", "gpusort.engine.comms", "gpusort.engine.nccl", "gpusort.engine.exchange",
    "gpusort.engine.along", "gpusort.engine.select", "gpusort.engine.multikey",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name, tmp_path, monkeypatch):
    # Examples that write files write them here, in the current folder or in
    # tempfile's, and pytest removes the folder.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed (output above)"


def test_a_passing_run_leaves_no_files_behind(tmp_path):
    """pytest on the doctests that write files, and on a test that writes into its tmp_path: once they
    pass, no file is left in the temporary folder, neither by the examples nor in pytest's own folders."""
    (tmp_path / "test_writes.py").write_text(
        "def test_writes(tmp_path):\n    (tmp_path / 'data.bin').write_bytes(bytes(2**20))\n")
    temp = tmp_path / "tmp"
    temp.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
         "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT),
         str(tmp_path / "test_writes.py"), __file__, "-k", "test_writes or runtime or zarr_io"],
        cwd=ROOT, env=os.environ | {"TMPDIR": str(temp), "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "5 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(str(p.relative_to(temp)) for p in temp.rglob("*") if p.is_file()) == []
