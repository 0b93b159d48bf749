"""The whole pipeline on the NumPy backend against NumPy, on the threaded scheduler."""

import dask
import dask.array as da
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gpusort
from gpusort.engine import graph
from reference import GPU_PLACES, KEY_DTYPES, PATTERNS, assert_same_keys, make_keys, on_gpu, ref_argsort


@st.composite
def cases(draw):
    dtype = draw(st.sampled_from(KEY_DTYPES))
    n = draw(st.integers(0, 400))
    pattern = draw(st.sampled_from(PATTERNS))
    x = make_keys(np.random.default_rng(draw(st.integers(0, 2**32))), dtype, n, pattern)
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=25)))  # empty and tiny chunks too
    chunks = tuple(np.diff([0, *cuts, n]).tolist())
    out = draw(st.one_of(st.none(), st.integers(1, n + 3)))
    return x, chunks, out, draw(st.booleans())


def balanced(chunks, n, length):
    """All chunks of ``length``, the last the remainder."""
    want = [length] * (n // length) + ([n % length] if n % length else [])
    return list(chunks[0]) == (want or [0])


@settings(max_examples=150, deadline=None)
@given(cases())
def test_sort_argsort_sort_by_key_match_numpy(case):
    check_against_numpy(case)


# CuPy holds no datetimes: CuPy chunks are tried with the other key dtypes.


@pytest.mark.gpu
@settings(max_examples=60, deadline=None)
@given(cases(), st.sampled_from(GPU_PLACES))
def test_cupy_backend_matches_numpy(case, where):
    """The same property on the GPU: host chunks sorted out of core, and CuPy chunks."""
    kwargs = on_gpu(where, case[0].dtype)
    if kwargs is not None:
        check_against_numpy(case, **kwargs)


@pytest.mark.gpu
@pytest.mark.parametrize("view", ["reversed", "broadcast"])
@pytest.mark.parametrize("pieces", [1, 3])
def test_cupy_chunks_that_are_strided_views(view, pieces):
    """Chunks whose stride is negative or zero sort as copies of them would.

    One chunk is its own run, read as it is (the sorted-input sample reads
    the view); several are concatenated first.
    """
    cupy = pytest.importorskip("cupy")
    n = 300_000
    x = np.random.default_rng(4).integers(-50, 50, n) if view == "reversed" else np.full(n, 7)
    meta = cupy.empty(0, np.int64)
    if view == "reversed":
        keys = da.from_array(x[::-1].copy(), chunks=n // pieces).map_blocks(cupy.asarray, meta=meta)[::-1]
    else:
        one = da.from_array(np.array([7]), chunks=1).map_blocks(cupy.asarray, meta=meta)
        keys = da.concatenate([one.map_blocks(lambda a: cupy.broadcast_to(a, (n // pieces,)),
                                              chunks=((n // pieces,),), meta=meta)] * pieces)
    assert keys.chunks == ((n // pieces,) * pieces,)
    np.testing.assert_array_equal(cupy.asnumpy(gpusort.sort(keys).compute()), np.sort(x))


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["1-D", "rows", "reversed", "column"])
def test_every_gathers_a_gpu_sample_like_numpy(layout):
    """The splitters' samples of a GPU run (every ``step``-th key from ``start``) are NumPy's strided slice."""
    cupy = pytest.importorskip("cupy")
    from gpusort.arrays import every

    rows = np.random.default_rng(5).integers(0, 2**62, (1001, 3)).astype(np.uint64)
    rows_gpu = cupy.asarray(rows)
    x, gpu = {"1-D": (rows[:, 0].copy(), cupy.asarray(rows[:, 0].copy())), "rows": (rows, rows_gpu),
              "reversed": (rows[::-1, 1], cupy.asarray(rows[:, 1].copy())[::-1]),
              "column": (rows[:, 2], rows_gpu[:, 2])}[layout]
    for step, start in [(1, 0), (7, 3), (1000, 999), (5000, 0), (3, 1001)]:
        got = every(gpu, step, start)
        assert isinstance(got, np.ndarray) and got.flags.c_contiguous
        np.testing.assert_array_equal(got, x[start::step])


def test_host_chunks_on_the_gpu_sort_in_one_task_where_the_budget_holds_them():
    """The graph's choice of one whole GPU step for host chunks: backend, budget, dtype and settings decide."""
    x = da.zeros(2**20, dtype=np.int64, chunks=2**18)
    assert x.dtype == np.int64
    assert graph.whole_on_gpu(x, None, "cupy", False)
    assert not graph.whole_on_gpu(x, None, "numpy", False)
    roomy, tight = (gpusort.backends.BackendSpec("cupy", b) for b in (2**26, 2**24))
    assert graph.whole_on_gpu(x, None, roomy, True) and not graph.whole_on_gpu(x, None, tight, True)
    assert not any(graph.whole_on_gpu(x.astype(t), None, "cupy", False) for t in (np.complex128, "M8[ns]", ">i8"))
    assert not any(graph.whole_on_gpu(x, x.astype(t), "cupy", False) for t in ("U3", ">i4", "S16"))
    assert graph.whole_on_gpu(x, x.astype(np.int16), "cupy", False)
    # Floats, or descending keys, are encoded on the GPU into new arrays: the step must hold them too.
    from gpusort.memory import plan

    just = gpusort.backends.BackendSpec("cupy", int(plan.whole_bytes(2**20, 8) / plan.PLAN_FRACTION) + 1)
    assert graph.whole_on_gpu(x, None, just, False) and not graph.whole_on_gpu(x, None, just, False, True)
    assert not graph.whole_on_gpu(x.astype(np.float64), None, just, False)
    assert not graph.whole_on_gpu(da.zeros(2**40, dtype=np.int64, chunks=2**36), None, "cupy", False)
    with dask.config.set({"gpusort.task-bytes": "1MiB"}):
        assert not graph.whole_on_gpu(x, None, "cupy", False)
    out, _ = graph.sort(x, descending=False, backend="cupy", chunk=2**18)
    names = [k[0].split("-")[0] for k in dict(out.__dask_graph__())]
    assert names.count("runs") == 1 and names.count("sorted") == 4 and not {"splits", "merge"} & set(names)


def test_without_a_budget_a_large_sort_asks_the_gpus_for_theirs(monkeypatch):
    """Past the budget every GPU holds, one whole step only where the GPUs' own default budgets hold it."""
    asked = []

    def seen(budget):
        def answer():
            asked.append(budget)
            return budget
        return answer

    big = da.zeros(2**30, dtype=np.int64, chunks=2**27)  # 8 GiB: past WHOLE_DEFAULT_BYTES
    small = da.zeros(2**20, dtype=np.int64, chunks=2**18)
    monkeypatch.setattr(graph, "default_budget_seen", seen(64 * 2**30))
    assert graph.whole_on_gpu(big, None, "cupy", False)
    assert graph.whole_on_gpu(small, None, "cupy", False) and asked == [64 * 2**30]  # small: nobody asked
    monkeypatch.setattr(graph, "default_budget_seen", seen(16 * 2**30))
    assert not graph.whole_on_gpu(big, None, "cupy", False)
    assert not graph.whole_on_gpu(big, None, gpusort.backends.BackendSpec("cupy", 2**30), False)
    assert asked == [64 * 2**30, 16 * 2**30]  # a given budget is never asked about


def test_default_budget_seen_without_gpus_is_zero():
    from distributed import Client, LocalCluster

    if graph._default_budget_here():
        pytest.skip("a GPU is here: its budget is the answer")
    assert graph.default_budget_seen() == 0
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster):
        assert graph.default_budget_seen() == 0


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("what", ["keys", "values", "positions"])
def test_sort_chunks_whole_is_the_decoded_sort_of_all_chunks(what, descending):
    """One task's whole sort, here on the backend without a one-step sort (NumPy): stable, decoded, exact bits."""
    from gpusort.engine import tasks
    from gpusort.keys import order

    rng = np.random.default_rng(6)
    x = make_keys(rng, "float64", 5000, "nan")
    cuts = [0, 1000, 1000, 3001, 5000]
    parts = [x[a:b] for a, b in zip(cuts[:-1], cuts[1:])]
    vals = np.arange(5000, dtype=np.int32) * 3
    inputs = [p for a, b, k in zip(cuts[:-1], cuts[1:], parts) for p in (k, vals[a:b] if what == "values" else None)]
    declared = [(i, b - a, x.dtype, vals.dtype if what == "values" else None)
                for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:]))]
    scheme = order.scheme_for(what != "keys", True)
    keys, values = tasks.sort_chunks_whole("numpy", x.dtype, descending, scheme,
                                            0 if what == "positions" else None, declared, *inputs)
    want = ref_argsort(x, descending)
    assert_same_keys(keys, x[want], bits="exact")
    if what == "keys":
        assert values is None
    else:
        np.testing.assert_array_equal(values, vals[want] if what == "values" else want)


@pytest.mark.gpu
@pytest.mark.parametrize("budget", [None, "64MiB", "8MiB"])
@pytest.mark.parametrize("dtype", ["int64", "float64", "uint16"])
def test_host_chunks_whole_on_the_gpu_exact(budget, dtype):
    """Host chunks sorted in one GPU step (or, past the budget, out of core in that task): every bit, ties stable."""
    pytest.importorskip("cupy")
    from gpusort.backends import backend_spec
    from gpusort.engine import tasks
    from gpusort.keys import order
    from gpusort.memory.plan import parse_budget

    x = make_keys(np.random.default_rng(7), dtype, 600_001, "nan" if dtype == "float64" else "few")
    keys = da.from_array(x, chunks=(100_000, 1, 0, 250_000, 250_000))
    values = da.from_array(np.arange(len(x), dtype=np.int64)[::-1].copy(), chunks=keys.chunks)
    want = ref_argsort(x)
    got = gpusort.sort(keys, backend="cupy", gpu_memory_budget=budget).compute()
    assert_same_keys(got, x[want], bits="exact")
    k, v = gpusort.sort_by_key(keys, values, backend="cupy", gpu_memory_budget=budget)
    np.testing.assert_array_equal(v.compute(), values.compute()[want])
    np.testing.assert_array_equal(gpusort.argsort(keys, backend="cupy", gpu_memory_budget=budget).compute(), want)
    # The task itself past its budget: the one-step sort declines, the task sorts out of core.
    spec = backend_spec("cupy", parse_budget("8MiB"))
    inputs = [p for c in keys.blocks for p in (c.compute(), None)]
    declared = [(i, int(c), x.dtype, None) for i, c in enumerate(keys.chunks[0])]
    out, _ = tasks.sort_chunks_whole(spec, x.dtype, True, order.scheme_for(False, True), None, declared, *inputs)
    assert_same_keys(out, x[ref_argsort(x, True)], bits="exact")
    assert all(isinstance(a, np.ndarray) for a in (got, out))


def test_two_sorts_of_one_input_into_different_chunks_compute_together():
    """Output chunks cut from one run are named after their chunks: two chunkings never share a name."""
    x = np.random.default_rng(2).integers(0, 1000, 1000)
    keys = da.from_array(x, chunks=250)
    a, b = gpusort.sort(keys, chunks=100), gpusort.sort(keys, chunks=300)
    assert a.name != b.name
    with dask.config.set(scheduler="threads"):
        np.testing.assert_array_equal(da.concatenate([a, b]).compute(), np.concatenate([np.sort(x)] * 2))


def check_against_numpy(case, backend=None, to_chunks=lambda a: a, to_host=np.asarray):
    """sort, argsort and sort_by_key of one drawn case, exactly as the independent reference says."""
    x, chunks, out, descending = case
    before = x.copy()
    keys = to_chunks(da.from_array(x, chunks=(chunks,)))
    want = ref_argsort(x, descending)
    length = out or -(-len(x) // len(chunks)) or 1

    got = gpusort.sort(keys, descending=descending, chunks=out, backend=backend)
    assert balanced(got.chunks, len(x), min(length, max(len(x), 1)))
    assert_same_keys(to_host(got.compute()), x[want])

    positions = gpusort.argsort(keys, descending=descending, chunks=out, backend=backend)
    assert positions.chunks == got.chunks
    np.testing.assert_array_equal(to_host(positions.compute()), want)

    values = to_chunks(da.from_array(np.arange(len(x), dtype=np.int32)[::-1].copy(), chunks=(chunks,)))
    k, v = gpusort.sort_by_key(keys, values, descending=descending, chunks=out, backend=backend)
    assert_same_keys(to_host(k.compute()), x[want], bits="exact")
    np.testing.assert_array_equal(to_host(v.compute()), np.arange(len(x), dtype=np.int32)[::-1][want])
    if to_host is np.asarray:  # host chunks carry any fixed-width values: bytes, moved by position
        values = da.from_array(np.arange(len(x)).astype("S8"), chunks=(chunks,))
        k, v = gpusort.sort_by_key(keys, values, descending=descending, chunks=out, backend=backend)
        np.testing.assert_array_equal(v.compute(), np.arange(len(x)).astype("S8")[want])
    np.testing.assert_array_equal(x.view(np.uint8), before.view(np.uint8))


@pytest.mark.parametrize("g", [1, 2, 3, 64])
@pytest.mark.parametrize("pattern", ["few", "equal", "nan", "random"])
def test_any_sample_stride_gives_the_exact_order(g, pattern):
    x = make_keys(np.random.default_rng(g), "float32", 3000, pattern)
    keys = da.from_array(x, chunks=97)
    runs = graph.form_runs(keys, None, descending=False, backend="numpy", positions=True)
    _, positions = graph.merge_sorted_runs(
        runs, key_dtype=x.dtype, descending=False, chunk=101, backend="numpy", sample_stride=g
    )
    np.testing.assert_array_equal(positions.compute(), np.argsort(x, kind="stable"))


def test_each_run_is_sampled_by_a_task_of_its_own():
    """The splitters' samples are cut by a task per run, timed as the splitters, and the order stays exact."""
    from gpusort import runtime

    x = make_keys(np.random.default_rng(3), "int64", 3000, "few")
    with dask.config.set({"gpusort.task-bytes": 0}):  # a run per chunk
        runs = graph.form_runs(da.from_array(x, chunks=97), None, descending=False, backend="numpy")
        keys, _ = graph.merge_sorted_runs(runs, key_dtype=x.dtype, descending=False, chunk=101, backend="numpy")
    names = [k[0] if isinstance(k, tuple) else k for k in dict(keys.__dask_graph__())]
    samples = [n for n in names if n.startswith("samples-")]
    assert len(samples) == len(runs.lengths) == 31 and sum(n.startswith("splits-") for n in names) == 1
    assert {runtime.phase_of(n) for n in samples} == {"splitters"}
    np.testing.assert_array_equal(keys.compute(), np.sort(x))


def test_hundreds_of_chunks_in_and_out():
    rng = np.random.default_rng(7)
    x = rng.integers(-50, 50, 40_000).astype(np.int32)
    keys = da.from_array(x, chunks=113)  # 354 chunks
    assert keys.numblocks[0] > 300
    k, v = gpusort.sort_by_key(keys, keys.astype(np.float64), chunks=1000)
    assert len(k.chunks[0]) == 40
    k, v = dask.compute(k, v)
    np.testing.assert_array_equal(k, np.sort(x))
    np.testing.assert_array_equal(v, x[np.argsort(x, kind="stable")].astype(np.float64))


def test_building_the_graph_computes_nothing():
    def explode(block):
        raise AssertionError("a chunk was computed while only building the graph")

    keys = da.ones(100, chunks=10).map_blocks(explode, dtype=np.float64)
    for result in (gpusort.sort(keys), gpusort.argsort(keys), *gpusort.sort_by_key(keys, keys)):
        assert isinstance(result, da.Array)
        assert result.chunks == ((10,) * 10,)


def test_output_chunks_and_dtype_are_known_before_computing():
    keys = da.from_array(np.arange(1000, dtype=np.uint16)[::-1], chunks=300)
    out = gpusort.sort(keys, chunks=256)
    assert out.chunks == ((256, 256, 256, 232),) and out.dtype == np.uint16
    assert gpusort.argsort(keys).dtype == np.int64
    assert gpusort.sort(keys).chunks == ((250,) * 4,)  # keeps the number of chunks


def test_n_d_input_sorts_flattened_with_axis_none():
    x = np.random.default_rng(3).standard_normal((30, 17))
    keys = da.from_array(x, chunks=(7, 5))
    np.testing.assert_array_equal(gpusort.sort(keys, axis=None).compute(), np.sort(x, axis=None))
    np.testing.assert_array_equal(
        gpusort.argsort(keys, axis=None).compute(), np.argsort(x, axis=None, kind="stable")
    )


def test_plain_numpy_input_is_wrapped_and_left_untouched():
    x = np.array([3.0, np.nan, -0.0, 0.0, 1.0])
    x.setflags(write=False)
    np.testing.assert_array_equal(gpusort.sort(x).compute(), np.sort(x))
    np.testing.assert_array_equal(gpusort.argsort(x[::-1]).compute(), np.argsort(x[::-1], kind="stable"))


def test_same_input_same_graph_new_input_new_keys():
    x = da.from_array(np.arange(10)[::-1], chunks=3)
    assert gpusort.sort(x).name == gpusort.sort(x).name
    assert gpusort.sort(x).name != gpusort.sort(x + 1).name
    assert gpusort.sort(x).name != gpusort.sort(x, descending=True).name


def test_values_rechunked_to_the_keys():
    keys = da.from_array(np.array([5, 3, 5, 1, 3, 0, 9]), chunks=2)
    values = da.from_array(np.arange(7, dtype=np.int16), chunks=5)
    k, v = gpusort.sort_by_key(keys, values)
    np.testing.assert_array_equal(v.compute(), np.argsort(keys.compute(), kind="stable"))


@pytest.mark.parametrize("scheduler", ["threads", "sync"])
def test_empty_and_single_element(scheduler):
    with dask.config.set(scheduler=scheduler):
        empty = da.from_array(np.array([], dtype=np.float32), chunks=1)
        assert gpusort.sort(empty).compute().shape == (0,)
        assert gpusort.argsort(empty).compute().dtype == np.int64
        one = da.from_array(np.array([np.nan]), chunks=1)
        np.testing.assert_array_equal(gpusort.sort(one, descending=True).compute(), [np.nan])


def test_graph_grows_with_the_data_not_with_chunks_times_chunks():
    x = make_keys(np.random.default_rng(9), "int64", 2**16, "few")
    for chunks in (2**12, 2**8):  # 16 and 256 chunks in and out
        positions = gpusort.argsort(da.from_array(x, chunks=chunks), chunks=chunks)
        tasks = len(dict(positions.__dask_graph__()))
        # The inputs, one run and one merge (small chunks are batched), one
        # output view per chunk, a few splitter tasks: no (chunk x chunk) term.
        assert tasks <= 2 * (2**16 // chunks) + 10, (chunks, tasks)
        np.testing.assert_array_equal(positions.compute(), np.argsort(x, kind="stable"))


def test_exchange_method_is_checked():
    with dask.config.set({"gpusort.exchange": "sometimes"}), pytest.raises(ValueError, match="gpusort.exchange"):
        gpusort.sort(da.arange(10, chunks=5))


def test_runs_from_arrays_merge_and_refuse_mismatched_chunks():
    x = np.random.default_rng(3).integers(-50, 50, 1000)
    runs = [np.sort(part, kind="stable") for part in np.split(x, [300, 700])]
    okeys = da.concatenate([da.from_array(r, chunks=-1) for r in runs])
    positions = da.concatenate([da.from_array(np.argsort(p, kind="stable") + a, chunks=-1)
                                for p, a in zip(np.split(x, [300, 700]), (0, 300, 700))])
    keys, values = graph.merge_sorted_runs(graph.Runs.from_arrays(okeys, positions), key_dtype=x.dtype,
                                           descending=False, chunk=128, backend="numpy")
    np.testing.assert_array_equal(values.compute(), ref_argsort(x))
    np.testing.assert_array_equal(keys.compute(), np.sort(x))
    with pytest.raises(ValueError, match="values has chunks"):
        graph.Runs.from_arrays(okeys, positions.rechunk(500))
