"""The CPU workflow (workflows/zarr_sort.py) end to end, small, on the threaded scheduler."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

WORKFLOWS = Path(__file__).resolve().parent.parent / "workflows"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, WORKFLOWS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_zarr_sort_workflow_sorts_verifies_and_records(tmp_path, capsys):
    zarr_sort = load("zarr_sort")
    code = zarr_sort.main(["--keys", "1000", "--chunks", "6", "--dtype", "float32", "--descending",
                           "--backend", "numpy", "--cluster", "threads", "--workdir", str(tmp_path / "work"),
                           "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code == 0 and "OK: dst is src sorted (1000 elements" in out
    (path,) = (tmp_path / "out").glob("zarr_sort-*.json")
    summary = json.loads(path.read_text())
    assert summary["verified"] and summary["keys"] == 1000 and summary["chunks"] == 6
    assert summary["dtype"] == "float32" and (tmp_path / "work" / "sorted.zarr").is_dir()
