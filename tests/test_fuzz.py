"""Hostile input, fuzzed: every call ends in NumPy's result or a clear, named error.

Each argument is drawn either from values the API documents as valid or
from hostile ones, and the hostile draws are tagged with the argument they
went to.  The property: with no hostile argument, the call returns lazily and
computes exactly ``np.sort`` / ``np.argsort(kind="stable")`` (NaN last) in the
input's dtype, along the axis asked for (N-D too) or flattened with
``axis=None``, complex keys included; with any, the *call itself* raises ``TypeError`` or
``ValueError`` whose message names one of the hostile arguments.  Either way
NumPy inputs -- read-only, non-contiguous, Fortran-ordered, big-endian -- are
never modified.  The same for ``sort_zarr`` and paths on disk: no source store
changes, no partial destination or temporary store stays behind.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from reference import (
    COMPLEX_DTYPES, KEY_DTYPES, assert_same_keys, assert_same_keys_along, ref_argsort, ref_argsort_along,
)

import gpusort
from gpusort import runtime

pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")

ERRORS = (TypeError, ValueError)

# Big-endian twins of every multi-byte key dtype: NumPy sorts them by value.
FOREIGN = [np.dtype(d).newbyteorder(">").str for d in KEY_DTYPES + COMPLEX_DTYPES if np.dtype(d).itemsize > 1]


def key_data(draw, dtype: np.dtype, n: int) -> np.ndarray:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(["random", "few", "nan-only", "extremes"]))
    if dtype.kind == "c":  # two float parts: NaN in either, both or none
        parts = [rng.standard_normal(n) * 100, rng.integers(-2, 3, n).astype(np.float64)]
        for part in parts:
            if kind == "nan-only":
                part[rng.random(n) < 0.7] = np.nan
            elif kind == "extremes":
                hit = rng.random(n) < 0.4
                part[hit] = rng.choice([np.nan, -0.0, 0.0, np.inf, -np.inf], int(hit.sum()))
        x = _complex(parts[0], parts[1])
    elif dtype.kind == "b":
        x = rng.integers(0, 2, n).astype(bool)
    elif dtype.kind == "f":
        x = rng.standard_normal(n) * 100
        if kind == "nan-only":
            x[:] = np.nan
        elif kind == "extremes":
            hit = rng.random(n) < 0.5
            x[hit] = rng.choice([np.nan, -0.0, 0.0, np.inf, -np.inf], int(hit.sum()))
    elif dtype.kind in "mM":
        x = rng.integers(-(2**40), 2**40, n)
        if kind in ("nan-only", "extremes"):  # NaT is int64 min
            x[rng.random(n) < (1.0 if kind == "nan-only" else 0.3)] = np.iinfo(np.int64).min
    else:
        info = np.iinfo(dtype.newbyteorder("="))
        x = rng.integers(info.min, info.max, n, endpoint=True, dtype=dtype.newbyteorder("="))
    if kind == "few" and n:
        x = rng.choice(x[:2], n)
    return np.asarray(x).astype(dtype)


def _complex(re: np.ndarray, im: np.ndarray) -> np.ndarray:
    """``re + im*1j`` part by part (arithmetic would turn ``inf * 1j`` or ``nan * 1j`` into NaN real parts)."""
    x = np.empty(len(re), np.complex128)
    x.real, x.imag = re, im
    return x


@st.composite
def numpy_keys(draw, ndim=1):
    dtype = np.dtype(draw(st.sampled_from(KEY_DTYPES + COMPLEX_DTYPES + FOREIGN)))
    shape = tuple(draw(st.lists(st.integers(0, 6 if ndim > 1 else 40), min_size=ndim, max_size=ndim)))
    x = key_data(draw, dtype, int(np.prod(shape))).reshape(shape)
    layout = draw(st.sampled_from(["plain", "read-only", "strided", "fortran"]))
    if layout == "strided":
        x = np.repeat(x, 2, axis=-1)[..., ::2] if ndim else x
    elif layout == "fortran":
        x = np.asfortranarray(x)
    elif layout == "read-only":
        x.setflags(write=False)
    return x


@st.composite
def as_input(draw, x: np.ndarray):
    """``(argument, array)``: ``x`` as the caller may pass it -- NumPy, a list,
    or Dask in any chunks -- and the array NumPy makes of that argument."""
    forms = ["numpy", "dask", "dask"]
    if x.ndim and x.dtype.kind in "biufSU" and x.dtype.isnative and x.dtype.names is None:
        forms.append("list")  # a list of Python scalars: its dtype is NumPy's guess
    form = draw(st.sampled_from(forms))
    if form == "numpy":
        return x, x
    if form == "list":
        return x.tolist(), np.asarray(x.tolist())
    chunks = []
    for size in x.shape:
        cuts = sorted(draw(st.lists(st.integers(0, size), max_size=6)))
        chunks.append(tuple(np.diff([0, *cuts, size]).tolist()))
    return da.from_array(x, chunks=tuple(chunks)), x


ARGS = {
    "sort": ("x", "axis", "descending", "chunks", "backend"),
    "argsort": ("x", "axis", "descending", "chunks", "backend"),
    "sort_by_key": ("keys", "values", "descending", "chunks", "backend"),
}
VALID = {
    "descending": [False, True, np.bool_(True)],
    "chunks": [None, 1, 2, 3, 7, 64, 2**62, 2**100, np.int64(5), np.uint64(2**64 - 1)],
    "backend": [None, "numpy"],
}
HOSTILE = {
    "descending": [0, 1, "yes", None, 1.0, np.int64(1)],
    "chunks": [0, -1, 2.5, "auto", True, (2, 3), float("nan"), np.float64(3.0), [4], np.bool_(True)],
    "backend": ["NumPy", "", 3, ["numpy"], "tpu"] + (["cupy"] if not runtime.gpus()[0] else []),
}


def unknown_chunks(n: int) -> da.Array:
    d = da.arange(n, chunks=2)
    return d[d >= 0]  # boolean indexing: chunk sizes unknown (NaN)


def hostile_keys(draw):
    # Complex, bytes, str and structured keys are valid now (sort, argsort, sort_by_key): not hostile.
    kind = draw(st.sampled_from(["object", "string", "none", "dict", "ragged", "masked",
                                 "dask-masked", "unknown", "int", "structured", "huge-ints", "set"]))
    return {
        "object": lambda: np.array([1, "a", None], dtype=object),
        "string": lambda: np.array(["b", 1], dtype=object),
        "none": lambda: None,
        "dict": lambda: {1: 2},
        "ragged": lambda: [[1, 2], [3]],
        "masked": lambda: np.ma.array([3, 1, 2], mask=[0, 1, 0]),
        "dask-masked": lambda: da.ma.masked_equal(da.arange(6, chunks=2), 3),
        "unknown": lambda: unknown_chunks(10),
        "int": lambda: 5,
        "structured": lambda: np.zeros(3, dtype="i4,O"),  # an object field
        "huge-ints": lambda: [2**70, 1],
        "set": lambda: {3, 1},
    }[kind]()


def hostile_values(draw, n):
    return draw(st.sampled_from([
        np.arange(n + 1), np.ones((n, 2)), np.array([None] * n, dtype=object), None, np.ma.array(np.arange(n)),
        unknown_chunks(n), "values", np.zeros(n, dtype="i4,O"),
    ]))


@st.composite
def calls(draw):
    """(function name, kwargs, hostile argument names, NumPy keys, NumPy values).

    Half the calls are valid throughout; the others get one or two hostile
    arguments, so that each error is seen alone and behind another.
    """
    fn = draw(st.sampled_from(sorted(ARGS)))
    names = ARGS[fn]
    tags = set(draw(st.one_of(st.just(set()), st.sets(st.sampled_from(names), min_size=1, max_size=2))))
    keyname = names[0]
    raw = values = None
    if keyname in tags:
        x = hostile_keys(draw)
    else:
        ndim = 1 if fn == "sort_by_key" else draw(st.sampled_from([1, 1, 1, 0, 2, 3]))
        x, raw = draw(as_input(draw(numpy_keys(ndim))))
    kwargs = {keyname: x}
    if fn != "sort_by_key":
        ndim = 1 if raw is None else raw.ndim
        if "axis" in tags:  # out of range for this ndim (0-D: any int), or not an int
            kwargs["axis"] = draw(st.sampled_from([ndim, -ndim - 1, "0", 1.0, True, [0]]))
        else:
            axes = [a for a in range(-ndim, ndim)]
            kwargs["axis"] = draw(st.sampled_from(
                [None] + [f(a) for a in axes for f in (int, np.int64, np.int32)]))
    for name in ("descending", "chunks", "backend"):
        kwargs[name] = draw(st.sampled_from(HOSTILE[name] if name in tags else VALID[name]))
    if raw is not None and raw.ndim > 1 and "axis" not in tags and kwargs["axis"] is not None \
            and kwargs["chunks"] is not None:
        tags.add("chunks")  # an output chunk length is for 1-D sorts: along an axis the chunks are x's
    if fn == "sort_by_key":
        n = len(raw) if raw is not None else 3
        if "values" in tags:
            kwargs["values"] = hostile_values(draw, n)
        else:
            vdtype = draw(st.sampled_from(["i8", ">u2", "f4", "S5", "<U3", "?", "M8[s]", "i1,>f8"]))
            values = np.zeros(n, vdtype)
            values[values.dtype.names[-1] if values.dtype.names else ...] = np.arange(n) % 100
            kwargs["values"], values = draw(as_input(values))
    event("valid call" if not tags else "hostile: " + ", ".join(sorted(tags)))
    return fn, kwargs, tags, raw, values


def snapshot(obj):
    if isinstance(obj, np.ndarray) and not obj.dtype.hasobject:
        return obj.tobytes(), obj.flags.writeable
    return None


def untouched(obj, snap):
    if snap is None:
        return
    data, writeable = snap
    assert obj.tobytes() == data and obj.flags.writeable == writeable, "an input was modified"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls())
def test_every_call_ends_in_numpys_result_or_a_named_error(case):
    fn, kwargs, tags, raw, values = case
    snaps = {k: snapshot(v) for k, v in kwargs.items()}
    try:
        out = getattr(gpusort, fn)(**kwargs)
    except ERRORS as exc:
        assert tags, f"valid call {fn}({kwargs}) raised {exc!r}"
        named = [t for t in tags if re.search(rf"(?<![\w.]){re.escape(t)}(?![\w])", str(exc))]
        assert named, f"{type(exc).__name__} names none of {sorted(tags)}: {exc}"
        return
    finally:
        for k, v in kwargs.items():
            untouched(v, snaps[k])
    assert not tags, f"hostile {sorted(tags)} accepted by {fn}"
    assert isinstance(out, tuple) == (fn == "sort_by_key")
    got = dask.compute(out, scheduler="sync")[0]
    for k, v in kwargs.items():  # computing leaves the inputs as they were, too
        untouched(v, snaps[k])
    axis = kwargs.get("axis", 0)
    if axis is not None and raw.ndim > 1:  # N-D along an axis: each row against the reference
        axis = int(axis)
        native = raw.astype(raw.dtype.newbyteorder("="))
        want = ref_argsort_along(native, axis, bool(kwargs["descending"]))
        if isinstance(kwargs["x"], da.Array):
            assert out.chunks == kwargs["x"].chunks  # along an axis the output keeps the input's chunks
        if fn == "argsort":
            assert got.dtype == np.int64
            np.testing.assert_array_equal(got, want)
        else:
            assert_same_keys_along(got, np.take_along_axis(raw, want, axis), axis)
        return
    flat = raw.ravel()
    # reference.py reads datetimes through a native int64 view: give it native bytes.
    want = ref_argsort(flat.astype(flat.dtype.newbyteorder("=")), bool(kwargs["descending"]))
    if fn == "argsort":
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)
        return
    if fn == "sort":
        # Like np.sort: -0.0 and 0.0 tie in any order, and NumPy's SIMD float16
        # sort rewrites NaN payloads (to 0x7c01), so compare as keys.
        assert_same_keys(got, flat[want])
        return
    assert got[0].dtype == raw.dtype, (got[0].dtype, raw.dtype)
    # A stable sort moves elements whole: every bit survives (-0.0, NaN payloads).
    np.testing.assert_array_equal(got[0].view(np.uint8), flat[want].view(np.uint8))
    assert got[1].dtype == values.dtype, (got[1].dtype, values.dtype)  # sort_by_key: the rest returned above
    np.testing.assert_array_equal(got[1], values[want])


# ------------------------------------------------------------------ sort_zarr


def tree(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` (or ``path`` itself) with its bytes."""
    if path.is_file():
        return {".": path.read_bytes()}
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def make_source(root: Path, kind: str, rng: np.random.Generator):
    import zarr

    path = root / "src.zarr"
    data = None
    if kind in ("ok", "ok-f8", "ok-v2", "ok-be"):
        dtype = {"ok": "i2", "ok-f8": "f8", "ok-v2": "u4", "ok-be": ">i4"}[kind]
        data = rng.integers(0, 5, int(rng.integers(0, 200))).astype(dtype)
        z = zarr.create_array(str(path), shape=data.shape, chunks=(int(rng.integers(1, 40)),),
                              dtype=data.dtype, zarr_format=2 if kind == "ok-v2" else 3)
        z[:] = data
    elif kind in ("complex", "string", "2-d"):
        dtype, shape = {"complex": ("c16", (10,)), "string": ("U3", (10,)), "2-d": ("i4", (4, 5))}[kind]
        zarr.create_array(str(path), shape=shape, chunks=(3,) * len(shape), dtype=dtype)
    elif kind == "group":
        zarr.open_group(str(path), mode="w").create_array("a", shape=(4,), dtype="i4")
    elif kind == "plain-dir":
        path.mkdir()
        (path / "notes.txt").write_text("not zarr")
    elif kind == "plain-file":
        path.write_bytes(b"\x00" * 16)
    # "missing": nothing there
    return path, data


@st.composite
def zarr_calls(draw):
    src = draw(st.sampled_from(["ok", "ok-f8", "ok-v2", "ok-be", "missing", "complex", "string",
                                "2-d", "group", "plain-dir", "plain-file"]))
    dst = draw(st.sampled_from(["new", "new", "exists", "no-parent", "is-src", "not-a-path"]))
    argsort = draw(st.sampled_from([None, "new", "same-as-dst", "exists"]))
    chunks = draw(st.sampled_from([None, 1, 7, 2**40, 0, "x", 2.0]))
    descending = draw(st.sampled_from([False, True, "yes"]))
    overwrite = draw(st.booleans())
    return src, dst, argsort, chunks, descending, overwrite, draw(st.integers(0, 2**32 - 1))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(zarr_calls())
def test_sort_zarr_hostile_paths_and_options(case):
    import zarr

    src_kind, dst_kind, argsort_kind, chunks, descending, overwrite, seed = case
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        src, data = make_source(root, src_kind, np.random.default_rng(seed))
        dst = {"new": root / "out.zarr", "exists": root / "out.zarr", "no-parent": root / "no" / "out.zarr",
               "is-src": src, "not-a-path": 42}[dst_kind]
        if dst_kind == "exists":
            zarr.create_array(str(dst), shape=(3,), dtype="i1")[:] = [1, 2, 3]
        argsort_dst = {None: None, "new": root / "order.zarr", "same-as-dst": dst,
                       "exists": root / "order.zarr"}[argsort_kind]
        if argsort_kind == "exists":
            (root / "order.zarr").mkdir()
            (root / "order.zarr" / "keep.txt").write_text("mine")
        before = {p.name: tree(p) for p in root.iterdir()}
        try:
            gpusort.sort_zarr(src, dst, chunks=chunks, descending=descending,
                              argsort_dst=argsort_dst, overwrite=overwrite)
        except (TypeError, ValueError, FileNotFoundError, FileExistsError) as exc:
            assert str(exc), "an error without a message"
            after = {p.name: tree(p) for p in root.iterdir()}
            assert after == before, f"a failed sort_zarr changed the directory: {exc!r}"
            return
        # It claimed success: then the request was valid and the output is exact.
        assert data is not None and dst_kind in ("new", "exists") and chunks not in (0, "x", 2.0)
        assert isinstance(descending, bool) and (dst_kind == "new" or overwrite)
        assert argsort_kind != "same-as-dst" and (argsort_kind != "exists" or overwrite)
        assert tree(src) == before["src.zarr"]
        want = ref_argsort(data, descending)
        out = zarr.open_array(str(dst), mode="r")
        assert out.dtype == zarr.open_array(str(src), mode="r").dtype  # Zarr 3 reads big-endian as native
        np.testing.assert_array_equal(out[:], data[want])
        if argsort_dst is not None:
            np.testing.assert_array_equal(zarr.open_array(str(argsort_dst), mode="r")[:], want)
        assert not [p for p in os.listdir(root) if "gpusort-tmp" in p]
