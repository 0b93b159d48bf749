"""N-D ``sort`` and ``argsort`` along an axis, against NumPy, on the threaded scheduler.

The contract: for an N-D Dask array and any axis (negative too), in any
chunks along every axis (empty and size-1 chunks included), ``sort`` equals
``np.sort(x, axis)`` and ``argsort`` equals ``np.argsort(x, axis,
kind="stable")`` (int64 positions along the axis); ``descending=True`` puts
each row largest first, NaN (NaT) still last, ties in input order.  The
output keeps the input's chunks, nothing is computed while the graph is
built, and ``axis=None`` still flattens.

The oracle is :mod:`reference` (Python's ``sorted`` over each row) or NumPy
itself, never gpusort's order keys.  ``np.sort`` is only used for values:
its SIMD sorts may rewrite NaN payloads and the sign of zeros on some CPUs,
so the bits are compared with the input's elements taken in the stable
order (``take_along_axis(x, argsort)``), as a multiset per row.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import gpusort
from reference import (
    ALL_DTYPES, GPU_PLACES, KEY_DTYPES, PATTERNS, assert_same_keys_along, make_keys, on_gpu, ref_argsort_along,
)
from test_special_values import specials



def draw_chunks(draw, size: int, max_cuts: int) -> tuple[int, ...]:
    """Chunk sizes summing to ``size``, empty and size-1 chunks included."""
    cuts = sorted(draw(st.lists(st.integers(0, size), max_size=max_cuts)))
    return tuple(np.diff([0, *cuts, size]).tolist())


#: ``gpusort.task-bytes`` settings that give each graph shape its turn: "auto"
#: gathers whole rows (they fit a task), 0 sends rows past four blocks through
#: the co-rank splitters (one row per block-row, or several).
TASK_BYTES = st.sampled_from(["auto", 0])


@st.composite
def nd_cases(draw):
    """(keys, chunks per axis, axis, descending): up to 3-D, any axis, long rows along it."""
    ndim = draw(st.integers(1, 3))
    axis = draw(st.integers(-ndim, ndim - 1))
    shape = [draw(st.integers(0, 4)) for _ in range(ndim)]
    shape[axis] = draw(st.integers(0, 60))
    dtype = draw(st.sampled_from(ALL_DTYPES))
    pattern = draw(st.sampled_from(PATTERNS))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = make_keys(rng, dtype, int(np.prod(shape)), pattern).reshape(shape)
    chunks = tuple(draw_chunks(draw, size, 6 if i == axis % ndim else 2) for i, size in enumerate(shape))
    return x, chunks, axis, draw(st.booleans())


def one_d_chunks_kept_in_number(out_chunks, in_chunks) -> bool:
    """A 1-D sort keeps the number of input chunks, all of one length but the last (as today)."""
    n, parts = sum(in_chunks[0]), len(in_chunks[0])
    length = max(1, -(-n // parts))
    want = [length] * (n // length) + ([n % length] if n % length else [])
    return list(out_chunks[0]) == (want or [0])


def check_along_axis(x, chunks, axis, descending, backend=None, to_chunks=lambda a: a, to_host=np.asarray):
    """sort and argsort of ``x`` in ``chunks`` along ``axis``, as the reference says, chunks kept."""
    before = x.copy()
    keys = to_chunks(da.from_array(x, chunks=chunks))
    want = ref_argsort_along(x, axis, descending)

    got = gpusort.sort(keys, axis=axis, descending=descending, backend=backend)
    assert isinstance(got, da.Array)
    assert got.shape == x.shape and got.dtype == x.dtype
    if x.ndim > 1:
        assert got.chunks == keys.chunks, (got.chunks, keys.chunks)
    else:
        assert one_d_chunks_kept_in_number(got.chunks, keys.chunks), (got.chunks, keys.chunks)
    sorted_keys = to_host(got.compute())
    if x.dtype.kind == "c":
        # Complex sorts return the input's elements in the stable order, bit for bit.
        assert_same_keys_along(sorted_keys, np.take_along_axis(x, want, axis), axis, bits="exact")
    else:
        assert_same_keys_along(sorted_keys, np.take_along_axis(x, want, axis), axis)

    positions = gpusort.argsort(keys, axis=axis, descending=descending, backend=backend)
    assert isinstance(positions, da.Array)
    assert positions.dtype == np.int64 and positions.shape == x.shape
    assert positions.chunks == got.chunks
    np.testing.assert_array_equal(to_host(positions.compute()), want)
    np.testing.assert_array_equal(x.view(np.uint8), before.view(np.uint8))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nd_cases(), TASK_BYTES)
def test_sort_and_argsort_along_any_axis_match_numpy(case, task_bytes):
    with dask.config.set({"gpusort.task-bytes": task_bytes}):
        check_along_axis(*case)


def test_reference_rows_are_numpys_stable_argsort():
    """The oracle itself: per-row ``sorted`` equals ``np.argsort(kind="stable")`` ascending, every dtype."""
    rng = np.random.default_rng(0)
    for dtype in ALL_DTYPES:
        for pattern in PATTERNS:
            x = make_keys(rng, dtype, 3 * 4 * 25, pattern).reshape(3, 4, 25)
            for axis in (0, 1, 2):
                np.testing.assert_array_equal(ref_argsort_along(x, axis), np.argsort(x, axis=axis, kind="stable"),
                                              err_msg=f"{dtype} {pattern} axis={axis}")


@pytest.fixture(params=["auto", 0])
def graph_shape(request):
    """Each graph shape in turn (see :data:`TASK_BYTES`)."""
    with dask.config.set({"gpusort.task-bytes": request.param}):
        yield request.param


@pytest.mark.parametrize("axis", [-1, 1])
def test_long_float64_rows_chunked_along_the_axis(axis, graph_shape):
    rng = np.random.default_rng(1)
    x = make_keys(rng, "float64", 4 * 20000, "nan").reshape(4, 20000)
    x[:, ::97] = x[:, :1]  # ties across chunks of one row
    keys = da.from_array(x, chunks=(2, 5000))
    got, positions = gpusort.sort(keys, axis=axis), gpusort.argsort(keys, axis=axis)
    assert got.chunks == positions.chunks == keys.chunks
    got, positions = dask.compute(got, positions)
    want = np.argsort(x, axis=axis, kind="stable")
    np.testing.assert_array_equal(positions, want)
    np.testing.assert_array_equal(got, np.sort(x, axis=axis))  # as values: NaN == NaN, -0.0 == 0.0
    assert_same_keys_along(got, np.take_along_axis(x, want, axis), axis)

    down = gpusort.argsort(keys, axis=axis, descending=True)
    assert down.chunks == keys.chunks
    np.testing.assert_array_equal(down.compute(), ref_argsort_along(x, axis, descending=True))


@pytest.mark.parametrize("axis", [0, -2])
@pytest.mark.parametrize("descending", [False, True])
def test_axis_0_chunked_into_fifty_chunks(axis, descending, graph_shape):
    rng = np.random.default_rng(2)
    x = make_keys(rng, "int32", 300 * 7, "few").reshape(300, 7)
    keys = da.from_array(x, chunks=(6, (3, 4)))
    assert keys.numblocks == (50, 2)
    want = ref_argsort_along(x, axis, descending)
    if not descending:
        np.testing.assert_array_equal(want, np.argsort(x, axis=axis, kind="stable"))
    got, positions = gpusort.sort(keys, axis=axis, descending=descending), gpusort.argsort(
        keys, axis=axis, descending=descending)
    assert got.chunks == positions.chunks == keys.chunks
    got, positions = dask.compute(got, positions)
    np.testing.assert_array_equal(positions, want)
    assert_same_keys_along(got, np.take_along_axis(x, want, axis), axis)


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("axis", [-3, -2, -1, 0, 1, 2])
@pytest.mark.parametrize("dtype", ["float32", "uint8", "complex64", "datetime64[ns]"])
def test_every_axis_of_a_2x3x4_array(axis, descending, dtype):
    x = make_keys(np.random.default_rng(3), dtype, 24, "extremes").reshape(2, 3, 4)
    for chunks in (((1, 1), (1, 0, 2), (3, 0, 1)), (1, 1, 1), (2, 3, 4)):
        check_along_axis(x, chunks, axis, descending)


@pytest.mark.parametrize("shape, axis", [((0, 5), 0), ((0, 5), 1), ((5, 0), 1), ((5, 0), 0),
                                         ((3, 0, 4), -1), ((3, 0, 4), 1), ((0, 0), 0)])
def test_zero_size_dimensions(shape, axis):
    x = np.zeros(shape, np.float32)
    keys = da.from_array(x, chunks=tuple((s,) if s == 0 else (1, s - 1) if s > 1 else (1,) for s in shape))
    for descending in (False, True):
        got = gpusort.sort(keys, axis=axis, descending=descending)
        positions = gpusort.argsort(keys, axis=axis, descending=descending)
        assert got.chunks == positions.chunks == keys.chunks
        got, positions = dask.compute(got, positions)
        assert got.shape == positions.shape == shape
        assert got.dtype == np.float32 and positions.dtype == np.int64


@pytest.mark.parametrize("descending", [False, True])
def test_axis_none_still_sorts_the_flattened_array(descending):
    rng = np.random.default_rng(4)
    x = make_keys(rng, "float32", 30 * 17, "nan").reshape(30, 17)
    keys = da.from_array(x, chunks=(7, (5, 0, 12)))
    want = ref_argsort_along(x.ravel(), 0, descending)
    positions = gpusort.argsort(keys, axis=None, descending=descending)
    assert positions.shape == (x.size,)
    np.testing.assert_array_equal(positions.compute(), want)
    got = gpusort.sort(keys, axis=None, descending=descending, chunks=100)  # chunks= still allowed
    assert got.chunks == ((100,) * 5 + (10,),)
    assert_same_keys_along(got.compute(), x.ravel()[want], 0)
    if not descending:
        np.testing.assert_array_equal(positions.compute(), np.argsort(x, axis=None, kind="stable"))


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dtype", KEY_DTYPES)
def test_special_values_keep_their_bits_on_every_graph_shape(dtype, descending, graph_shape):
    """±0.0, NaN payloads and extremes come back bit for bit, rows of 1 to 3 per block, 8 blocks along each."""
    rows = np.stack([np.roll(specials(dtype), r) for r in range(6)])  # 6 rows of 24
    x = np.concatenate([rows, rows[:, ::-1]], axis=1)  # 48 per row: ties across chunks
    before = x.copy()
    want = ref_argsort_along(x, 1, descending)
    swapped = x.astype(x.dtype.newbyteorder("S"))  # the other byte order: the result keeps it
    for row_chunks, keys_in in ((1, x), (3, x), (3, swapped)):
        keys = da.from_array(keys_in, chunks=(row_chunks, 6))
        got = gpusort.sort(keys, axis=1, descending=descending)
        assert got.chunks == keys.chunks and got.dtype == keys_in.dtype
        computed = got.compute()
        assert computed.dtype == keys_in.dtype
        assert_same_keys_along(computed, np.take_along_axis(keys_in, want, 1), 1)
        np.testing.assert_array_equal(gpusort.argsort(keys, axis=1, descending=descending).compute(), want)
    np.testing.assert_array_equal(x.view(np.uint8), before.view(np.uint8))


@pytest.mark.parametrize("transposed", [False, True])
def test_many_block_rows(transposed, graph_shape):
    """A hundred rows of blocks across the other axis, small and empty chunks along the sorted one."""
    rng = np.random.default_rng(5)
    x = make_keys(rng, "int16", 400 * 24, "few").reshape(400, 24)
    chunks, axis = (4, (5, 1, 0, 10, 8)), 1
    if transposed:
        x, chunks, axis = x.T.copy(), chunks[::-1], 0
    keys = da.from_array(x, chunks=chunks)
    assert keys.numblocks[1 - axis] == 100
    got, positions = gpusort.sort(keys, axis=axis), gpusort.argsort(keys, axis=axis)
    assert got.chunks == positions.chunks == keys.chunks
    got, positions = dask.compute(got, positions)
    want = np.argsort(x, axis=axis, kind="stable")
    np.testing.assert_array_equal(positions, want)
    np.testing.assert_array_equal(got, np.take_along_axis(x, want, axis))


def test_two_axes_of_one_array_in_one_compute():
    """Sorts of one square array along different axes are different graphs (no key collisions)."""
    x = np.random.default_rng(6).standard_normal((40, 40))
    keys = da.from_array(x, chunks=(15, 10))
    results = [gpusort.sort(keys, axis=0), gpusort.sort(keys, axis=1), gpusort.argsort(keys, axis=0),
               gpusort.argsort(keys, axis=1), gpusort.argsort(keys, axis=1, descending=True)]
    assert len({r.name for r in results}) == len(results)
    s0, s1, a0, a1, d1 = dask.compute(*results)
    np.testing.assert_array_equal(s0, np.sort(x, axis=0))
    np.testing.assert_array_equal(s1, np.sort(x, axis=1))
    np.testing.assert_array_equal(a0, np.argsort(x, axis=0, kind="stable"))
    np.testing.assert_array_equal(a1, np.argsort(x, axis=1, kind="stable"))
    np.testing.assert_array_equal(d1, np.argsort(-x, axis=1, kind="stable"))  # no NaN, no ties


def _explode(block):
    raise AssertionError("a chunk was computed while only building the graph")


def test_building_the_graph_computes_nothing_along_an_axis():
    keys = da.ones((12, 30), chunks=(5, 7)).map_blocks(_explode, dtype=np.float64)
    for axis in (0, 1, -1):
        for result in (gpusort.sort(keys, axis=axis), gpusort.argsort(keys, axis=axis, descending=True)):
            assert isinstance(result, da.Array)
            assert result.chunks == keys.chunks and result.shape == (12, 30)
    assert gpusort.argsort(keys, axis=0).dtype == np.int64


@pytest.mark.parametrize("layout", ["fortran", "read-only", "strided", "big-endian"])
def test_numpy_input_in_any_layout_is_wrapped_and_left_untouched(layout):
    x = make_keys(np.random.default_rng(7), "float64", 6 * 50, "nan").reshape(6, 50)
    x = {"fortran": np.asfortranarray(x), "read-only": x, "strided": np.repeat(x, 2, axis=1)[:, ::2],
         "big-endian": x.astype(">f8")}[layout]
    if layout == "read-only":
        x.setflags(write=False)
    before = x.tobytes()
    for axis in (0, 1):
        want = np.argsort(x, axis=axis, kind="stable")
        np.testing.assert_array_equal(gpusort.argsort(x, axis=axis).compute(), want)
        got = gpusort.sort(x, axis=axis).compute()
        np.testing.assert_array_equal(got, np.take_along_axis(x, want, axis))
    assert x.tobytes() == before


@pytest.mark.parametrize("graph_shape", ["within", "gather"])
def test_host_rows_go_to_the_cupy_backend_of_the_budget(monkeypatch, graph_shape):
    """Host chunks with backend="cupy": every row sort runs on the backend that carries gpu_memory_budget.

    A stand-in for the CuPy backend sorts on the host, so this runs without a GPU.
    """
    from gpusort.backends import BackendSpec, get_backend
    from gpusort.engine import along

    asked = []

    class Budgeted:
        def sort_host_rows(self, blocks, sort):
            return sort(get_backend("numpy"), blocks)

    def backend_of(spec):
        asked.append(spec)
        return Budgeted() if getattr(spec, "name", spec) == "cupy" else get_backend(spec)

    monkeypatch.setattr(along, "get_backend", backend_of)
    x = np.random.default_rng(0).integers(0, 5, (6, 40))
    keys = da.from_array(x, chunks=(3, 40 if graph_shape == "within" else 10))
    spec = BackendSpec("cupy", 2**26)  # what gpusort.sort(..., backend="cupy", gpu_memory_budget=2**26) passes
    got = [along.sort_along([keys], 1, descending=True, positions=positions, backend=spec).compute(scheduler="threads")
           for positions in (False, True)]
    np.testing.assert_array_equal(got[0], -np.sort(-x, axis=1))
    np.testing.assert_array_equal(got[1], ref_argsort_along(x, 1, descending=True))
    assert asked and set(asked) == {spec}


@pytest.mark.gpu
def test_host_rows_keep_within_the_gpu_memory_budget():
    """Rows of host chunks larger than the budget sort in batches of rows, each within the budget."""
    from gpusort.backends import cupy as gpu_backend

    x = np.random.default_rng(1).integers(-(2**40), 2**40, (64, 2**16))  # 32 MiB of int64
    gpu_backend.memory_stats(reset=True)
    got = gpusort.sort(da.from_array(x, chunks=(64, 2**16)), axis=1, backend="cupy",
                       gpu_memory_budget=16 * 2**20).compute(scheduler="threads")
    np.testing.assert_array_equal(got, np.sort(x, axis=1))
    stats = gpu_backend.memory_stats()
    assert stats["budget_bytes"] == 16 * 2**20 and 0 < stats["peak_bytes"] <= stats["budget_bytes"]


@pytest.mark.gpu
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nd_cases(), st.sampled_from(GPU_PLACES), TASK_BYTES)
def test_cupy_backend_along_any_axis_matches_numpy(case, where, task_bytes):
    """The same property on the GPU: host chunks with backend="cupy", and CuPy chunks."""
    kwargs = on_gpu(where, case[0].dtype)
    with dask.config.set({"gpusort.task-bytes": task_bytes}):
        if kwargs is not None:
            check_along_axis(*case, **kwargs)
