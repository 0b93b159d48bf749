"""gpusort.gpu as a stand-in for cupy.sort, cupy.argsort and cupy.lexsort: N-D, any axis, complex keys.

Expected results come from NumPy (``np.sort``, ``np.argsort(kind="stable")``,
``np.lexsort``) or from :mod:`reference` (Python's stable ``sorted``), never
from gpusort.  A stable argsort is unique, so positions are compared exactly;
``sort`` of real keys must hold the input's bits as a multiset (its order
among tied keys, ``-0.0`` and ``0.0`` or NaN payloads, is free, as
``np.sort``'s is), ``sort`` of complex keys exactly the stable permutation's
bits.

Each GPU test names few kernel instantiations (each is an NVRTC compile):
short rows take the composite-key path, which sorts unsigned integers
ascending whatever the key dtype and direction, and the segmented path
(long rows) is tested on float32 both ways, int16 descending and float64.
The tile sizes come from :func:`gpusort.cuda.tuning.launch_box` of the device.
"""

from __future__ import annotations


import numpy as np
import pytest

from gpusort.cuda import tuning
from gpusort.keys import composite, order
from reference import (
    CUPY_DTYPES, assert_same_keys, make_keys, parts_in_order_or_not, ref_argsort, ref_argsort_along, ref_in_order,
    ref_lexsort, special_pool,
)


@pytest.fixture
def cp():
    """CuPy and gpusort.gpu, imported here so that the CPU tests collect and run without them."""
    cupy = pytest.importorskip("cupy")
    return cupy, pytest.importorskip("gpusort.gpu")


def tile(cupy, dtype) -> int:
    arch = int(cupy.cuda.Device().compute_capability)
    nt, vt = tuning.launch_box(arch, np.dtype(dtype).itemsize)
    return nt * vt


def check_sort_argsort(cupy, gpu, x: np.ndarray, axis=-1, descending=False, d=None) -> None:
    """sort and argsort of ``x`` (on the GPU: ``d``, or a copy) along ``axis`` against the reference; the input left as it was."""
    d = cupy.asarray(x) if d is None else d
    before = d.copy()
    perm = ref_argsort_along(x, axis, descending)
    got = cupy.asnumpy(gpu.argsort(d, axis, descending=descending))
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, perm)
    want = np.take_along_axis(x.ravel() if axis is None else x, perm, axis=-1 if axis is None else axis)
    got = cupy.asnumpy(gpu.sort(d, axis, descending=descending))
    # The multiset of bits is per row along the sort axis: move it last.
    along = (lambda y: y) if axis is None else (lambda y: np.moveaxis(y, axis, -1))
    assert_same_keys(along(got), along(want), "exact" if x.dtype.kind == "c" else "multiset")
    assert_same_keys(cupy.asnumpy(d), cupy.asnumpy(before), "exact")


# --- CPU: the pure helpers ----------------------------------------------------------------


@pytest.mark.parametrize("nv", [8704, 5888, 4352, 1408])
def test_segment_length_is_the_smallest_tile_power_of_two(nv):
    for length in [1, 2, nv // 2, nv - 1, nv, nv + 1, 2 * nv, 2 * nv + 1, 5 * nv, 16384, 70000, 2**20 + 3]:
        s = tuning.segment_length(length, nv)
        m = (s // nv).bit_length() - 1
        assert s == nv << m and s >= length, (length, s)
        assert m == 0 or s // 2 < length  # nothing shorter holds the row
        if length > nv:
            assert s < 2 * length  # past one tile the pad is less than the row


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dtype", ["uint8", "int16", "int64", "uint64", "float16", "float32", "float64"])
def test_last_key_sorts_after_every_key(dtype, descending):
    pad = tuning.last_key(dtype, descending)
    assert pad.dtype == np.dtype(dtype)
    keys = np.append(special_pool(dtype), pad)  # with NaN, or the extreme the pad equals
    assert ref_argsort(keys, descending)[-1] == keys.size - 1  # stable: a pad after the keys stays last


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dtype", ["bool", "int8", "int32", "int64", "uint16", "float16", "float64",
                                   "datetime64[s]", "timedelta64[ns]"])  # fmt: skip
def test_key_columns_are_unsigned_and_decode_back(dtype, descending, rng):
    """Columns packed after a row number order as (row, key), and decode_column inverts key_columns."""
    x = make_keys(rng, dtype, (3, 50), "special")
    rows = np.repeat(np.arange(3), 50)
    for scheme in ("tied", "exact"):
        columns, widths = order.key_columns(x.ravel(), descending, scheme)
        assert all(c.dtype.kind == "u" for c in columns)
        layout = composite.Layout((composite.row_bits(3), *widths))
        packed = layout.pack([rows, *columns])
        if scheme == "tied":  # ties (both zeros, every NaN) keep their order, as the reference's
            got = composite.argsort_rows(packed).reshape(3, 50) - 50 * np.arange(3)[:, None]
            np.testing.assert_array_equal(got, ref_argsort_along(x, -1, descending))
    back = order.decode_column(layout.unpack(packed, 1), x.dtype, descending, "exact")
    assert_same_keys(back, x.ravel(), "exact")


def test_reference_orders_complex_as_numpy(rng):
    x = make_keys(rng, "complex128", (4000,), "special")
    np.testing.assert_array_equal(ref_argsort(x), np.argsort(x, kind="stable"))
    keys = [make_keys(rng, t, (500,), "few special") for t in ("int8", "float64", "complex64")]
    np.testing.assert_array_equal(ref_lexsort(keys), np.lexsort(keys))


# --- GPU ----------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("dtype", CUPY_DTYPES)
def test_every_dtype_short_rows(cp, dtype, descending, rng):
    """(37, 1000): rows below half a tile, so composite keys (one word, or LSD past 64 bits)."""
    cupy, gpu = cp
    for pattern in ("special", "few special", "sorted"):
        check_sort_argsort(cupy, gpu, make_keys(rng, dtype, (37, 1000), pattern), -1, descending)


@pytest.mark.gpu
@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
def test_argsort_packs_positions_under_narrow_keys(cp, descending, rng):
    """Keys and positions in one word where they fit and save passes (one row, long rows, short rows)."""
    cupy, gpu = cp
    cases = [("int32", (2**20 + 3,)), ("float32", (3, 70001)), ("uint8", (5000, 40)), ("float16", (2, 2**17)),
             ("bool", (7, 9000))]
    for dtype, shape in cases:
        for pattern in ("few special", "special", "sorted"):
            x = make_keys(rng, dtype, shape, pattern)
            rows = cupy.asarray(x.reshape(-1, shape[-1]))
            assert gpu._packed_positions([rows], descending) is not None, (dtype, shape)
            check_sort_argsort(cupy, gpu, x, -1, descending)
    wide = cupy.asarray(make_keys(rng, "int64", (3, 5000), "few special"))
    assert gpu._packed_positions([wide], descending) is None
    check_sort_argsort(cupy, gpu, cupy.asnumpy(wide), -1, descending)
    # Rows of 16384 float32: packed, 8-byte words on the smaller tile take two
    # passes where the key-value sort takes one, so the key-value sort runs.
    long_rows = make_keys(rng, "float32", (2, 16384), "special")
    assert gpu._packed_positions([cupy.asarray(long_rows)], descending) is None
    check_sort_argsort(cupy, gpu, long_rows, -1, descending)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "dtype, descending", [("float32", False), ("float32", True), ("int16", True), ("float64", False)]
)
def test_long_rows_segmented(cp, dtype, descending, rng):
    """Rows padded to NV * 2**m and sorted as segments: past the tile, one tile, exactly a tile, one row."""
    cupy, gpu = cp
    nv = tile(cupy, dtype)  # the sort's tile; argsort sorts keys packed with positions, on its own tile
    shapes = [(4, 20000), (3, nv - 1), (2, nv), (5, nv // 2), (1, 70000)]
    for shape in shapes:
        segment = gpu._segment(shape[0], shape[1], np.dtype(dtype), 0, descending)
        assert segment is not None and segment < 2 * shape[1] + 1, (shape, segment)  # the path under test
        for pattern in ("random", "special", "equal special", "reversed"):
            check_sort_argsort(cupy, gpu, make_keys(rng, dtype, shape, pattern), -1, descending)
    # Just under half a tile, padding would more than double the rows: composite keys instead.
    assert gpu._segment(5, nv // 2 - 1, np.dtype(dtype), 0, descending) is None


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "complex128"])
def test_shapes_and_every_axis(cp, dtype, rng):
    cupy, gpu = cp
    for shape in [(0,), (0, 5), (5, 0), (1, 1), (3, 1), (2, 3, 4)]:
        x = make_keys(rng, dtype, shape, "special")
        for axis in [None, *range(-len(shape), len(shape))]:
            check_sort_argsort(cupy, gpu, x, axis)
            got = gpu.sort(cupy.asarray(x), axis)
            assert got.shape == np.sort(x, axis).shape and got.dtype == x.dtype
    for descending in (False, True):
        check_sort_argsort(cupy, gpu, make_keys(rng, dtype, (2, 3, 4), "few special"), 0, descending)


@pytest.mark.gpu
def test_zero_dimensional_as_numpy(cp):
    cupy, gpu = cp
    five = cupy.asarray(np.array(5.0, np.float32))
    with pytest.raises(np.exceptions.AxisError, match="axis -1 is out of bounds for array of dimension 0"):
        gpu.sort(five)
    np.testing.assert_array_equal(cupy.asnumpy(gpu.sort(five, axis=None)), np.sort(np.array(5.0), axis=None))
    for axis in (-1, 0, None):
        got = cupy.asnumpy(gpu.argsort(five, axis))
        np.testing.assert_array_equal(got, np.argsort(np.array(5.0), axis))
        assert got.dtype == np.int64 and got.shape == (1,)
    with pytest.raises(np.exceptions.AxisError, match="dimension 1"):
        gpu.argsort(five, 1)  # NumPy argsorts a 0-d array as 1-D
    got = gpu.lexsort([five, five])
    assert got.shape == () and int(got) == np.lexsort([np.array(5.0), np.array(5.0)])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "complex128"])
def test_fortran_order_and_strided_inputs(cp, dtype, rng):
    cupy, gpu = cp
    x = make_keys(rng, dtype, (37, 1000), "special")
    d = cupy.asarray(x)
    # cupy.asfortranarray rewrites NaN payloads (0x7fc00001 became 0x7fffffff on the H200):
    # the expected result comes from the bits the Fortran-ordered array really holds.
    fortran = cupy.asfortranarray(d)
    views = [(cupy.asnumpy(fortran), fortran), (x[::2, 1::3], d[::2, 1::3]), (x.T, d.T), (x[:, ::-1], d[:, ::-1])]
    for host, device in views:
        assert not device.flags.c_contiguous
        for axis in (0, -1, None):
            check_sort_argsort(cupy, gpu, host, axis, descending=axis == 0, d=device)


@pytest.mark.gpu
def test_kind_and_stable_accepted_bad_ones_refused(cp, rng):
    cupy, gpu = cp
    x = make_keys(rng, "float32", (3, 50), "few special")
    d = cupy.asarray(x)
    perm = np.argsort(x, kind="stable")
    for kwargs in [{"kind": k} for k in (None, "quicksort", "mergesort", "heapsort", "stable")] + [
        {"stable": True}, {"stable": False}
    ]:
        np.testing.assert_array_equal(cupy.asnumpy(gpu.argsort(d, **kwargs)), perm)
        np.testing.assert_array_equal(cupy.asnumpy(gpu.sort(d, **kwargs)), np.sort(x))
    for f in (gpu.sort, gpu.argsort):
        with pytest.raises(ValueError, match="kind='bogus' is not a sort kind"):
            f(d, kind="bogus")
        with pytest.raises(ValueError, match="kind and stable cannot both be given"):
            f(d, kind="stable", stable=True)


@pytest.mark.gpu
@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
def test_lexsort(cp, descending, rng):
    cupy, gpu = cp
    n = 30_000
    cases = [
        ["float32"],                              # one key: an argsort
        ["int32", "int32"],                       # one 64-bit composite key
        ["int8", "float64", "complex64"],         # 2 + 32 + 32 + 64 + 8 bits: three words, LSD
        ["bool", "uint16", "float16"],            # 33 bits (40 descending): one 64-bit key
    ]  # fmt: skip
    for dtypes in cases:
        keys = [make_keys(rng, t, (n,), "few special" if i else "special") for i, t in enumerate(dtypes)]
        got = cupy.asnumpy(gpu.lexsort([cupy.asarray(k) for k in keys], descending=descending))
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, ref_lexsort(keys, descending))
        if not descending:
            np.testing.assert_array_equal(got, np.lexsort(keys))
    # A 2-D keys array: its first axis indexes the keys; rows of the keys along either axis.
    keys = np.stack([make_keys(rng, "int16", (3, 500), "few special") for _ in range(2)])
    wants = {-1: np.stack([ref_lexsort(list(keys[:, i]), descending) for i in range(3)]),
             0: np.stack([ref_lexsort(list(keys[:, :, j]), descending) for j in range(500)], axis=1)}
    for axis, want in wants.items():
        got = cupy.asnumpy(gpu.lexsort(cupy.asarray(keys), axis, descending=descending))
        np.testing.assert_array_equal(got, want)
        if not descending:
            np.testing.assert_array_equal(got, np.lexsort(keys, axis))


@pytest.mark.gpu
def test_errors_name_the_argument_and_the_fix(cp):
    cupy, gpu = cp
    a = cupy.zeros((2, 3), np.float32)
    with pytest.raises(np.exceptions.AxisError, match="axis 2 is out of bounds for array of dimension 2") as e:
        gpu.sort(a, axis=2)
    assert isinstance(e.value, ValueError) and isinstance(e.value, IndexError)
    with pytest.raises(np.exceptions.AxisError, match="axis -3 .* dimension 2"):
        gpu.argsort(a, axis=-3)
    with pytest.raises(TypeError, match="axis must be an integer or None"):
        gpu.sort(a, axis=1.0)
    with pytest.raises(TypeError, match=r"a must be a cupy.ndarray, not numpy.ndarray.*cupy.asarray\(a\)"):
        gpu.sort(np.zeros(3))
    with pytest.raises(TypeError, match=r"keys has dtype complex64.*float16/32/64 \(convert"):
        gpu.sort_pairs(cupy.zeros(3, np.complex64), cupy.zeros(3))  # sort_pairs takes real keys only
    with pytest.raises(ValueError, match="keys is empty: lexsort needs at least one key"):
        gpu.lexsort([])
    with pytest.raises(ValueError, match=r"keys\[1\] has shape \(4,\) but keys\[0\] has \(3,\)"):
        gpu.lexsort([cupy.zeros(3), cupy.zeros(4)])
    with pytest.raises(TypeError, match=r"keys\[1\] must be a cupy.ndarray.*cupy.asarray\(keys\[1\]\)"):
        gpu.lexsort([cupy.zeros(3), np.zeros(3)])
    with pytest.raises(TypeError, match=r"keys must be a sequence of cupy.ndarray or a cupy.ndarray, not numpy.ndarray"):
        gpu.lexsort(np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"keys is a 0-D array.*pass \[keys\]"):
        gpu.lexsort(cupy.zeros(()))
    # NumPy reads a 1-D array as keys of one element each: one position, 0.
    assert gpu.lexsort(cupy.asarray([5.5, 7.0, 1.0])).tolist() == np.lexsort(np.array([5.5, 7.0, 1.0])).tolist() == 0


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["int64", "uint16", "float32", "float64"])
def test_cupy_backend_reads_parts_end_to_end(cp, dtype):
    """A task's parts in order or not, their ends gathered in one launch: as the reference says, views and all."""
    cupy, _ = cp
    from gpusort.backends import get_backend

    cases = parts_in_order_or_not(dtype)
    for parts in cases:
        on_gpu = [cupy.asarray(p) for p in parts]
        assert get_backend("cupy").is_sorted(on_gpu) == ref_in_order(parts), [len(p) for p in parts]
    x = cupy.arange(4000).astype(dtype)
    assert get_backend("cupy").is_sorted([x[:1000:2], x[1000::3]])  # not contiguous
    assert not get_backend("cupy").is_sorted([x[1000::3], x[:1000:2]])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["int64", "float32"])
def test_cupy_backend_sees_sorted_runs_and_sorts_the_rest(cp, dtype):
    """A sample, then gpusort's verification kernel: a swap between two samples is caught."""
    cupy, _ = cp
    from gpusort.backends import get_backend

    backend = get_backend("cupy")
    x = cupy.arange(100_000).astype(dtype)
    assert backend.is_sorted(x)
    y = x.copy()
    y[50_001], y[50_002] = x[50_002], x[50_001]
    assert not backend.is_sorted(y)
    if dtype.startswith("f"):
        y = x.copy()
        y[-5:] = cupy.nan
        assert backend.is_sorted(y)
        y[7] = cupy.nan
        assert not backend.is_sorted(y)
    keys, _ = backend.sort_run(y)
    np.testing.assert_array_equal(cupy.asnumpy(keys).view(f"u{y.itemsize}"),
                                  np.sort(cupy.asnumpy(y), kind="stable").view(f"u{y.itemsize}"))


@pytest.mark.gpu
def test_sorted_cupy_chunks_sort_exactly_on_the_threaded_scheduler(cp):
    cupy, _ = cp
    import dask
    import dask.array as da

    import gpusort

    x = np.sort(np.random.default_rng(4).standard_normal(300_000))
    x[::97] = -0.0
    keys = da.from_array(x, chunks=30_000).map_blocks(cupy.asarray)
    with dask.config.set(scheduler="threads"):
        got = cupy.asnumpy(gpusort.sort(keys, chunks=40_000).compute())
        positions = cupy.asnumpy(gpusort.argsort(keys).compute())
    want = np.argsort(x, kind="stable")
    np.testing.assert_array_equal(positions, want)
    np.testing.assert_array_equal(got.view(np.uint64), x[want].view(np.uint64))
