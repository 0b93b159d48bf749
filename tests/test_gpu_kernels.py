"""gpusort.gpu and the CuPy backend against NumPy, on a GPU.

The reference for every sort is :mod:`reference` (Python's stable ``sorted``
by ``(is NaN, ±value)``, independent of the code under test): ascending is
``np.sort``'s order (NaN last, -0.0 tied with 0.0), descending is its reverse
with NaN still last, and ties keep input order either way.  A stable sort's output is unique, so results are compared
bit for bit: NaN payloads and the sign of zero must survive.
"""

from __future__ import annotations


import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from gpusort.backends.cupy import BACKEND  # noqa: E402
from gpusort.cuda import buckets, build, dispatch, tuning  # noqa: E402
from gpusort.keys import order  # noqa: E402
from reference import make_keys, ref_argsort  # noqa: E402

gpu = pytest.importorskip("gpusort.gpu")

pytestmark = pytest.mark.gpu

KEY_DTYPES = [np.dtype(t) for t in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                                   "uint32", "uint64", "float16", "float32", "float64")]  # fmt: skip
PATTERNS = ["random", "equal", "few", "sorted", "reversed", "special"]


def tile(dtype) -> int:
    """NT * VT of the kernels sorting ``dtype`` on this device: the blocksort tile."""
    arch = int(cupy.cuda.Device().compute_capability)
    nt, vt = tuning.launch_box(arch, np.dtype(dtype).itemsize)
    return nt * vt


def bits(x):
    """An array's bits as unsigned integers, so NaN == NaN and -0.0 != 0.0."""
    x = np.ascontiguousarray(cupy.asnumpy(x))
    return x.view(f"u{min(x.dtype.itemsize, 8)}") if x.dtype.kind != "b" else x


def assert_same(got, expected):
    got_host = cupy.asnumpy(got)
    assert got_host.dtype == expected.dtype, (got_host.dtype, expected.dtype)
    np.testing.assert_array_equal(bits(got_host), bits(expected))


def sizes(dtype):
    t = tile(dtype)
    return [0, 1, t - 1, t, t + 1, 5 * t + 3]


def check_sort_and_argsort(x: np.ndarray, descending: bool):
    """``gpu.sort`` and ``gpu.argsort`` of host keys ``x`` against the reference; returns ``x`` on the GPU and the order."""
    d = cupy.asarray(x)
    perm = ref_argsort(x, descending)
    assert_same(gpu.sort(d, descending=descending), x[perm])
    assert_same(gpu.argsort(d, descending=descending), perm)
    return d, perm


@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("dtype", KEY_DTYPES, ids=str)
def test_sort_argsort_pairs_every_size_and_pattern(dtype, descending, rng):
    for n in sizes(dtype):
        for pattern in PATTERNS:
            x = make_keys(rng, dtype, n, pattern)
            d, perm = check_sort_and_argsort(x, descending)
            values = cupy.arange(n, dtype=np.float32)  # 4-byte values move through the kernels
            k, v = gpu.sort_pairs(d, values, descending=descending)
            assert_same(k, x[perm])
            assert_same(v, perm.astype(np.float32))
            assert_same(d, x)  # input untouched
            assert_same(values, np.arange(n, dtype=np.float32))


@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_float_exact_sort_keeps_tie_order(dtype, descending, rng, monkeypatch):
    # Floats sort as exact order keys (dispatch.exact_sort), which order -0.0
    # and 0.0 apart and NaNs by their bits; the stable order keeps both kinds
    # of ties in input order.  Every subset of the tied bit patterns, on every
    # plan: one tile (the blocksort loads and stores the floats), two-way
    # passes, and bucket passes (forced) with merge passes and without (the
    # in-place blocksort stores the floats).  kernel_tie_bounds must find
    # the groups and call exactly the mixed ones mixed.
    monkeypatch.setattr(tuning, "BUCKET_LEVELS_SAVED", 0)
    u = np.dtype(f"u{np.dtype(dtype).itemsize}")
    nan, sign = int(np.array(np.nan, dtype).view(u)), 1 << (8 * u.itemsize - 1)
    inf = int(np.array(np.inf, dtype).view(u))
    tied = np.array([nan, nan | 1, nan | sign, (nan | sign) + 3, 0, sign], u).view(dtype)
    t, sample = tile(dtype), 4 * tuning.BUCKETS * tuning.BUCKET_SAMPLE
    enc = build.encoding(np.dtype(dtype), descending)
    for n, bucketed, share in ((t - 3, False, 0.3), (3 * t + 5, False, 0.3), (300_007, True, 0.3), (sample + 3, True, 0.002)):
        monkeypatch.setattr(tuning, "BUCKET_MIN_BYTES", 0 if bucketed else 2**40)
        for subset in ([4, 5], [0, 1], [0, 2, 3], [4], [0], [0, 1, 2, 3, 4, 5]):
            x = (rng.standard_normal(n) * 3).astype(dtype)
            hit = rng.random(n) < share
            x[hit] = rng.choice(tied[subset], int(hit.sum()))
            d = cupy.asarray(x)
            if share < 0.01:  # buckets of one tile: no merge pass
                assert buckets.bucket_pass(enc, d, descending, u).tiles.levels == 0
            # kernel_tie_bounds on the keys in exact-key order (order.encode on the host).
            by_exact = x[np.argsort(order.encode(x, descending, "exact"), kind="stable")]
            ties = cupy.empty(5, np.int64)
            enc.tie_bounds((1,), (96,), (cupy.asarray(by_exact), np.int64(n), ties))
            lo, hi, nans_at, zeros_mixed, nans_mixed = ties.get().tolist()
            magnitude = by_exact.view(u) & (sign - 1)
            zeros, nans = np.flatnonzero(magnitude == 0), np.flatnonzero(magnitude > inf)
            assert (lo, hi) == ((zeros[0], zeros[-1] + 1) if zeros.size else (lo, lo)), subset
            assert nans_at == (nans[0] if nans.size else n), subset
            assert zeros_mixed == (np.unique(by_exact.view(u)[zeros]).size > 1), subset
            assert nans_mixed == (np.unique(by_exact.view(u)[nans]).size > 1), subset
            # The sort rewrites the mixed groups in input order.
            assert_same(gpu.sort(d, descending=descending), x[ref_argsort(x, descending)])
            assert_same(d, x)  # input untouched


@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("dtype", KEY_DTYPES, ids=str)
def test_large_sort_many_passes(dtype, descending, rng):
    n = 2**20 + 7
    for pattern in ("random", "few"):
        x = make_keys(rng, dtype, n, pattern)
        perm = ref_argsort(x, descending)
        d = cupy.asarray(x)
        assert_same(gpu.argsort(d, descending=descending), perm)
        assert_same(gpu.sort(d, descending=descending), x[perm])


@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("dtype", ["int64", "uint64", "float64"])
def test_four_way_passes_every_group_shape(dtype, descending, rng, monkeypatch):
    monkeypatch.setattr(tuning, "FOUR_WAY_MIN_KEYS", 0)  # these sorts are small: force them
    # Tiles 2 .. 65 give odd and even numbers of levels (a two-way pass first,
    # or none) and last groups of one to four runs, the last one partial; few
    # distinct keys and special values tie across the four runs, where only a
    # stable partition and merge keep the bits in input order.
    assert build.kernels(np.dtype(dtype), 0, descending).merge_four is not None
    t = tile(dtype)
    for tiles in (2, 3, 4, 5, 9, 16, 17, 33, 65):
        for n in (tiles * t, (tiles - 1) * t + 5):
            for pattern in ("few", "special", "random"):
                x = make_keys(rng, dtype, n, pattern)
                assert_same(gpu.sort(cupy.asarray(x), descending=descending), x[ref_argsort(x, descending)])


@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int32", "float16", "float32"])
def test_packed_argsort_every_plan(dtype, descending, rng, monkeypatch):
    # dispatch.packed_argsort packs as the blocksort loads and stores positions
    # from whichever kernel runs last: the blocksort (one tile), a two-way
    # pass, or a four-way pass (forced below FOUR_WAY_MIN_KEYS), after an odd
    # level or not, with last groups of one to four runs.  Ties (few distinct,
    # both zeros, NaNs of several bit patterns) must keep input order.
    monkeypatch.setattr(tuning, "FOUR_WAY_MIN_KEYS", 0)
    assert build.kernels(tuning.WORD, 0, False).merge_four_positions is not None
    t = build.kernels(tuning.WORD, 0, False).nv
    for n in (1, t, t + 1, 2 * t, 3 * t - 2, 5 * t, 9 * t + 5, 17 * t, 33 * t - 1):
        for pattern in ("few", "special"):
            x = make_keys(rng, dtype, n, pattern)
            d = cupy.asarray(x)
            perm = ref_argsort(x, descending)
            assert_same(dispatch.packed_argsort(d.view(np.uint8) if dtype == "bool" else d,
                                               descending=descending), perm)
            assert_same(gpu.argsort(d, descending=descending), perm)
            assert_same(d, x)  # input untouched


@pytest.mark.parametrize("group_tiles", [0, 2**40], ids=["one-lane", "lane-groups"])
@pytest.mark.parametrize("dtype", ["int16", "float32", "int64"])
def test_partition_by_one_lane_and_by_lane_groups(dtype, group_tiles, rng, monkeypatch):
    # Merge passes search each tile's partition with one lane where tiles are
    # many and with PARTITION_LANES lanes where they are few; force each on
    # sorts (two-way passes, from 0 and bucket by bucket) and merges of
    # adversarial keys, against the reference.
    monkeypatch.setattr(tuning, "PARTITION_GROUP_TILES", group_tiles)
    t = tile(dtype)
    for n, bucketed in ((9 * t + 5, False), (300_007, True)):
        monkeypatch.setattr(tuning, "BUCKET_MIN_BYTES", 0 if bucketed else 2**40)
        monkeypatch.setattr(tuning, "BUCKET_LEVELS_SAVED", 0)
        for pattern in ("random", "few", "special", "reversed"):
            for descending in (False, True):
                check_sort_and_argsort(make_keys(rng, dtype, n, pattern), descending)
    a, b = np.sort(make_keys(rng, dtype, 5 * t + 3, "few")), np.sort(make_keys(rng, dtype, 3 * t, "few"))
    both = np.concatenate([a, b])
    assert_same(gpu.merge(cupy.asarray(a), cupy.asarray(b)), both[ref_argsort(both)])


@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("dtype", ["int8", "int32", "uint64", "float16", "float32", "float64"])
def test_sample_splitters_are_every_step_th_of_the_sorted_sample(dtype, descending, rng):
    # kernels/kernel_splitters.cuh places each key of the blocksorted tiles in
    # their stable merge: the splitters must be exactly the keys at every
    # BUCKET_SAMPLE-th place of the sample's stable sort, whatever ties the
    # tiles share (equal keys, both zeros, NaNs of several bits).  A float
    # sort's count compares exact keys (order.encode's "exact", on the host):
    # its splitters are every BUCKET_SAMPLE-th of their ascending sort.
    n, step = tuning.BUCKETS * tuning.BUCKET_SAMPLE, tuning.BUCKET_SAMPLE
    modules = [build.kernels(np.dtype(dtype), 0, descending)]
    if tuning.packs(dtype):
        modules.append(build.packing(np.dtype(dtype), descending))
    for pattern in PATTERNS:
        x = make_keys(rng, dtype, n, pattern)
        for k in modules:
            assert_same(buckets._splitters(k, cupy.asarray(x), descending), x[ref_argsort(x, descending)][::step])
        if np.dtype(dtype) in tuning.EXACT_FLOATS:
            k = build.encoding(np.dtype(dtype), descending)
            assert_same(buckets._splitters(k, cupy.asarray(x), descending),
                        np.sort(order.encode(x, descending, "exact"))[::step])


def forced_buckets(monkeypatch, passes: int | None = None) -> None:
    """Bucket passes at every size, scattering whatever levels they save.

    Split again wherever they scatter (``passes`` 2), never (1), or as the sort decides (``None``).
    """
    monkeypatch.setattr(tuning, "BUCKET_MIN_BYTES", 0)
    monkeypatch.setattr(tuning, "BUCKET_LEVELS_SAVED", 0)
    if passes is not None:
        monkeypatch.setattr(tuning, "SUBBUCKET_MIN_LEVELS", 0 if passes == 2 else 10**6)


@pytest.mark.parametrize("passes", [1, 2], ids=["buckets", "sub-buckets"])
@pytest.mark.parametrize("dtype", ["int32", "int64", "uint16"])
def test_bucket_scatter_groups_stably(dtype, passes, rng, monkeypatch):
    # The scatter alone against NumPy: a key's bucket is how many splitters
    # are <= it, and each bucket keeps its keys in input order.  Split again,
    # a key's sub-bucket is how many of its bucket's own splitters are <= it.
    forced_buckets(monkeypatch, passes)  # the heavy bucket saves few levels
    x = make_keys(rng, dtype, 300_007, "random")
    x[rng.random(x.size) < 0.2] = x[0]  # one heavy bucket
    d = cupy.asarray(x)
    k = build.kernels(x.dtype, 0, False)
    done = buckets.bucket_pass(k, d, False, x.dtype)
    assert done is not None and (done.sub_splitters is not None) == (passes == 2)
    bucket_of = np.searchsorted(cupy.asnumpy(done.splitters), x, side="right")
    count = tuning.BUCKETS ** passes
    if passes == 2:
        sub = cupy.asnumpy(done.sub_splitters)
        assert sub.shape == (tuning.BUCKETS, tuning.BUCKETS - 1) and (np.diff(sub, axis=1) >= 0).all()
        within = np.zeros_like(bucket_of)
        for b in np.unique(bucket_of):
            inside = bucket_of == b
            within[inside] = np.searchsorted(sub[b], x[inside], side="right")
        bucket_of = bucket_of * tuning.BUCKETS + within
    assert_same(done.keys, x[np.argsort(bucket_of, kind="stable")])
    sizes = np.bincount(bucket_of, minlength=count)
    assert_same(done.tiles.offsets, np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))
    # The tile tables and the levels the kernels worked out, against the host's own.
    tiles = -(-sizes // k.nv)
    assert_same(done.tiles.first_tile, np.concatenate([[0], np.cumsum(tiles)]).astype(np.int32))
    assert done.tiles.count == tiles.sum()
    assert_same(done.tiles.tile_bucket[:done.tiles.count], np.repeat(np.arange(count), tiles).astype(np.int32))
    assert done.tiles.levels == tuning.merge_passes(int(sizes.max()), k.nv)


def test_bucket_pass_declines_where_it_saves_too_few_levels(rng, monkeypatch):
    # Keys of three values fill three buckets: the scatter would save no
    # level, so the kernels skip it and the sort goes on without buckets.
    monkeypatch.setattr(tuning, "BUCKET_MIN_BYTES", 0)
    x = rng.integers(0, 3, 300_007).astype(np.int32)
    d = cupy.asarray(x)
    assert buckets.bucket_pass(build.kernels(x.dtype, 0, False), d, False, x.dtype) is None
    check_sort_and_argsort(x, False)


@pytest.mark.parametrize("passes", [1, 2], ids=["buckets", "sub-buckets"])
@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("dtype", KEY_DTYPES, ids=str)
def test_bucket_pass_every_dtype_and_pattern(dtype, descending, passes, rng, monkeypatch):
    # Sorts that begin with a bucket pass, forced even where it saves nothing
    # so that every pattern sorts bucket by bucket: buckets of one partial
    # tile (no merge pass at all), empty buckets, one bucket of every key,
    # and buckets of many tiles merged two and four ways, the last pair or
    # group of each bucket cut short by its end.  Ties keep input order.
    # Sub-buckets likewise: buckets of fewer keys than their sample, empty
    # and single-key buckets split again, a sub-bucket of every key.
    forced_buckets(monkeypatch, passes)
    monkeypatch.setattr(tuning, "FOUR_WAY_MIN_KEYS", 0)
    for n in (4 * tuning.BUCKETS * tuning.BUCKET_SAMPLE + 3, 300_007):
        for pattern in PATTERNS:
            x = make_keys(rng, dtype, n, pattern)
            d, _ = check_sort_and_argsort(x, descending)
            assert_same(d, x)  # input untouched


@pytest.mark.parametrize("dtype", ["int32", "float32", "int64", "float64"])
def test_bucket_pass_large(dtype, rng, monkeypatch):
    # Buckets of evenly spread keys several tiles long, as the sort decides
    # by itself (the scatter saves levels here) once the size threshold lets
    # it try, against NumPy's stable sort.
    monkeypatch.setattr(tuning, "BUCKET_MIN_BYTES", 2**22)
    n = 2**22 + 2**20 + 5
    for pattern in ("random", "special"):
        x = make_keys(rng, dtype, n, pattern)
        d = cupy.asarray(x)
        k = build.kernels(x.dtype, 0, False)
        assert pattern != "random" or buckets.bucket_pass(k, d, False, x.dtype) is not None
        perm = np.argsort(x, kind="stable")
        assert_same(gpu.sort(d), x[perm])
        assert_same(gpu.argsort(d), perm)


@pytest.mark.parametrize("reuse", [False, True], ids=["new", "reused"])
def test_sub_buckets_as_the_sort_decides(reuse):
    # 2**29 evenly spread int64 keys leave buckets of ~356 tiles (nine merge
    # levels): the sort splits them again by itself, writing the second
    # scatter into the input's memory where it may reuse it, and leaves the
    # input alone where not.  CUB's sort is the oracle.
    d = cupy.random.RandomState(3).randint(-(2**31), 2**31 - 1, size=2 * (2**29 + 5), dtype=np.int32).view(np.int64)
    done = buckets.bucket_pass(build.kernels(d.dtype, 0, False), d, False, d.dtype)
    assert done is not None and done.sub_splitters is not None and done.tiles.levels <= 4
    del done
    expected, kept = cupy.sort(d), None if reuse else d.copy()
    got, _ = dispatch.mergesort(d, overwrite_input=reuse)
    assert bool((got == expected).all())
    assert reuse or bool((d == kept).all())


def test_packed_argsort_refuses_too_many_keys():
    class Huge:  # only the size is read before the check
        size = 2**32
        dtype = np.dtype(np.int32)

    with pytest.raises(ValueError, match="32 bits"):
        dispatch.packed_argsort(Huge())


def test_descending_is_numpy_reversed_without_nan(rng):
    x = rng.standard_normal(100_003)
    assert_same(gpu.sort(cupy.asarray(x), descending=True), np.sort(x)[::-1])
    y = np.append(x, [np.nan, 3.0, np.nan])
    got = cupy.asnumpy(gpu.sort(cupy.asarray(y), descending=True))
    assert np.isnan(got[-2:]).all() and (np.diff(got[:-2]) <= 0).all()


@pytest.mark.slow
def test_sort_2_27_int32(rng):
    x = rng.integers(-(2**31), 2**31, 2**27, dtype=np.int32)
    d = cupy.asarray(x)
    np.testing.assert_array_equal(cupy.asnumpy(gpu.sort(d)), np.sort(x))


@pytest.mark.parametrize("value_dtype", ["uint8", "int16", "float32", "int64", "complex128"])
@pytest.mark.parametrize("key_dtype", ["int32", "float64"])
def test_sort_pairs_every_value_width(key_dtype, value_dtype, rng):
    n = 3 * tile(key_dtype) + 11
    x = make_keys(rng, key_dtype, n, "few")  # many ties: stability shows
    values = np.arange(n).astype(value_dtype)
    if value_dtype == "complex128":  # 16 bytes: sorted through positions, then gathered
        values += 1j * (np.arange(n) % 5)
    for descending in (False, True):
        perm = ref_argsort(x, descending)
        k, v = gpu.sort_pairs(cupy.asarray(x), cupy.asarray(values), descending=descending)
        assert_same(k, x[perm])
        assert_same(v, values[perm])


def sorted_run(dtype, n, rng, descending, pattern="random"):
    x = make_keys(rng, dtype, n, pattern)
    return x[ref_argsort(x, descending)]


@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("dtype", ["int8", "uint32", "int64", "float16", "float32", "float64", "bool"])
def test_merge(dtype, descending, rng):
    t = tile(dtype)
    for na, nb in [(0, 0), (0, 5), (7, 0), (1, 3 * t), (3 * t, 1), (t, t), (2 * t + 3, 5 * t - 1), (100_000, 77)]:
        for pattern in ("random", "few", "special"):
            a = sorted_run(dtype, na, rng, descending, pattern)
            b = sorted_run(dtype, nb, rng, descending, pattern)
            both = np.concatenate([a, b])  # stable sort of a ++ b: a's element first on ties
            expected = both[ref_argsort(both, descending)]
            assert_same(gpu.merge(cupy.asarray(a), cupy.asarray(b), descending=descending), expected)


@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("dtype", ["int32", "float64"])
def test_merge_runs(dtype, descending, rng):
    t = tile(dtype)
    lengths = [0, 3 * t + 1, 1, 0, t, 17, 40_000, 2, 0, t - 1, 5]
    runs = [sorted_run(dtype, n, rng, descending, "few") for n in lengths]
    both = np.concatenate(runs)
    perm = ref_argsort(both, descending)
    got = gpu.merge_runs([cupy.asarray(r) for r in runs], descending=descending)
    assert_same(got, both[perm])
    # Pairs: values are global positions, so stability across runs shows exactly.
    pairs = []
    start = 0
    for r in runs:
        pairs.append((cupy.asarray(r), cupy.arange(start, start + r.size, dtype=np.int64)))
        start += r.size
    k, v = gpu.merge_runs(pairs, descending=descending)
    assert_same(k, both[perm])
    assert_same(v, perm.astype(np.int64))
    # Values wider than 8 bytes take the positions-and-gather path.
    wide = [(k_, (v_ * 1j).astype(np.complex128)) for k_, v_ in pairs]
    k, v = gpu.merge_runs(wide, descending=descending)
    assert_same(v, (perm * 1j).astype(np.complex128))


def test_merge_runs_edge_cases(rng):
    empty = cupy.empty(0, np.int16)
    assert gpu.merge_runs([empty, empty]).size == 0
    one = cupy.asarray(np.sort(make_keys(rng, "int16", 1000, "random")))
    before = cupy.asnumpy(one)
    out = gpu.merge_runs([empty, one])
    assert_same(out, before)
    out += 1  # a copy, never the caller's run
    assert_same(one, before)


def test_backend_numpy_and_cupy_in_and_out(rng):
    assert BACKEND.name == "cupy"
    x = make_keys(rng, "float64", 50_001, "special")
    okeys = order.encode(x, False)
    perm = ref_argsort(x, False)
    for wrap in (np.asarray, cupy.asarray):
        keys = wrap(okeys)
        k, v = BACKEND.sort_run(keys)
        assert v is None and type(k) is type(keys)
        assert_same(k, okeys[perm])
        k, v = BACKEND.sort_run(keys, wrap(np.arange(x.size)))
        assert type(v) is type(keys)
        assert_same(v, perm)
        values = wrap(np.arange(x.size, dtype=np.complex64) * 1j)  # 8-byte values
        k, v = BACKEND.sort_run(keys, values)
        assert_same(v, (np.arange(x.size, dtype=np.complex64) * 1j)[perm])


def test_backend_merge_runs_and_searchsorted(rng):
    runs_host = [np.sort(rng.integers(0, 50, n)) for n in (0, 1000, 1, 3000, 0)]
    values_host = [np.arange(r.size) + 10_000 * i for i, r in enumerate(runs_host)]
    both_k = np.concatenate(runs_host)
    both_v = np.concatenate(values_host)
    perm = np.argsort(both_k, kind="stable")
    for wrap in (np.asarray, cupy.asarray):
        k, v = BACKEND.merge_runs([(wrap(a), wrap(b)) for a, b in zip(runs_host, values_host)])
        assert type(k) is type(wrap(both_k))
        assert_same(k, both_k[perm])
        assert_same(v, both_v[perm])
        k, v = BACKEND.merge_runs([(wrap(a), None) for a in runs_host])
        assert v is None
        assert_same(k, both_k[perm])
    hay = np.sort(np.array([1.0, 2.0, 2.0, np.nan, -0.0, 5.0]))
    needles = np.array([2.0, np.nan, 0.0, 9.0, -1.0])
    for side in ("left", "right"):
        expected = np.searchsorted(hay, needles, side=side)
        for wrap in (np.asarray, cupy.asarray):
            got = BACKEND.searchsorted(wrap(hay), wrap(needles), side)
            assert type(got) is type(wrap(hay))
            np.testing.assert_array_equal(cupy.asnumpy(got), expected)


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: gpu.sort(np.arange(3)), TypeError, "cupy.asarray"),
        (lambda: gpu.sort_pairs(cupy.zeros((2, 2)), cupy.zeros(4)), ValueError, "1-D"),
        (lambda: gpu.merge(cupy.zeros(3, np.complex64), cupy.zeros(3, np.complex64)), TypeError, "complex64"),
        (lambda: gpu.sort_pairs(cupy.zeros(3), cupy.zeros(4)), ValueError, "one value per key"),
        (lambda: gpu.merge(cupy.zeros(3), cupy.zeros(3, np.float32)), TypeError, "one dtype"),
        (lambda: gpu.merge_runs([]), ValueError, "at least one"),
        (lambda: gpu.merge_runs([cupy.zeros(1), (cupy.zeros(1), cupy.zeros(1))]), TypeError, "pairs"),
    ],
)
def test_errors_name_the_argument_and_the_fix(call, error, words):
    with pytest.raises(error, match=words):
        call()


@pytest.mark.parametrize("tiles", [1, 2, 3, 4, 5])  # 0, 1, 2, 2 and 3 merge passes: both parities
@pytest.mark.parametrize("values", [False, True], ids=["keys", "pairs"])
def test_mergesort_overwriting_its_input(tiles, values, rng):
    """The out-of-core steps sort staged data in place of a third buffer: same result, two buffers."""
    x = make_keys(rng, "uint64", tiles * tile("uint64") - 7, "few")
    perm = ref_argsort(x)
    keys = cupy.asarray(x)
    vals = cupy.arange(x.size, dtype=np.int64) if values else None
    pool = cupy.cuda.MemoryPool()
    with cupy.cuda.using_allocator(pool.malloc):
        k, v = dispatch.mergesort(keys, vals, overwrite_input=True)
    assert_same(k, x[perm])
    if values:
        assert_same(v, perm.astype(np.int64))
    one_copy = keys.nbytes + (vals.nbytes if values else 0)
    assert pool.total_bytes() <= one_copy + 2**16, (pool.total_bytes(), one_copy)  # plus the partition


@pytest.mark.parametrize("lengths", [[5], [0, 9, 0], [3, 1, 4, 1, 5], [2000, 0, 1, 3000, 7, 7, 1000, 2, 0]])
def test_merge_tree_over_its_own_concatenation(lengths, rng):
    """Runs that are consecutive slices of one buffer merge with that buffer as the second level buffer."""
    runs = [sorted_run("int32", n, rng, False, "few") for n in lengths]
    both = np.concatenate(runs)
    perm = ref_argsort(both)
    keys = cupy.asarray(both)
    values = cupy.arange(both.size, dtype=np.int64)
    starts = np.cumsum([0] + lengths).tolist()
    views = [(keys[a:b], values[a:b]) for a, b in zip(starts[:-1], starts[1:])]
    pool = cupy.cuda.MemoryPool()
    with cupy.cuda.using_allocator(pool.malloc):
        k, v = dispatch.merge_tree(views, scratch=(keys, values))
    assert pool.total_bytes() <= keys.nbytes + values.nbytes + 2**16 * len(lengths)
    assert_same(k, both[perm])
    assert_same(v, perm.astype(np.int64))


INTEGER_DTYPES = [d for d in KEY_DTYPES if d.kind in "iu"]  # bool sorts as uint8


def _parts(x: np.ndarray, rng) -> list:
    """``x`` on the GPU cut into uneven parts: empty ones, single keys, and some a few tiles long."""
    cuts = np.sort(rng.choice(np.arange(1, x.size), size=min(x.size - 1, 9), replace=False))
    cuts = np.concatenate([[0, 0, 1], cuts, [x.size, x.size]])
    return [cupy.asarray(x[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]


@pytest.mark.parametrize("passes", [1, 2], ids=["buckets", "sub-buckets"])
@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("dtype", INTEGER_DTYPES, ids=str)
def test_bucket_pass_reads_parts_where_they_lie(dtype, descending, passes, rng, monkeypatch):
    # A bucket pass over parts scatters exactly what it scatters from their
    # concatenation (each bucket in input order), and a mergesort of the
    # parts sorts them as one array, writing none of them.
    forced_buckets(monkeypatch, passes)
    k = build.kernels(np.dtype(dtype), 0, descending)
    for pattern in ("random", "few", "sorted", "reversed"):
        x = make_keys(rng, dtype, 300_007, pattern)
        parts = _parts(x, rng)
        whole = buckets.bucket_pass(k, cupy.asarray(x), descending, x.dtype)
        pieces = buckets.bucket_pass(k, parts, descending, x.dtype)
        assert (whole is None) == (pieces is None) and whole is not None
        assert_same(pieces.keys, cupy.asnumpy(whole.keys))
        assert_same(pieces.tiles.offsets, cupy.asnumpy(whole.tiles.offsets))
        got, none = dispatch.mergesort(parts, descending=descending)
        assert none is None
        assert_same(got, x[ref_argsort(x, descending)])
        assert_same(cupy.concatenate(parts), x)  # parts untouched


def test_mergesort_of_parts_joins_them_where_no_bucket_pass_runs(rng, monkeypatch):
    # Keys of three values fill three buckets: the scatter would save no
    # level and does not run, so the parts are joined for the blocksort.
    monkeypatch.setattr(tuning, "BUCKET_MIN_BYTES", 0)
    x = rng.integers(0, 3, 300_007).astype(np.int64)
    parts = _parts(x, rng)
    assert buckets.bucket_pass(build.kernels(x.dtype, 0, False), parts, False, x.dtype) is None
    assert_same(dispatch.mergesort(parts)[0], np.sort(x))
    assert_same(dispatch.mergesort(parts[3:4])[0], np.sort(cupy.asnumpy(parts[3])))  # one part
    assert_same(cupy.concatenate(parts), x)
    with pytest.raises(ValueError, match="keys only"):
        dispatch.mergesort(parts, positions=True)


def test_backend_sorts_a_list_of_chunks_as_one_run(rng, monkeypatch):
    # sort_run of GPU parts reads them where they lie (a bucket pass, forced
    # here); of host parts and of float32 (sorted by exact keys) it joins
    # them first.  Either way: one run.
    forced_buckets(monkeypatch)
    x = rng.integers(-(2**20), 2**20, 300_007)
    for parts in (_parts(x, rng), [cupy.asnumpy(p) for p in _parts(x, rng)],
                  [p.astype(np.float32) for p in _parts(x, rng)]):
        keys, values = BACKEND.sort_run(parts)
        assert values is None and type(keys) is type(parts[0])
        np.testing.assert_array_equal(cupy.asnumpy(keys), np.sort(x).astype(parts[0].dtype))


@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("pattern", ["random", "sorted", "reversed", "few"])
def test_a_task_sorts_its_gpu_chunks_where_they_lie(pattern, descending, rng, monkeypatch):
    # tasks.sort_chunks of several GPU chunks of keys alone (empty and
    # one-key chunks among them) gives the order keys of the whole, sorted,
    # through the parts path or its sorted shortcut, and leaves the chunks as
    # they were.
    from gpusort.engine import tasks

    monkeypatch.setattr(tuning, "BUCKET_MIN_BYTES", 0)
    x = make_keys(rng, "int64", 300_007, pattern)
    parts = _parts(x, rng)
    declared = [(i, int(p.size), x.dtype, None) for i, p in enumerate(parts)]
    scheme = order.scheme_for(False, True)
    chunks = [c for p in parts for c in (p, None)]
    okeys, values = tasks.sort_chunks("cupy", descending, scheme, None, declared, *chunks)
    assert values is None and isinstance(okeys, cupy.ndarray)
    assert_same(order.decode(okeys, x.dtype, descending, scheme), x[ref_argsort(x, descending)])
    assert_same(cupy.concatenate(parts), x)


@pytest.mark.parametrize("dtype", ["uint8", "float16", "int32", "float64"])
def test_gather_rows_against_numpy(dtype, rng):
    # Rows of one launch read several arrays, or one array many times, at
    # any stride; rows of no keys write nothing; `at` places each row.
    from gpusort.cuda.launch import gather_rows

    k = build.kernels(np.dtype(f"u{np.dtype(dtype).itemsize}"), 0, False)
    sources = [make_keys(rng, dtype, n, "random") for n in (1, 700, 20_011)]
    on_gpu = [cupy.asarray(s) for s in sources]
    rows = [(2, 5, 7, 2000), (0, 0, 1, 1), (1, 699, 1, 1), (2, 0, 3, 0), (1, 3, 2, 348), (2, 20_010, 1, 1)]
    which, starts, steps, counts = (np.array(c) for c in zip(*rows))
    want = np.concatenate([sources[w][s::t][:c] for w, s, t, c in rows])
    got = gather_rows(k, [on_gpu[w] for w in which], starts, steps, counts, cupy.empty(want.size, dtype))
    assert_same(got, want)
    # The rows back to front, each placed where it was, after five keys left as they are.
    at = np.concatenate(([0], np.cumsum(counts)[:-1])) + 5
    out = cupy.asarray(np.zeros(want.size + 5, dtype))
    gather_rows(k, [on_gpu[w] for w in which[::-1]], starts[::-1], steps[::-1], counts[::-1], out, at=at[::-1])
    assert_same(out, np.concatenate([np.zeros(5, dtype), want]))
    other = np.int16 if np.dtype(dtype).itemsize == 1 else np.int8
    with pytest.raises(ValueError, match="as wide as out"):
        gather_rows(k, [cupy.zeros(3, other)], [0], [1], [3], cupy.empty(3, dtype))
