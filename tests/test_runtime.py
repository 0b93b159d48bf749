"""gpusort.runtime: the cluster factory, the GPU probe, time by phase, bytes moved, progress lines."""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import logging
import os
import re
import subprocess
import sys
import threading
import time

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import wait
from distributed.comm import CommClosedError
from distributed.diagnostics.plugin import WorkerPlugin

import gpusort
from gpusort import runtime
from gpusort.engine.graph import PHASES


def test_threads_yields_no_client_and_sets_the_threads():
    with runtime.cluster("threads", threads=3) as client:
        assert client is None
        assert dask.config.get("scheduler") == "threads" and dask.config.get("num_workers") == 3
    assert dask.config.get("num_workers", None) != 3


def test_local_cluster_with_two_single_thread_workers_and_phase_costs():
    with runtime.cluster("local", workers=2, threads=1) as client:
        assert sorted(client.nthreads().values()) == [1, 1]
        x = da.from_array(np.random.default_rng(0).integers(0, 1000, 20_000), chunks=5_000).persist()
        wait(x)
        moved, start = runtime.bytes_moved(client), time.time()
        with dask.config.set({"gpusort.task-bytes": 0}):  # one run per chunk, unbatched
            y = gpusort.sort(x).persist()
        wait(y)
        costs = runtime.task_costs(client, start)
        assert list(costs)[:len(PHASES)] == list(PHASES)  # every phase ran, reported in the graph's order
        assert all(costs[p]["seconds"] > 0 for p in PHASES)  # the exchange's, timed on the workers
        assert costs["exchange"]["tasks"] == 4  # one transfer per input chunk, where it lives
        assert costs["merges"]["tasks"] == 4  # one view per output chunk
        assert runtime.phase_seconds(client, start).keys() == costs.keys()
        assert runtime.bytes_moved(client) - moved > 0  # two workers merge each other's runs
        np.testing.assert_array_equal(y.compute(), np.sort(x.compute()))


class _HeartbeatFailsAtClose(WorkerPlugin):
    """As its worker closes, logs what a heartbeat that meets the scheduler gone first logs, and an error."""

    def teardown(self, worker):
        log = logging.getLogger("distributed.worker")
        try:
            raise CommClosedError("in <TCP (closed) ConnectionPool.heartbeat_worker local=tcp://127.0.0.1:1>: "
                                  "Stream is closed")
        except OSError:
            log.exception("Failed to communicate with scheduler during heartbeat.")
        log.error("an error worth reading")


def test_the_workers_of_a_local_cluster_close_quietly_but_for_their_errors(capfd):
    """A heartbeat's failure as the workers close after the work is done says nothing; other errors still show.

    (What the scheduler logs, in this process, pytest's own capture takes:
    ``test_cli`` checks it on the command line.)
    """
    with runtime.cluster("local", workers=2, threads=1) as client:
        client.register_plugin(_HeartbeatFailsAtClose())
        x = da.random.default_rng(0).integers(0, 100, 20_000, chunks=2_000)
        np.testing.assert_array_equal(gpusort.sort(x).compute(), np.sort(x.compute()))
    logged = [line for line in capfd.readouterr().err.splitlines() if re.search(r" - (WARNING|ERROR) - ", line)]
    assert [line.partition(" - ")[2] for line in logged] == ["distributed.worker - ERROR - an error worth reading"] * 2


def test_phase_of_follows_graph_phases_and_keeps_unknown_prefixes(monkeypatch):
    monkeypatch.setitem(PHASES, "splitters", ("probe",))
    assert runtime.phase_of(("probe-123abc", 0)) == "splitters"
    assert runtime.phase_of("nonesuch-123abc") == "nonesuch"  # in no phase: its own name
    assert runtime.phase_of(("merge-sorted-123abc", 2)) == "merges"


@pytest.mark.parametrize("kind, options, message", [
    ("lcoal", {}, "kind='lcoal' is not known; choose one of auto, threads, local, cuda, process, or a scheduler"),
    ("threads", {"workers": 2}, "workers=2 applies only to kind='local' or kind='cuda', not to kind='threads'"),
    ("local", {"rmm_pool_size": "1GiB"}, "rmm_pool_size='1GiB' applies only to kind='cuda', not to kind='local'"),
    ("tcp://10.0.0.1:8786", {"threads": 2}, "threads=2 applies only to"),
    ("local", {"workers": 0}, "workers=0: give a whole number of at least 1"),
])
def test_bad_cluster_options_say_what_and_how(kind, options, message):
    with pytest.raises(ValueError) as error:
        with runtime.cluster(kind, **options):
            pass
    assert message in str(error.value)


@pytest.mark.skipif(runtime.cuda_cluster_missing() is None, reason="a CUDA cluster can start here")
def test_cuda_without_the_gpu_stack_says_what_to_install():
    with pytest.raises(ValueError, match=r"kind='cuda' cannot start here: .*pip install.*; or use kind='local'"):
        with runtime.cluster("cuda"):
            pass


def test_auto_is_local_without_a_gpu_stack():
    assert runtime.resolve("auto") == ("local" if runtime.cuda_cluster_missing() else "cuda")


def test_the_probe_and_the_default_backend_agree():
    names, why = runtime.gpus()
    assert bool(names) != bool(why)
    assert runtime.default_backend() == ("cupy" if names else "numpy")


def test_options_to_cluster():
    parser = argparse.ArgumentParser(allow_abbrev=False)
    runtime.add_options(parser, gpu=True)
    args = parser.parse_args(["--cluster", "threads", "--threads", "2", "--memory-limit", "0"])
    assert (args.threads, args.memory_limit, args.gpus, args.protocol) == (2, 0, None, None)
    with pytest.raises(ValueError, match="memory_limit=0 applies only to"):
        with runtime.from_options(args):
            pass
    with pytest.raises(SystemExit) as exit:
        with runtime.from_options(args, parser):
            pass
    assert exit.value.code == 2


@pytest.mark.parametrize("given, codecs, kind, want", [
    ([], True, "cuda", "codec"),            # Zarr's codecs bound the work: a thread per core
    (["--threads", "2"], True, "cuda", 2),  # what the user gave wins
    ([], False, "cuda", None),              # the GPU bounds it: cluster's own default
    ([], True, "local", None),              # CPU clusters keep Dask's
])
def test_codec_bound_work_gets_a_thread_per_core(monkeypatch, given, codecs, kind, want):
    import gpusort.runtime.options as options

    asked = {}

    @contextlib.contextmanager
    def recording(kind, **kwargs):
        asked.update(kwargs)
        yield None

    monkeypatch.setattr(options, "cluster", recording)
    monkeypatch.setattr(options, "resolve", lambda _: kind)
    monkeypatch.setattr(options, "codec_threads", lambda: 12)
    parser = argparse.ArgumentParser(allow_abbrev=False)
    runtime.add_options(parser, gpu=True)
    with runtime.from_options(parser.parse_args(given), codecs=codecs):
        pass
    assert asked["threads"] == (12 if want == "codec" else want)
    assert 4 <= runtime.codec_threads() <= max(4, os.cpu_count())


def test_flags():
    assert runtime.flags("kind='x' is not known; pass overwrite=True") == "--cluster x is not known; pass --overwrite"
    assert runtime.flags("the workers merge chunks") == "the workers merge chunks"  # words, not arguments


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_redraws_in_a_file_become_a_line_now_and_then():
    log, clock = io.StringIO(), FakeClock()
    lines = runtime._Lines(log, every=30.0, clock=clock)
    for second in range(222 * 10):  # a 222 s bar, redrawn every 0.1 s
        clock.now = second / 10
        lines.write(f"\r[{second:5}] | {second // 22}% Completed | {second / 10:.1f}s")
    lines.write("\n")
    print("done", file=lines)
    lines.finish()
    written = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and 8 <= len(written) <= 10
    assert written[0].startswith("[    0]") and written[-2].startswith("[ 2219]") and written[-1] == "done"


def test_distributed_bars_end_with_their_last_state():
    log = io.StringIO()
    lines = runtime._Lines(log, every=30.0)
    lines.write("\r[#   ] | 25% Completed | 1s")
    lines.write("\r[####] | 100% Completed | 4s")
    lines.write("\x1b[2K\r")  # distributed's text bar clears its line when done
    lines.finish()
    assert log.getvalue() == "[#   ] | 25% Completed | 1s\n[####] | 100% Completed | 4s\n"


def test_progress_leaves_a_terminal_alone(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    with runtime.progress() as stream:
        assert stream is terminal
        stream.write("\r[#] 1%\r[##] 2%")
    assert terminal.getvalue() == "\r[#] 1%\r[##] 2%"


def test_write_json_never_overwrites(tmp_path):
    paths = {runtime.write_json(tmp_path, "demo", {"n": i}) for i in range(5)}
    assert len(paths) == 5 and all(p.name.startswith("demo-") for p in paths)


def test_map_modules_maps_every_imported_module_file():
    """What a worker's first Reschedule would map (inspect's module cache) is mapped beforehand."""
    code = ("import inspect, os, distributed.worker as w; from gpusort.warmup import map_modules; "
            "path = os.path.realpath(w.__file__); before = path in inspect.modulesbyfile; map_modules(); "
            "print(before, path in inspect.modulesbyfile)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]


def test_warm_links_sends_between_every_ordered_pair_of_workers(monkeypatch):
    """Every worker receives one buffer from each other worker (host buffers stand in for GPU ones)."""
    from distributed import Client, LocalCluster

    from gpusort import warmup

    monkeypatch.setattr(warmup, "_gpu_buffer", lambda nbytes: np.zeros(nbytes, np.uint8))
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        warmup.warm_links(client, 1000)
        received = {w.address: sorted(e["who"] for e in w.transfer_incoming_log) for w in cluster.workers.values()}
    assert {w: len(set(senders)) for w, senders in received.items()} == dict.fromkeys(received, 2)
    assert all(w not in senders for w, senders in received.items())



def test_wait_for_kernels_returns_once_every_worker_has_loaded(monkeypatch):
    """A cluster is handed over only after the plugin's thread ends: a sort beside it would share the interpreter."""
    from distributed import Client, LocalCluster

    from gpusort import warmup

    loading = threading.Event()
    monkeypatch.setattr(warmup, "warm", lambda sorts: (loading.set(), time.sleep(0.5)))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        client.register_plugin(warmup.WarmKernels())
        loading.wait(10)
        plugins = [w.plugins[warmup.WarmKernels.name] for w in cluster.workers.values()]
        assert not all(p.done.is_set() for p in plugins)  # still loading: the wait below has work to do
        warmup.wait_for_kernels(client)
        assert all(p.done.is_set() for p in plugins)
    frozen = gc.get_freeze_count()
    gc.unfreeze()
    assert frozen > 0  # the workers' (here this process's) imports stay out of full collections


def test_a_local_cluster_freezes_this_process_heap_while_it_runs():
    gc.unfreeze()
    with runtime.cluster("local", workers=1, threads=1) as client:
        assert client is not None and gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_a_local_cluster_leaves_a_heap_the_caller_froze_as_it_was():
    gc.unfreeze()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with runtime.cluster("local", workers=1, threads=1):
            assert 0 < gc.get_freeze_count() <= frozen  # nothing more frozen (frozen objects can be freed)
        assert 0 < gc.get_freeze_count() <= frozen  # the caller's freeze outlives the cluster
    finally:
        gc.unfreeze()


def test_gpu_workers_copy_large_blocks_past_the_cache_unless_the_user_tuned_glibc(monkeypatch):
    """A ``"process"`` cluster's worker (as every GPU cluster's) starts with glibc's non-temporal threshold set."""
    from gpusort.runtime import clusters

    def tunables(client) -> list:
        return list(client.run(lambda: os.environ.get("GLIBC_TUNABLES")).values())

    monkeypatch.setenv("GLIBC_TUNABLES", "")
    monkeypatch.delenv("GLIBC_TUNABLES")  # and put back as it was after the test: starting a worker sets it here
    with runtime.cluster("process", threads=1) as client:
        assert tunables(client) == [f"glibc.cpu.x86_non_temporal_threshold={clusters.NON_TEMPORAL_BYTES:#x}"]
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.check=0")
    with runtime.cluster("process", threads=1) as client:
        assert tunables(client) == ["glibc.malloc.check=0"]
    monkeypatch.delenv("GLIBC_TUNABLES")
    with runtime.cluster("local", workers=1, threads=1) as client:
        assert tunables(client) == [None]  # a CPU cluster's workers keep glibc's own choice
