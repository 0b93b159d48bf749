"""``gpusort.merge`` and ``merge_by_key`` against NumPy's stable sort of the concatenation, bit for bit.

The expected merge of sorted ``a`` and ``b`` is the stable sort of
``concatenate([a, b])``: ties keep ``a``'s elements first, each input's in
its order, with their exact bits (``-0.0`` and ``0.0``, NaN payloads).
Ascending orders come from NumPy, descending ones from :mod:`reference`.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
from dask.callbacks import Callback
from distributed import Client, LocalCluster
from hypothesis import given, settings, strategies as st

import gpusort
from reference import ALL_DTYPES, CUPY_DTYPES, GPU_PLACES, PATTERNS, assert_same_keys, make_keys, on_gpu, ref_argsort


def stable_order(x: np.ndarray, descending: bool) -> np.ndarray:
    """Positions of the stable sort of ``x``: NumPy's ascending, the reference's descending."""
    return ref_argsort(x, True) if descending else np.argsort(x, kind="stable")


def sorted_input(rng, dtype, n, pattern, descending) -> np.ndarray:
    x = make_keys(rng, dtype, n, pattern)
    return x[stable_order(x, descending)]


def chunking(draw, n):
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=12)))  # empty and tiny chunks too
    return tuple(np.diff([0, *cuts, n]).tolist())


@st.composite
def cases(draw, dtypes=ALL_DTYPES):
    dtype = draw(st.sampled_from(dtypes))
    descending = draw(st.booleans())
    rng = np.random.default_rng(draw(st.integers(0, 2**32)))
    a = sorted_input(rng, dtype, draw(st.integers(0, 300)), draw(st.sampled_from(PATTERNS)), descending)
    b = sorted_input(rng, dtype, draw(st.integers(0, 300)), draw(st.sampled_from(PATTERNS)), descending)
    out = draw(st.one_of(st.none(), st.integers(1, len(a) + len(b) + 3)))
    return a, chunking(draw, len(a)), b, chunking(draw, len(b)), out, descending


def balanced(chunks, length):
    sizes = list(chunks[0])
    return all(c == length for c in sizes[:-1]) and 0 < sizes[-1] <= length or sizes == [0]


def check_merge(case, backend=None, to_chunks=lambda x: x, to_host=np.asarray):
    a, ca, b, cb, out, descending = case
    before = a.copy(), b.copy()
    both = np.concatenate([a, b])
    want = stable_order(both, descending)
    da_a, da_b = (to_chunks(da.from_array(x, chunks=(c,))) for x, c in ((a, ca), (b, cb)))

    got = gpusort.merge(da_a, da_b, descending=descending, chunks=out, backend=backend)
    length = out or -(-len(both) // (len(ca) + len(cb))) or 1
    assert balanced(got.chunks, min(length, max(len(both), 1))), got.chunks
    assert_same_keys(to_host(got.compute()), both[want], bits="exact")

    positions = np.arange(len(both), dtype=np.int32)
    va, vb = (to_chunks(da.from_array(p, chunks=c)) for p, c in ((positions[:len(a)], ca), (positions[len(a):], cb)))
    k, v = gpusort.merge_by_key(da_a, va, da_b, vb, descending=descending, chunks=out, backend=backend)
    assert k.chunks == v.chunks == got.chunks
    k, v = dask.compute(k, v)
    assert_same_keys(to_host(k), both[want], bits="exact")
    np.testing.assert_array_equal(to_host(v), want.astype(np.int32))
    for x, was in zip((a, b), before):
        np.testing.assert_array_equal(x.view(np.uint8), was.view(np.uint8))


@settings(max_examples=150, deadline=None)
@given(cases())
def test_merge_is_the_stable_sort_of_the_concatenation(case):
    check_merge(case)


@pytest.mark.gpu
@settings(max_examples=40, deadline=None)
@given(cases(CUPY_DTYPES), st.sampled_from(GPU_PLACES))
def test_merge_on_the_gpu(case, where):
    """CuPy chunks merge on the GPU; NumPy chunks with backend="cupy" merge there and come back."""
    check_merge(case, **on_gpu(where, case[0].dtype))  # CUPY_DTYPES only: never None


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", ">f8"])
@pytest.mark.parametrize("descending", [False, True])
def test_zeros_and_nan_payloads_keep_their_bits_in_stable_order(dtype, descending):
    """-0.0 ties with 0.0 and NaNs tie with each other: a's first, each input's in its order, every bit kept."""
    bits = np.dtype(f"u{np.dtype(dtype).itemsize}").newbyteorder(np.dtype(dtype).byteorder)
    nans = np.array([np.nan, -np.nan], dtype)
    payload = (nans.view(bits) | bits.type(1)).astype(bits)  # NaNs other than the canonical one
    a = np.concatenate([np.array([-1.0, -0.0, 0.0, -0.0], dtype), nans, payload.view(dtype)])
    b = np.concatenate([np.array([0.0, -0.0, 0.0, 1.0], dtype), payload[::-1].view(dtype), nans[::-1]])
    if descending:
        a, b = (np.concatenate([x[:4][::-1], x[4:]]) for x in (a, b))
    both = np.concatenate([a, b], dtype=a.dtype)
    want = both[stable_order(both, descending)]
    for ca, cb, out in [(3, 2, 5), (1, 7, 1), (-1, -1, None), (2, 3, 16)]:
        got = gpusort.merge(da.from_array(a, chunks=ca), da.from_array(b, chunks=cb), descending=descending,
                            chunks=out).compute()
        assert got.dtype == a.dtype
        assert_same_keys(got, want, bits="exact")
        k, v = gpusort.merge_by_key(a, a.astype(np.complex64), b, b.astype(np.complex64), descending=descending)
        assert_same_keys(k.compute(), want, bits="exact")
    cz = np.array([complex(-0.0, 1), complex(0.0, 1), complex(np.nan, 0)], ">c16")
    dz = np.array([complex(0.0, 1), complex(-0.0, 1), complex(np.nan, 0)], ">c16")
    got = gpusort.merge(da.from_array(cz, chunks=2), da.from_array(dz, chunks=1)).compute()
    assert got.dtype == cz.dtype
    want = np.concatenate([cz, dz], dtype=cz.dtype)[[0, 1, 3, 4, 2, 5]]  # the ties: a's, then b's
    np.testing.assert_array_equal(got.view(np.uint8).reshape(6, 16), want.view(np.uint8).reshape(6, 16))


@pytest.mark.parametrize("scheduler", ["threads", "sync"])
def test_empty_inputs_and_empty_chunks(scheduler):
    x = np.arange(10, dtype=np.int16)
    empty = np.zeros(0, np.int16)
    with dask.config.set(scheduler=scheduler):
        for a, b in ((x, empty), (empty, x), (empty, empty)):
            got = gpusort.merge(da.from_array(a, chunks=3), da.from_array(b, chunks=4), chunks=4)
            np.testing.assert_array_equal(got.compute(), np.sort(np.concatenate([a, b])))
            assert got.dtype == np.int16 and balanced(got.chunks, 4)
        holes = da.from_array(x, chunks=((0, 4, 0, 6, 0),))
        k, v = gpusort.merge_by_key(holes, holes, da.from_array(x), da.from_array(-x))
        np.testing.assert_array_equal(k.compute(), np.repeat(x, 2))
        np.testing.assert_array_equal(v.compute(), np.ravel(np.column_stack([x, -x])))


def test_hundreds_of_chunks_and_a_graph_of_their_size():
    rng = np.random.default_rng(5)
    a = np.sort(rng.integers(-500, 500, 30_000))
    b = np.sort(rng.integers(-500, 500, 20_000))
    da_a, da_b = da.from_array(a, chunks=97), da.from_array(b, chunks=113)  # 310 and 177 chunks
    got = gpusort.merge(da_a, da_b, chunks=211)
    layers = got.__dask_graph__().layers
    own = sum(len(layer) for name, layer in layers.items() if name not in (da_a.name, da_b.name))
    # A run per input (the chunks are small), a sample per run, one splits task, merges and output chunks.
    assert own <= 2 + 2 + 1 + 2 * len(got.chunks[0])
    np.testing.assert_array_equal(got.compute(), np.sort(np.concatenate([a, b]), kind="stable"))


def graph_size(x: da.Array) -> tuple[int, int]:
    """Tasks and dependencies of ``x``'s graph, inputs included."""
    dsk = dict(x.__dask_graph__())
    return len(dsk), sum(len(dask.core.get_dependencies(dsk, k)) for k in dsk)


def test_chunks_held_in_memory_are_task_arguments_not_keys():
    """``from_array``'s chunks are data in the graph: the runs take them as arguments, so no key is left of them.

    Dask's threaded scheduler pays for every data key on every other task it
    starts (tasks x chunks: 5 s at 17,011 chunks), so the graph here must be
    the merge's own tasks alone; chunks that are tasks stay keys.
    """
    rng = np.random.default_rng(9)
    a, b = np.sort(rng.integers(0, 100, 3_000)), np.sort(rng.integers(0, 100, 1_000))
    held = gpusort.merge(da.from_array(a, chunks=300), da.from_array(b, chunks=1), chunks=500)
    computed = da.from_array(b, chunks=1) + 0  # chunks that are tasks: read by key
    by_key = gpusort.merge(da.from_array(a, chunks=300), computed, chunks=500)
    starts = []

    class Start(Callback):
        def _start(self, dsk):
            starts.append(len(dsk))

    want = np.sort(np.concatenate([a, b]), kind="stable")
    with dask.config.set(scheduler="threads"), Start():
        np.testing.assert_array_equal(held.compute(), want)
        np.testing.assert_array_equal(by_key.compute(), want)
    # Two runs, two samples, splits, a merge and 8 output chunks; at most a few more.
    assert graph_size(held)[0] <= 20 and starts[0] <= 20, (graph_size(held), starts)
    assert graph_size(by_key)[0] >= 2 * 1_000 and starts[1] >= 1_000, (graph_size(by_key), starts)


@pytest.mark.parametrize("small_first", [True, False])
def test_tasks_and_dependencies_grow_linearly_with_the_chunks(small_first):
    """O(P + J), as the sort: no task depends on every sample, no merge on every chunk its co-ranks may reach."""
    sizes = {}
    for p in (250, 500, 1000, 2000):
        small = da.from_array(np.arange(p), chunks=1)
        big = da.from_array(np.arange(50_000), chunks=5_000)
        got = gpusort.merge(*((small, big) if small_first else (big, small)))
        tasks, deps = sizes[p] = graph_size(got)
        assert tasks <= 3 * (p + 10) + 20 and deps <= 3 * (p + 10) + 20, (p, tasks, deps)
    for p in (250, 500, 1000):  # doubling the chunks at most doubles the graph
        assert sizes[2 * p][1] <= 2 * sizes[p][1] + 10, sizes
    np.testing.assert_array_equal(got.compute(), np.sort(np.concatenate([np.arange(2000), np.arange(50_000)])))


@pytest.mark.parametrize("descending", [False, True])
def test_every_position_out_of_order_is_found_and_named(descending):
    """One pair swapped anywhere -- inside a chunk, across chunk ends, across merges -- raises at that position."""
    n = 60
    sorted_a = np.arange(0, 2 * n, 2, dtype=np.int64)
    b = np.arange(1, 41, 4, dtype=np.int64)
    if descending:
        sorted_a, b = sorted_a[::-1].copy(), b[::-1].copy()
    for p in range(1, n):
        a = sorted_a.copy()
        a[[p - 1, p]] = a[[p, p - 1]]
        got = gpusort.merge(da.from_array(a, chunks=7), da.from_array(b, chunks=3), descending=descending, chunks=5)
        order = "descending" if descending else "ascending"
        with pytest.raises(ValueError, match=rf"^a is not sorted \({order}, NaN last\): a\[{p}\] = {a[p]} comes "
                                             rf"after a\[{p - 1}\] = {a[p - 1]}; sort it first"):
            got.compute()
    with pytest.raises(ValueError, match=r"^b is not sorted .* b\[\d+\] = "):
        gpusort.merge(da.from_array(sorted_a), da.from_array(b[::-1].copy(), chunks=4), chunks=8,
                      descending=descending).compute()


def test_unsorted_float_and_complex_keys_are_named():
    with pytest.raises(ValueError, match=r"kb is not sorted .*kb\[2\] = 1\.0 comes after kb\[1\] = nan"):
        k, v = gpusort.merge_by_key(np.array([0.0]), np.array([1]), np.array([0.0, np.nan, 1.0]), np.arange(3))
        k.compute()
    with pytest.raises(ValueError, match=r"a is not sorted .*a\[1\] = \(1\+0j\) comes after a\[0\] = \(1\+1j\)"):
        gpusort.merge(np.array([1 + 1j, 1 + 0j]), np.array([0j])).compute()


@pytest.mark.parametrize("chunks", [1, 2])
@pytest.mark.parametrize("swap", [False, True])
def test_unsorted_complex_rows_of_nans_get_the_not_sorted_error(chunks, swap):
    """Issue 48: co-ranks found over unsorted rows once failed in corank (negative repeats) before any check."""
    a = np.full(3, complex(np.nan, -2))
    b = np.array([complex(np.nan, np.nan), complex(np.nan, 2)])  # descending wants nan+2j first
    first, second = (b, a) if swap else (a, b)
    name = "a" if swap else "b"
    got = gpusort.merge(da.from_array(first, chunks=chunks), da.from_array(second, chunks=chunks), descending=True)
    with pytest.raises(ValueError, match=rf"^{name} is not sorted \(descending, NaN last\): {name}\[1\] = "
                                         rf"\(nan\+2j\) comes after {name}\[0\] = \(nan\+nanj\)"):
        got.compute()


def test_chunks_whose_memory_is_no_array_merge(tmp_path):
    """Chunks that own no array's memory (as distributed unpickles datetimes: a ``bytes`` base) merge, exact."""
    a, b = np.arange(5_001).astype("m8[s]"), np.arange(0, 6_006, 2).astype("m8[s]")
    parts = [np.frombuffer(c.tobytes(), c.dtype) for c in np.array_split(a, 7)]
    starts = np.cumsum([0] + [len(c) for c in parts])
    A = da.concatenate([da.from_delayed(dask.delayed(lambda c: c)(c), (len(c),), c.dtype) for c in parts])
    assert A.chunks[0] == tuple(np.diff(starts))
    got = gpusort.merge(A, da.from_array(b, chunks=1_000)).compute(scheduler="sync")
    both = np.concatenate([a, b])
    np.testing.assert_array_equal(got, both[np.argsort(both, kind="stable")])


def test_a_chunk_of_another_dtype_is_named():
    """A chunk that loads another dtype than its array declares stops with the input's name, keys and values."""
    a = da.from_array(np.arange(100), chunks=10).map_blocks(lambda c: c.astype(np.int32), dtype=np.int64)
    with pytest.raises(ValueError, match="chunk 0 of a loaded dtype int32, but its dask array declares int64"):
        gpusort.merge(a, da.arange(5, chunks=5)).compute(scheduler="sync")
    v = da.from_array(np.arange(100.0), chunks=10).map_blocks(lambda c: c.astype(np.float32), dtype=np.float64)
    with pytest.raises(ValueError, match="chunk 0 of the values of ka loaded dtype float32"):
        dask.compute(*gpusort.merge_by_key(da.arange(100, chunks=10), v, da.arange(5, chunks=5),
                                           da.zeros(5, chunks=5)), scheduler="sync")


def test_building_the_graph_computes_nothing():
    def explode(block):
        raise AssertionError("a chunk was computed while only building the graph")

    a = da.ones(100, chunks=10).map_blocks(explode, dtype=np.float64)
    for result in (gpusort.merge(a, a), *gpusort.merge_by_key(a, a, a, a, chunks=7)):
        assert isinstance(result, da.Array) and result.dtype == np.float64
    assert gpusort.merge(a, a).chunks == ((10,) * 20,)  # as many chunks as a and b together
    assert gpusort.merge(a, a[:5], chunks=40).chunks == ((40, 40, 25),)


def test_values_rechunked_to_their_keys_and_any_fixed_width_dtype():
    ka, kb = np.array([1, 3, 3, 9]), np.array([0, 3, 10])
    va, vb = np.array([b"a1", b"a3", b"a3", b"a9"]), np.array([b"b0", b"b3", b"bX"])
    k, v = gpusort.merge_by_key(da.from_array(ka, chunks=3), da.from_array(va, chunks=1),
                                da.from_array(kb, chunks=1), da.from_array(vb, chunks=2), chunks=2)
    np.testing.assert_array_equal(k.compute(), [0, 1, 3, 3, 3, 9, 10])
    np.testing.assert_array_equal(v.compute(), [b"b0", b"a1", b"a3", b"a3", b"b3", b"a9", b"bX"])


X = da.from_array(np.arange(10), chunks=3)


@pytest.mark.parametrize("call, error, match", [
    (lambda: gpusort.merge(X, X.astype(np.float64)), TypeError, r"a has dtype int64 but b has dtype float64.*cast"),
    (lambda: gpusort.merge(X, np.array(["a"])), TypeError, r"b has dtype <U1"),
    (lambda: gpusort.merge(da.ones((2, 2)), X), ValueError, r"a is 2-D.*axis=None"),
    (lambda: gpusort.merge(X, X[X > 3]), ValueError, r"b has unknown chunk sizes.*compute_chunk_sizes"),
    (lambda: gpusort.merge(X, X, descending="yes"), TypeError, r"descending must be True or False"),
    (lambda: gpusort.merge(X, X, chunks=0), ValueError, r"chunks must be a positive int"),
    (lambda: gpusort.merge(X, X, backend="tpu"), ValueError, r"backend='tpu' is not known"),
    (lambda: gpusort.merge_by_key(X, X, X, X.astype(np.int8)), TypeError, r"va has dtype int64 but vb has dtype int8"),
    (lambda: gpusort.merge_by_key(X, X[:9], X, X), ValueError, r"va has length 9 but ka has length 10"),
    (lambda: gpusort.merge_by_key(X, X, X, np.array([None] * 10)), TypeError, r"vb has dtype object"),
    (lambda: gpusort.merge_by_key(X, X, X, da.ones((10, 2))), ValueError, r"vb must be 1-D like kb"),
])
def test_bad_input_is_named(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        with Client(cluster) as c:
            yield c


def test_merge_on_worker_processes(client):
    rng = np.random.default_rng(17)
    a = make_keys(rng, "float64", 120_001, "nan")
    b = make_keys(rng, "float64", 80_003, "few")
    a, b = a[stable_order(a, False)], b[stable_order(b, False)]
    da_a = da.from_array(a, chunks=9_001).persist()
    da_b = da.from_array(b, chunks=(3, 0, 30_000, 50_000)).persist()
    both = np.concatenate([a, b])
    want = np.argsort(both, kind="stable")
    got, (k, v) = dask.compute(
        gpusort.merge(da_a, da_b, chunks=25_000),
        gpusort.merge_by_key(da_a, da.arange(len(a), chunks=9_001), da_b,
                             da.arange(len(a), len(both), chunks=20_000), chunks=33_333),
    )
    assert_same_keys(got, both[want], bits="exact")
    assert_same_keys(k, both[want], bits="exact")
    np.testing.assert_array_equal(v, want)
    with pytest.raises(ValueError, match=r"b is not sorted"):
        gpusort.merge(da_a, da_b[::-1]).compute()
