"""sort_zarr: disk to disk, exact, atomic, and bounded by neither memory."""

from __future__ import annotations

import contextlib
import hashlib
import time
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from distributed import Client, LocalCluster, get_task_stream
from reference import KEY_DTYPES, TIES, assert_same_keys, make_keys, ref_argsort

import gpusort.zarr_io
from gpusort.zarr_io import sort_zarr

pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")


def make_zarr(path: Path, x: np.ndarray, chunks: int, zarr_format: int = 3) -> Path:
    z = zarr.create_array(str(path), shape=x.shape, chunks=(chunks,), dtype=x.dtype, zarr_format=zarr_format)
    z[:] = x
    return path


def read(path: Path) -> np.ndarray:
    return zarr.open_array(str(path), mode="r")[:]


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if "gpusort-tmp" in p.name)


def tree_digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        h.update(str(p.relative_to(path)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("dtype", KEY_DTYPES)
@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("runs", ["memory", "disk"])
def test_exact_for_every_key_dtype(tmp_path, dtype, descending, runs):
    x = make_keys(0, dtype, 1_000, TIES)
    src = make_zarr(tmp_path / "keys.zarr", x, 128)
    sort_zarr(src, tmp_path / "sorted.zarr", descending=descending, argsort_dst=tmp_path / "order.zarr", runs=runs)
    want = ref_argsort(x, descending)
    assert_same_keys(read(tmp_path / "sorted.zarr"), x[want])
    np.testing.assert_array_equal(read(tmp_path / "order.zarr"), want)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("n, src_chunks, out_chunks", [
    (10_000, 1_000, None),    # keeps the number of chunks
    (10_007, 1_000, 3_000),   # ragged last chunk, other output chunking
    (5, 2, 1),                # tiny
    (1, 1, None),
    (0, 4, None),             # empty
])
@pytest.mark.parametrize("runs", ["memory", "disk"])
def test_output_chunks_are_zarr_chunks(tmp_path, n, src_chunks, out_chunks, runs):
    x = make_keys(n, "int64", n, TIES)
    src = make_zarr(tmp_path / "keys.zarr", x, src_chunks)
    sort_zarr(src, tmp_path / "sorted.zarr", chunks=out_chunks, runs=runs)
    out = zarr.open_array(str(tmp_path / "sorted.zarr"), mode="r")
    np.testing.assert_array_equal(out[:], np.sort(x))
    assert out.metadata.zarr_format == 3
    assert out.chunks == (max(1, out_chunks or -(-n // max(1, -(-n // src_chunks)))),)


def test_sources_other_than_paths(tmp_path):
    x = make_keys(0, "float32", 3_000, TIES)
    # Irregular chunks: one on-disk run each, of its own length.
    sort_zarr(da.from_array(x, chunks=((1000, 7, 1500, 493),)), tmp_path / "a.zarr", chunks=1000)
    assert_same_keys(read(tmp_path / "a.zarr"), x[ref_argsort(x)])
    sort_zarr(zarr.open_array(str(make_zarr(tmp_path / "k.zarr", x, 999)), mode="r"), tmp_path / "b.zarr")
    assert_same_keys(read(tmp_path / "b.zarr"), x[ref_argsort(x)])


def test_zarr_v2_source(tmp_path):
    x = make_keys(0, "uint16", 2_000, TIES)
    src = make_zarr(tmp_path / "v2.zarr", x, 300, zarr_format=2)
    sort_zarr(str(src), str(tmp_path / "sorted.zarr"), argsort_dst=str(tmp_path / "order.zarr"))
    np.testing.assert_array_equal(read(tmp_path / "sorted.zarr"), np.sort(x, kind="stable"))
    np.testing.assert_array_equal(read(tmp_path / "order.zarr"), np.argsort(x, kind="stable"))


def test_source_unmodified_and_overwrite(tmp_path):
    x = make_keys(0, "int32", 5_000, TIES)
    src = make_zarr(tmp_path / "keys.zarr", x, 512)
    before = tree_digest(src)
    dst = tmp_path / "sorted.zarr"
    sort_zarr(src, dst, descending=True)
    with pytest.raises(FileExistsError, match="dst: .*sorted.zarr exists; pass overwrite=True"):
        sort_zarr(src, dst)
    np.testing.assert_array_equal(read(dst), np.sort(x)[::-1])  # the refused call left it alone
    sort_zarr(src, dst, overwrite=True, chunks=100)
    np.testing.assert_array_equal(read(dst), np.sort(x))
    assert zarr.open_array(str(dst)).chunks == (100,)
    assert tree_digest(src) == before
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("scheduler", ["threads", "distributed"])
@pytest.mark.parametrize("runs", ["memory", "disk"])
def test_failure_leaves_no_destination_and_no_temporary_store(tmp_path, monkeypatch, scheduler, runs):
    src = make_zarr(tmp_path / "keys.zarr", make_keys(0, "int64", 4_000, TIES), 500)

    if runs == "disk":
        real = gpusort.zarr_io._merge_chunk

        def first_fails_others_write_late(store, splits, j, *args):
            if j == 0:
                raise RuntimeError("merge failed on purpose")
            time.sleep(0.2)  # still running when the failure is reported
            return real(store, splits, j, *args)

        monkeypatch.setattr(gpusort.zarr_io, "_merge_chunk", first_fails_others_write_late)
    else:
        real = gpusort.zarr_io._GuardedWrites.__setitem__

        def first_fails_others_write_late(target, index, value):
            if index[0].start == 0:
                raise RuntimeError("write failed on purpose")
            time.sleep(0.2)
            real(target, index, value)

        monkeypatch.setattr(gpusort.zarr_io._GuardedWrites, "__setitem__", first_fails_others_write_late)
    with contextlib.ExitStack() as stack:
        if scheduler == "distributed":
            cluster = stack.enter_context(LocalCluster(n_workers=1, threads_per_worker=4, processes=False,
                                                       dashboard_address=":0"))
            stack.enter_context(Client(cluster))
        with pytest.raises(RuntimeError, match="on purpose"):
            sort_zarr(src, tmp_path / "sorted.zarr", argsort_dst=tmp_path / "order.zarr", runs=runs)
        time.sleep(0.5)  # a write still under way would land now
    assert not (tmp_path / "sorted.zarr").exists()
    assert not (tmp_path / "order.zarr").exists()
    assert leftovers(tmp_path) == []


def test_a_failed_second_move_puts_the_first_back(tmp_path, monkeypatch):
    x = make_keys(0, "int16", 3_000, TIES)
    src = make_zarr(tmp_path / "keys.zarr", x, 256)
    dst, order = tmp_path / "sorted.zarr", tmp_path / "order.zarr"
    sort_zarr(src, dst, descending=True)  # an old result that overwrite=True replaces
    moves = []
    real = gpusort.zarr_io._move_into_place

    def second_move_fails(staged, path, work):
        moves.append(path)
        if len(moves) == 2:
            raise OSError("rename failed on purpose")
        real(staged, path, work)

    monkeypatch.setattr(gpusort.zarr_io, "_move_into_place", second_move_fails)
    with pytest.raises(OSError, match="on purpose"):
        sort_zarr(src, dst, argsort_dst=order, overwrite=True)
    assert moves == [dst, order]
    np.testing.assert_array_equal(read(dst), np.sort(x)[::-1])  # the old result, not half of the new
    assert not order.exists()
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("make, call, error, message", [
    (None, {"src": "missing.zarr"}, FileNotFoundError, "src: .*missing.zarr does not exist"),
    ("2d", {}, ValueError, r"src has shape \(4, 5\); gpusort sorts 1-D arrays"),
    ("complex", {}, TypeError, "src has dtype complex128"),
    ("group", {}, ValueError, "is a Zarr group, not an array; .*e.g. .*grp.zarr.a"),
    ("plain", {}, ValueError, "is not a Zarr array"),
    ("ok", {"dst": "keys.zarr"}, ValueError, "dst is src"),
    ("ok", {"argsort_dst": "sorted.zarr"}, ValueError, "argsort_dst and dst are the same path"),
    ("ok", {"dst": "no/such/dir/out.zarr"}, FileNotFoundError, "dst: directory .* does not exist"),
    ("ok", {"chunks": 0}, ValueError, "chunks must be a positive int"),
    ("ok", {"backend": "tpu"}, ValueError, "backend='tpu' is not known"),
    ("ok", {"descending": "yes"}, TypeError, "descending must be True or False"),
    ("ok", {"dst": 42}, TypeError, "dst must be a path"),
    ("ok", {"temp_dir": "nowhere"}, FileNotFoundError, "temp_dir: .*nowhere is not an existing directory"),
    ("ok", {"temp_dir": "keys.zarr/zarr.json"}, FileNotFoundError, "temp_dir: .* is not an existing directory"),
    ("ok", {"temp_dir": 3}, TypeError, "temp_dir must be a path"),
    ("ok", {"runs": "ram"}, ValueError, "runs='ram' is not known; choose one of 'auto', 'memory', 'disk'"),
    ("ok", {"runs": "memory", "temp_dir": "."}, ValueError, "temp_dir is where runs wait on disk.*pass runs='disk'"),
])
def test_clear_errors(tmp_path, make, call, error, message):
    src = tmp_path / "keys.zarr"
    if make == "2d":
        zarr.create_array(str(src), shape=(4, 5), chunks=(2, 5), dtype="i8")
    elif make == "complex":
        zarr.create_array(str(src), shape=(4,), chunks=(2,), dtype="c16")
    elif make == "group":
        src = tmp_path / "grp.zarr"
        zarr.open_group(str(src), mode="w").create_array("a", shape=(3,), dtype="i4")
    elif make == "plain":
        src.mkdir()
    elif make == "ok":
        make_zarr(src, np.arange(10), 5)
    kwargs = {"src": src, "dst": tmp_path / "sorted.zarr"} | call
    for name in ("src", "dst", "argsort_dst", "temp_dir"):
        if isinstance(kwargs.get(name), str):
            kwargs[name] = tmp_path / kwargs[name]
    with pytest.raises(error, match=message):
        sort_zarr(kwargs.pop("src"), kwargs.pop("dst"), **kwargs)
    assert not (tmp_path / "sorted.zarr").exists()
    assert leftovers(tmp_path) == []


def test_runs_go_to_temp_dir(tmp_path, monkeypatch):
    x = make_keys(0, "float64", 5_000, TIES)
    src = make_zarr(tmp_path / "keys.zarr", x, 700)
    (tmp_path / "out").mkdir()
    (tmp_path / "scratch").mkdir()
    folders = []
    real = gpusort.zarr_io._store_runs

    def recording(runs, folder, *args, **kwargs):
        folders.append(folder.parent)
        return real(runs, folder, *args, **kwargs)

    monkeypatch.setattr(gpusort.zarr_io, "_store_runs", recording)
    sort_zarr(src, tmp_path / "out" / "sorted.zarr", argsort_dst=tmp_path / "out" / "order.zarr",
              temp_dir=tmp_path / "scratch")
    assert folders == [tmp_path / "scratch"]
    want = ref_argsort(x)
    assert_same_keys(read(tmp_path / "out" / "sorted.zarr"), x[want])
    np.testing.assert_array_equal(read(tmp_path / "out" / "order.zarr"), want)
    assert leftovers(tmp_path / "scratch") == leftovers(tmp_path / "out") == []


@pytest.mark.parametrize("n, src_chunks, out_chunks", [(50_000, 3_000, 7_000), (50_000, 20_000, 1_000)])
def test_merges_read_only_their_slices(tmp_path, monkeypatch, n, src_chunks, out_chunks):
    """Every merge reads exactly one slice per run, and the slices add up to its output chunk."""
    x = np.random.default_rng(n).integers(0, 100, n)  # ties across runs
    src = make_zarr(tmp_path / "keys.zarr", x, src_chunks)
    reads = []
    real = gpusort.zarr_io._RunStore.read

    def recording(store, k, a, b):
        reads.append((k, a, b))
        return real(store, k, a, b)

    monkeypatch.setattr(gpusort.zarr_io._RunStore, "read", recording)
    sort_zarr(src, tmp_path / "sorted.zarr", chunks=out_chunks, argsort_dst=tmp_path / "order.zarr", runs="disk")
    np.testing.assert_array_equal(read(tmp_path / "order.zarr"), np.argsort(x, kind="stable"))
    nruns, nout = -(-n // src_chunks), -(-n // out_chunks)
    assert len(reads) == nruns * nout
    assert sum(b - a for _, a, b in reads) == n
    assert max(b - a for _, a, b in reads) <= out_chunks


def test_runs_in_memory_on_a_cluster_write_no_run(tmp_path, monkeypatch):
    """``runs="auto"`` on workers with room: gpusort's exchange between reads and writes, no store of runs."""
    x = make_keys(5, "float64", 30_000, TIES)
    src = make_zarr(tmp_path / "keys.zarr", x, 2_000)

    def no_store(*args, **kwargs):
        raise AssertionError("runs went to disk")

    monkeypatch.setattr(gpusort.zarr_io, "_store_runs", no_store)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, memory_limit="1GiB",
                      dashboard_address=":0") as cluster, Client(cluster):
        assert gpusort.zarr_io.runs_in_memory(30_000 * 16)
        sort_zarr(src, tmp_path / "sorted.zarr", argsort_dst=tmp_path / "order.zarr", chunks=7_000)
    want = ref_argsort(x)
    assert_same_keys(read(tmp_path / "sorted.zarr"), x[want])
    np.testing.assert_array_equal(read(tmp_path / "order.zarr"), want)
    assert leftovers(tmp_path) == []


def test_runs_auto_follows_the_workers_memory_limits():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, memory_limit="8MiB",
                      dashboard_address=":0") as cluster, Client(cluster):
        # Three copies within half of the 16 MiB the two workers may hold.
        assert gpusort.zarr_io.runs_in_memory(2**20)
        assert not gpusort.zarr_io.runs_in_memory(2**22)
        assert gpusort.zarr_io.runs_in_memory(2**22, "memory")
    assert not gpusort.zarr_io.runs_in_memory(2**20, temp_dir="/tmp")


def test_data_larger_than_worker_memory(tmp_path):
    """Four times the workers' memory limit in keys and positions, through worker processes.

    Workers may not pause or be killed at their (tiny) limit; what proves the
    runs stay on disk is that no task ever holds more than a few chunks.
    """
    n, chunk = 2**22, 2**18  # 32 MiB of keys + 32 MiB of positions vs 2 x 8 MiB
    x = np.random.default_rng(3).integers(0, 2**62, n)
    src = make_zarr(tmp_path / "keys.zarr", x, chunk)
    no_pausing = {"distributed.worker.memory.pause": False, "distributed.worker.memory.terminate": False}
    with dask.config.set(no_pausing), LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, memory_limit="8MiB", dashboard_address=":0",
    ) as cluster, Client(cluster) as client, get_task_stream(client) as stream:
        sort_zarr(src, tmp_path / "sorted.zarr", argsort_dst=tmp_path / "order.zarr")
    np.testing.assert_array_equal(read(tmp_path / "sorted.zarr"), np.sort(x, kind="stable"))
    np.testing.assert_array_equal(read(tmp_path / "order.zarr"), np.argsort(x, kind="stable"))
    largest = max(stream.data, key=lambda task: task.get("nbytes", 0))
    # At most a run -- keys and positions, 2 x chunk x 8 bytes -- never the data set.
    assert largest["nbytes"] < 3 * chunk * 8, largest["key"]
