"""NumPy's fixed-width bytes, str, void and structured keys: exact against NumPy, bit for bit.

Ascending results are checked against ``np.sort``/``np.argsort(kind="stable")``
and ``np.lexsort``; descending ones (largest first, ties in input order,
NaN last in every float field) against :mod:`reference`, which orders the
same keys by their bytes, code points and fields without gpusort's order keys.
"""

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster

import gpusort
from reference import ref_argsort, ref_lexsort

STRUCT = [("f", "<f8"), ("i", "<i8")]
NESTED = [("s", "S3"), ("u", ">U2"), ("a", ">i2", (2,)), ("n", [("c", "<c8"), ("b", "?"), ("h", ">f4")])]
DTYPES = ["S9", "<U9", ">U3", "<U128", "V3", STRUCT, NESTED]
PATTERNS = ["random", "few", "equal", "sorted", "reversed", "empty strings"]
# Chunkings of n keys: one chunk, one-element chunks among empty ones, hundreds of chunks.
CHUNKINGS = {
    "one": lambda n: (n,),
    "tiny": lambda n: (0, 1, 0, 1, 1) + (n - 3,) if n >= 3 else (n,),
    "hundreds": lambda n: (n // 300,) * 299 + (n - 299 * (n // 300),),
}
BYTES = np.frombuffer(b"\x00\x01ab\x7f\x80\xff", np.uint8)  # NUL, the signed-char boundary, the top byte
CODE_POINTS = np.array([0, 0x61, 0x62, 0xE9, 0x3B1, 0x4E2D, 0xFFFF, 0x1F600, 0x10FFFF], np.uint32)
FLOATS = np.array([np.nan, -np.nan, 0.0, -0.0, 1.5, -1.5, np.inf, -np.inf, 2.0**-1074])


def strings(rng: np.random.Generator, dtype, n: int) -> np.ndarray:
    """Random keys of ``dtype``: NUL-padded strings of random lengths from small alphabets, so ties and prefixes abound."""
    dt = np.dtype(dtype)
    if dt.names is not None:
        x = np.zeros(n, dt)
        for name in dt.names:
            sub = dt.fields[name][0]
            x[name] = strings(rng, sub.base, n * max(1, int(np.prod(sub.shape)))).reshape(x[name].shape)
        return x
    if dt.kind in "SV":
        units = BYTES[rng.integers(0, len(BYTES), (n, dt.itemsize))]
    elif dt.kind == "U":
        units = CODE_POINTS[rng.integers(0, 5 if dt.itemsize > 64 else len(CODE_POINTS), (n, dt.itemsize // 4))]
        if dt.itemsize > 64:  # long strings that differ late: the first words tie
            units[:, :100] = 0x78
    elif dt.kind in "fc":
        x = np.zeros(n, dt)
        x.real = rng.choice(FLOATS, n)
        if dt.kind == "c":
            x.imag = rng.choice(FLOATS, n)
        return x
    else:
        return rng.integers(-2, 3, n).astype(dt)
    length = rng.integers(0, units.shape[1] + 1, n)
    if dt.kind != "V":
        units[np.arange(units.shape[1]) >= length[:, None]] = 0  # NUL padding after each string
    return np.ascontiguousarray(units).view(dt.newbyteorder("=")).reshape(n).astype(dt)


def arranged(rng: np.random.Generator, dtype, n: int, pattern: str) -> np.ndarray:
    x = strings(rng, dtype, n)
    if pattern == "few":
        x = rng.choice(x[:3], n)
    elif pattern == "equal":
        x = np.repeat(x[:1], n)
    elif pattern in ("sorted", "reversed"):
        x = np.sort(x, kind="stable")[::1 if pattern == "sorted" else -1].copy()
    elif pattern == "empty strings":
        x[rng.random(n) < 0.7] = np.zeros(1, x.dtype)[0]
    return x


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_sort_and_argsort_match_numpy(dtype, pattern, rng):
    n = 901
    x = arranged(rng, dtype, n, pattern)
    want = np.argsort(x, kind="stable")
    want_desc = ref_argsort(x, descending=True)
    np.testing.assert_array_equal(want, ref_argsort(x))  # the reference agrees with NumPy
    for name, chunking in CHUNKINGS.items():
        d = da.from_array(x, chunks=(chunking(n),))
        s, p, sd, pd_ = dask.compute(gpusort.sort(d), gpusort.argsort(d), gpusort.sort(d, descending=True),
                                     gpusort.argsort(d, descending=True), scheduler="threads")
        assert s.dtype == x.dtype and sd.dtype == x.dtype, name
        np.testing.assert_array_equal(bits(s), bits(x[want]), err_msg=name)
        np.testing.assert_array_equal(p, want, err_msg=name)
        np.testing.assert_array_equal(bits(sd), bits(x[want_desc]), err_msg=name)
        np.testing.assert_array_equal(pd_, want_desc, err_msg=name)


def test_nul_bytes_and_float_fields_compare_as_numpy():
    """Embedded and trailing NULs, and a structured key's NaNs and zeros: NumPy's ties, the input's bits."""
    x = np.array([b"a\x00b", b"a", b"", b"a\x00", b"\x00", b"\xff", b"a\x00\x01"], "S3")
    np.testing.assert_array_equal(gpusort.argsort(da.from_array(x, chunks=2)).compute(), [2, 4, 1, 3, 6, 0, 5])
    s = np.array([(np.nan, 1), (1.0, 2), (-0.0, 3), (0.0, 0), (np.nan, 0), (-np.nan, 5), (-np.inf, 1), (0.0, -1),
                  (-0.0, -1)], STRUCT)
    d = da.from_array(s, chunks=2)
    np.testing.assert_array_equal(gpusort.argsort(d).compute(), [6, 7, 8, 3, 2, 1, 4, 0, 5])
    np.testing.assert_array_equal(bits(gpusort.sort(d).compute()), bits(s[[6, 7, 8, 3, 2, 1, 4, 0, 5]]))
    # Descending: each field largest first, the NaNs still last, -0.0 and 0.0 tied in input order.
    np.testing.assert_array_equal(gpusort.argsort(d, descending=True).compute(), [1, 2, 3, 7, 8, 6, 5, 0, 4])


@pytest.mark.parametrize("dtype", ["S9", "<U9", STRUCT], ids=str)
def test_empty_arrays(dtype):
    for chunks in ((0,), (0, 0, 0)):
        d = da.from_array(np.zeros(0, dtype), chunks=(chunks,))
        assert gpusort.sort(d).compute().dtype == np.dtype(dtype)
        assert gpusort.argsort(d, descending=True).compute().size == 0
        assert gpusort.lexsort([d, d]).compute().size == 0


def test_lexsort_and_sort_by_key_mix_strings_structures_and_numbers(rng):
    n = 2_000
    s = arranged(rng, "S9", n, "few")
    u = arranged(rng, ">U3", n, "empty strings")
    r = arranged(rng, STRUCT, n, "few")
    i = rng.integers(0, 3, n).astype(np.int16)
    ds, du, dr = (da.from_array(a, chunks=97) for a in (s, u, r))
    di = da.from_array(i, chunks=(500, 0, 1500))
    values = da.from_array(np.arange(n, dtype=np.uint32), chunks=97)
    lex, lexd, sk, ((k1, k2), v) = dask.compute(
        gpusort.lexsort([du, dr, ds, di]), gpusort.lexsort([du, dr, ds, di], descending=True),
        gpusort.sort_by_key(ds, values), gpusort.sort_by_key((dr, du), values, descending=True),
        scheduler="threads")
    # Native str keys: NumPy's lexsort misplaces embedded NULs of big-endian ones (its argsort does not).
    np.testing.assert_array_equal(lex, np.lexsort([u.astype("<U3"), r, s, i]))
    np.testing.assert_array_equal(lexd, ref_lexsort([u, r, s, i], descending=True))
    want = np.argsort(s, kind="stable")
    np.testing.assert_array_equal(bits(sk[0]), bits(s[want]))
    np.testing.assert_array_equal(sk[1], want)
    desc = ref_lexsort([u, r], descending=True)  # r primary, then u
    np.testing.assert_array_equal(v, desc)
    np.testing.assert_array_equal(bits(k1), bits(r[desc]))
    np.testing.assert_array_equal(bits(k2), bits(u[desc]))


def test_along_an_axis_and_merge(rng):
    """N-D keys along either axis (chunked along it or not), and a merge of two sorted string arrays."""
    x = arranged(rng, "<U5", 40 * 30, "few").reshape(40, 30)
    d = da.from_array(x, chunks=(7, 11))
    for axis in (0, 1, None):
        want = np.argsort(x, axis=axis, kind="stable")
        got, s = dask.compute(gpusort.argsort(d, axis=axis), gpusort.sort(d, axis=axis), scheduler="threads")
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(bits(s), bits(np.sort(x, axis=axis, kind="stable")))
    a, b = np.sort(arranged(rng, "S9", 500, "few")), np.sort(arranged(rng, "S9", 300, "random"))
    merged = gpusort.merge(da.from_array(a, chunks=37), da.from_array(b, chunks=(0, 1, 299)))
    np.testing.assert_array_equal(bits(merged.compute()), bits(np.sort(np.concatenate([a, b]), kind="stable")))
    with pytest.raises(ValueError, match="not sorted"):
        gpusort.merge(da.from_array(a[::-1], chunks=37), da.from_array(b, chunks=50)).compute()


def test_p2p_exchange_on_worker_processes(rng):
    """Two worker processes: the keys, their composite order keys and the carried keys go through P2P."""
    x = arranged(rng, "<U9", 30_000, "few")
    r = arranged(rng, STRUCT, 30_000, "random")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster):
        dx, dr = da.from_array(x, chunks=3_001), da.from_array(r, chunks=(0, 1) + (2_999,) * 10 + (9,))
        s, p, sr = dask.compute(gpusort.sort(dx), gpusort.argsort(dx, descending=True),
                                gpusort.sort(dr, descending=True, chunks=4_000))
    np.testing.assert_array_equal(bits(s), bits(np.sort(x, kind="stable")))
    np.testing.assert_array_equal(p, ref_argsort(x, descending=True))
    np.testing.assert_array_equal(bits(sr), bits(r[ref_argsort(r, descending=True)]))


@pytest.mark.parametrize("call, match", [
    (lambda: gpusort.sort(np.array(["b", None], object)), r"x has dtype object.*astype\('U'\)"),
    (lambda: gpusort.sort(np.zeros(2, [("a", "i4"), ("o", "O")])), r"x\['o'\] has dtype object"),
    (lambda: gpusort.argsort(np.zeros(2, [("a", "i4"), ("g", [("l", "O")])])), r"x\['g'\]\['l'\] has dtype object"),
    (lambda: gpusort.lexsort([np.zeros(2, np.dtype([])), np.arange(2)]), r"keys has dtype \[\].*no bytes"),
    (lambda: gpusort.sort(np.zeros(2, [("h", "<f2")])), r"x\['h'\] is a float16 field.*NaN first.*float32"),
    (lambda: gpusort.unique(np.array([b"a"])), r"x has dtype \|S1 \(bytes\).*here \(gpusort.sort"),
    (lambda: gpusort.topk(np.zeros(2, STRUCT), 1), r"x has dtype .*\(structured\).*here \(gpusort.sort"),
])
def test_bad_keys_are_named(call, match):
    with pytest.raises(TypeError, match=match):
        call()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["S9", "<U9", STRUCT], ids=str)
def test_host_chunks_sort_on_the_gpu(dtype, rng):
    """``backend="cupy"``: host chunks' composite keys sort on the GPU, the keys carried on the host."""
    x = arranged(rng, dtype, 5_000, "few")
    d = da.from_array(x, chunks=700)
    want = np.argsort(x, kind="stable")
    np.testing.assert_array_equal(bits(gpusort.sort(d, backend="cupy").compute()), bits(x[want]))
    np.testing.assert_array_equal(gpusort.argsort(d, backend="cupy").compute(), want)
    np.testing.assert_array_equal(gpusort.argsort(d, descending=True, backend="cupy").compute(),
                                  ref_argsort(x, descending=True))
    m = x.reshape(50, 100)
    np.testing.assert_array_equal(gpusort.argsort(da.from_array(m, chunks=(20, 30)), axis=0, backend="cupy").compute(),
                                  np.argsort(m, axis=0, kind="stable"))
