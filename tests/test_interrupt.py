"""sort_zarr and ``gpusort sort`` under a real Ctrl-C: no temporary store left, no success turned into failure.

Each test runs ``sort_zarr`` (or the command) in a child process on a
``LocalCluster`` of worker processes and sends it SIGINT: to its whole
process group, as a terminal's Ctrl-C does, so the worker processes get it too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from gpusort import runtime

pytestmark = [pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning"),
              pytest.mark.skipif(sys.platform == "win32", reason="process groups and SIGINT are POSIX")]

SCRIPT = textwrap.dedent("""
    import os, signal, sys
    from distributed import Client, LocalCluster
    import gpusort.zarr_io

    src, dst, temp_dir, hook = sys.argv[1:]
    if hook != "none":
        real = gpusort.zarr_io._move_all_into_place

        def move_then_interrupt(*args):
            # A real SIGINT while the destinations move into place, or just after.
            if hook == "during":
                os.kill(os.getpid(), signal.SIGINT)
            real(*args)
            if hook == "after":
                os.kill(os.getpid(), signal.SIGINT)

        gpusort.zarr_io._move_all_into_place = move_then_interrupt
    if __name__ == "__main__":
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \\
                Client(cluster):
            print("sorting", flush=True)
            # No temp_dir: the runs wait in memory.
            gpusort.zarr_io.sort_zarr(src, dst, argsort_dst=dst + ".order", temp_dir=temp_dir or None, overwrite=True)
        print("done", flush=True)
""")


def leftovers(*folders: Path) -> list[str]:
    return sorted(p.name for folder in folders for p in folder.iterdir() if "gpusort-tmp" in p.name)


def start(tmp_path: Path, x: np.ndarray, chunk: int, hook: str,
          runs: str = "disk") -> tuple[subprocess.Popen, Path, Path]:
    src, out, temp = tmp_path / "keys.zarr", tmp_path / "out", tmp_path / "temp"
    out.mkdir()
    temp.mkdir()
    zarr.create_array(str(src), data=x, chunks=(chunk,), compressors=None)
    (tmp_path / "run.py").write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, str(tmp_path / "run.py"), str(src), str(out / "sorted.zarr"),
         str(temp) if runs == "disk" else "", hook],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,  # its own process group, that killpg reaches as Ctrl-C would
    )
    return proc, out, temp


@pytest.mark.parametrize("runs, settle", [("disk", 0.3), ("memory", 1.0)])
def test_ctrl_c_while_sorting_leaves_nothing_behind(tmp_path, runs, settle):
    """Ctrl-C with runs being written to disk, or with reads, the exchange and writes under way in memory."""
    # 256 MiB of keys: a few seconds of sorting on two cores, so still under way.
    x = np.random.default_rng(0).integers(-2**62, 2**62, 2**25)
    proc, out, temp = start(tmp_path, x, 2**21, "none", runs=runs)
    begun = temp if runs == "disk" else out  # the runs' store, or the destination's work folder
    try:
        deadline = time.monotonic() + 60
        while not leftovers(begun):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the sort never started"
            time.sleep(0.02)
        time.sleep(settle)  # both workers at work
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err, err[-2000:]
    time.sleep(0.5)  # a worker's late write would land now
    assert leftovers(out, temp) == []
    assert sorted(p.name for p in out.iterdir()) == []  # neither destination appeared


@pytest.mark.parametrize("hook", ["during", "after"])
def test_ctrl_c_once_the_destination_is_in_place_is_no_failure(tmp_path, hook):
    x = np.random.default_rng(1).integers(0, 1000, 2**16)
    proc, out, temp = start(tmp_path, x, 2**13, hook)
    try:
        stdout, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0 and "done" in stdout, err[-2000:]
    assert "the sort succeeded" in err
    np.testing.assert_array_equal(zarr.open_array(str(out / "sorted.zarr"))[:], np.sort(x))
    np.testing.assert_array_equal(zarr.open_array(str(out / "sorted.zarr.order"))[:], np.argsort(x, kind="stable"))
    assert leftovers(out, temp) == []


@pytest.fixture(scope="module")
def big_keys(tmp_path_factory) -> Path:
    """256 MiB of keys: a few seconds of sorting on two cores, so still under way when Ctrl-C comes."""
    src = tmp_path_factory.mktemp("big") / "keys.zarr"
    x = np.random.default_rng(2).integers(-2**62, 2**62, 2**25)
    zarr.create_array(str(src), data=x, chunks=(2**21,), compressors=None)
    return src


@pytest.mark.parametrize("kind", ["local", "process", "cuda"])
def test_ctrl_c_on_the_command_line_is_one_line(tmp_path, big_keys, kind):
    """`gpusort sort` on a cluster it starts, Ctrl-C: the command's line alone, status 130, nothing left."""
    psutil = pytest.importorskip("psutil")
    if kind == "cuda" and runtime.cuda_cluster_missing():
        pytest.skip(runtime.cuda_cluster_missing())
    out, temp = tmp_path / "out", tmp_path / "temp"
    out.mkdir()
    temp.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpusort", "sort", str(big_keys), str(out / "sorted.zarr"), "--cluster", kind,
         "--temp-dir", str(temp), "--quiet"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True)  # its own process group, as a terminal's
    try:
        deadline = time.monotonic() + 120
        while not leftovers(temp):  # the runs' store: the cluster is up and phase 1 has begun
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the sort never started"
            time.sleep(0.02)
        time.sleep(0.3)  # runs being written
        workers = psutil.Process(proc.pid).children(recursive=True)
        os.killpg(proc.pid, signal.SIGINT)
        stdout, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert (proc.returncode, stdout) == (130, ""), err[-2000:]
    assert err.endswith("gpusort sort: interrupted\n") and len(err.splitlines()) <= 2 and "Traceback" not in err, err
    _, alive = psutil.wait_procs(workers, timeout=30)  # the worker processes ended with it
    assert alive == []
    assert leftovers(out, temp) == [] and list(out.iterdir()) == []
