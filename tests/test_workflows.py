"""The workflows end to end, small, on the CPU: on the threaded scheduler and on a LocalCluster."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

from gpusort import runtime

WORKFLOWS = Path(__file__).resolve().parent.parent / "workflows"
sys.path.insert(0, str(WORKFLOWS))  # as `python workflows/NAME.py` has it


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
    assert summary["machine"]["cpus"] >= 1 and summary["config"]["cluster"] == "threads"


def test_zarr_sort_workflow_sorts_a_given_array_on_a_local_cluster(tmp_path, capsys):
    keys = np.random.default_rng(1).integers(0, 100, 5000)
    zarr.create_array(str(tmp_path / "keys.zarr"), data=keys, chunks=(1000,))
    code = load("zarr_sort").main(["--src", str(tmp_path / "keys.zarr"), "--backend", "numpy", "--cluster", "local",
                                   "--workers", "2", "--threads", "1", "--out", str(tmp_path / "out")])
    assert code == 0 and "runs in memory, cluster local (2 workers, 2 threads)" in capsys.readouterr().out
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "keys-sorted.zarr"))[:], np.sort(keys))
    (path,) = (tmp_path / "out").glob("zarr_sort-*.json")
    summary = json.loads(path.read_text())
    assert "runs" in summary["phase_seconds"] and summary["disk"]["write_bytes_per_second"] > 0
    assert summary["fraction_of_disk_floor"] > 0 and summary["disk"]["stored_bytes"] > 0
    assert summary["runs"] == "memory" and summary["disk"]["passes"] == 2  # read once, written once


def test_out_of_core_sort_workflow_on_cpus(tmp_path, capsys):
    code = load("out_of_core_sort").main(["--keys", "20000", "--chunks", "4", "--backend", "numpy", "--cluster",
                                          "local", "--workers", "2", "--threads", "1", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and "numpy backend" in out and "OK: dst is src sorted (20000 elements" in out
    (path,) = tmp_path.glob("out_of_core_sort-*.json")
    (run,) = json.loads(path.read_text())["runs"]
    assert run["verified"] and run["workers"] == 2 and run["keys"] == 20000
    # Two workers: every phase ran, the exchange between them included, in the graph's order.
    assert list(run["phase_seconds"])[:4] == ["runs", "splitters", "exchange", "merges"]


@pytest.mark.skipif(runtime.cuda_cluster_missing() is None, reason="a CUDA cluster can start here")
@pytest.mark.parametrize("workflow", ["zarr_sort", "out_of_core_sort"])
def test_workflows_without_a_gpu_say_why_in_one_line(tmp_path, capsys, workflow):
    with pytest.raises(SystemExit) as exit:
        load(workflow).main(["--cluster", "cuda", "--keys", "100", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and err.count("\n") == 1 and "--cluster cuda cannot start here: " in err


@pytest.mark.parametrize("workflow", ["zarr_sort", "out_of_core_sort"])
def test_abbreviated_options_are_refused(tmp_path, capsys, workflow):
    """--key is no --keys: argparse would take any unambiguous prefix silently."""
    with pytest.raises(SystemExit) as exit:
        load(workflow).main(["--key", "100", "--cluster", "threads", "--out", str(tmp_path)])
    assert exit.value.code == 2 and "unrecognized arguments: --key 100" in capsys.readouterr().err
