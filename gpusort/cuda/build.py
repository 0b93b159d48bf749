"""gpusort's CUDA sources (``kernels/``) compiled with NVRTC through CuPy, and loaded.

Every kernel is a ``name_expressions`` entry of a :class:`cupy.RawModule`,
compiled once per (device, key type, value width, order), family by family
in threads (:data:`FAMILIES`), and cached by CuPy in memory and on disk;
:func:`kernels`, :func:`packing`, :func:`encoding`, :func:`verify_kernels`
and :func:`beyond_kernel` hand out the loaded kernels.  A source that NVRTC
rejects raises :class:`KernelCompileError` with the cited lines.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpusort.cuda.tuning import (
    BEYOND_NT, BEYOND_VT, BUCKETS, BUCKET_COUNT_VT, BUCKET_VT, EXACT_FLOATS, FOUR_WAY_KEY_SIZES, GATHER_NT, KEY_TYPES,
    ORDERS, PARTITION_LANES, SAMPLE_FENCE, SPLITTERS_NT, TIE_NT, TIE_VT, VALUE_TYPES, VERIFY_NT, WORD,
    exact_word, launch_box, packs,
)


def kernels_dir() -> Path:
    """Where the CUDA sources are: inside an installed wheel, else the repository."""
    package = Path(__file__).resolve().parents[1]
    installed = package / "_kernels"
    return installed if installed.is_dir() else package.parent / "kernels"


@functools.cache
def version() -> str:
    """The kernel sources' version string (``kernels/version.cuh``)."""
    text = (kernels_dir() / "version.cuh").read_text()
    return re.search(r'#define GPUSORT_KERNELS_VERSION "([^"]+)"', text).group(1)


_UNPACK = "gpusort::unpack_positions"


def expressions(nt: int, vt: int, key: np.dtype, value_size: int, descending: bool) -> dict:
    """The ``name_expressions`` of one module: every kernel a sort or merge launches.

    The module of :data:`~gpusort.cuda.tuning.WORD` keys alone, ascending, also has the merges that
    end a packed argsort by storing positions (``*_positions``).
    """
    key = np.dtype(key)
    k, v, o = KEY_TYPES[key], VALUE_TYPES[value_size], ORDERS[descending]
    names = {
        "blocksort": f"gpusort::kernel_blocksort<{nt}, {vt}, {k}, {v}, {o}>",
        "merge": f"gpusort::kernel_merge<{nt}, {vt}, {k}, {v}, {o}>",
        "partition": f"gpusort::kernel_partition<1, {k}, {o}>",
        "partition_group": f"gpusort::kernel_partition<{PARTITION_LANES}, {k}, {o}>",
    }
    four_way = not value_size and key.itemsize in FOUR_WAY_KEY_SIZES
    if not value_size:
        names.update(bucket_expressions(key, key, descending))
    if four_way:
        names["merge_four"] = f"gpusort::kernel_merge_four<{nt}, {vt}, {k}, {o}>"
        names["partition_four"] = f"gpusort::kernel_partition_four<{k}, {o}>"
    if key == WORD and not value_size and not descending:
        names["blocksort_positions"] = f"gpusort::kernel_blocksort<{nt}, {vt}, {k}, {v}, {o}, gpusort::as_is, {_UNPACK}>"
        names["merge_positions"] = f"gpusort::kernel_merge<{nt}, {vt}, {k}, {v}, {o}, {_UNPACK}>"
        if four_way:
            names["merge_four_positions"] = f"gpusort::kernel_merge_four<{nt}, {vt}, {k}, {o}, {_UNPACK}>"
    return names


def packing_expressions(nt: int, vt: int, key: np.dtype, descending: bool) -> dict:
    """The ``name_expressions`` of a packed argsort's blocksorts for ``key`` (:func:`~gpusort.cuda.tuning.packs`): to words, and to positions."""
    w, none, up = KEY_TYPES[WORD], VALUE_TYPES[0], ORDERS[False]
    pack = f"gpusort::pack_positions<{KEY_TYPES[np.dtype(key)]}, {ORDERS[descending]}>"
    return {"blocksort": f"gpusort::kernel_blocksort<{nt}, {vt}, {w}, {none}, {up}, {pack}>",
            "blocksort_positions": f"gpusort::kernel_blocksort<{nt}, {vt}, {w}, {none}, {up}, {pack}, {_UNPACK}>",
            **bucket_expressions(key, WORD, descending, load=pack)}


def encoding_expressions(nt: int, vt: int, key: np.dtype, descending: bool) -> dict:
    """The ``name_expressions`` of a float sort's own kernels for an :data:`~gpusort.cuda.tuning.EXACT_FLOATS` ``key``.

    Its first kernels load floats as exact keys, its last ones store them
    back as floats, the kernels in between are the word's own
    (:func:`~gpusort.cuda.dispatch.exact_sort`).
    """
    key = np.dtype(key)
    w, none, up = KEY_TYPES[exact_word(key)], VALUE_TYPES[0], ORDERS[False]
    exact = f"gpusort::exact_keys<{KEY_TYPES[key]}, {str(bool(descending)).lower()}>"
    return {"blocksort": f"gpusort::kernel_blocksort<{nt}, {vt}, {w}, {none}, {up}, {exact}>",
            "blocksort_bits": f"gpusort::kernel_blocksort<{nt}, {vt}, {w}, {none}, {up}, {exact}, {exact}>",
            "merge_bits": f"gpusort::kernel_merge<{nt}, {vt}, {w}, {none}, {up}, {exact}>",
            "tie_bounds": f"gpusort::kernel_tie_bounds<{KEY_TYPES[key]}, {ORDERS[descending]}>",
            "tie_count": f"gpusort::kernel_tie_count<{TIE_NT}, {TIE_VT}, {KEY_TYPES[key]}>",
            "tie_gather": f"gpusort::kernel_tie_gather<{TIE_NT}, {KEY_TYPES[key]}>",
            **bucket_expressions(key, exact_word(key), descending, load=exact, words=True)}


def bucket_expressions(key: np.dtype, out: np.dtype, descending: bool, load: str = "gpusort::as_is",
                       words: bool = False) -> dict:
    """The ``name_expressions`` of a bucket pass over ``key`` writing ``out`` keys through ``load``.

    Its count compares the keys in their own order, and its splitters come
    from a sample sorted in that order; its gather (``gather_rows``) samples
    ``key`` keys, or a scatter's output of the same width.  With ``words`` the count compares
    the ``out`` words ``load`` makes of the keys, ascending (a float sort's
    exact keys), and the scatter moves the keys' bits as they are: the
    blocksort after it loads them through ``load`` (:func:`~gpusort.cuda.dispatch._sort_words`).
    """
    k, w, o = KEY_TYPES[np.dtype(key)], KEY_TYPES[np.dtype(out)], ORDERS[descending]
    count_vt, scatter_vt = BUCKET_COUNT_VT, BUCKET_VT[np.dtype(out).itemsize]
    compared = f"{w}, {ORDERS[False]}" if words else f"{k}, {o}"  # what the count compares, in its order
    loaded, scattered = (f", {load}", "gpusort::as_is") if words else ("", load)
    bits = KEY_TYPES[np.dtype(f"u{np.dtype(key).itemsize}")]  # the gather moves the keys' bits
    return {"gather_rows": f"gpusort::kernel_gather_rows<{GATHER_NT}, {bits}>",
            "sample_splitters": f"gpusort::kernel_sample_splitters<{SPLITTERS_NT}, {SAMPLE_FENCE}, {compared}>",
            "bucket_count": f"gpusort::kernel_bucket_count<{BUCKETS}, {count_vt}, {compared}{loaded}>",
            "bucket_bases": f"gpusort::kernel_bucket_bases<{BUCKETS}>",
            "bucket_subtables": f"gpusort::kernel_bucket_subtables<{BUCKETS}>",
            "bucket_scatter": f"gpusort::kernel_bucket_scatter<{BUCKETS}, {scatter_vt}, {w}, {scattered}>"}


def instantiations(arch: int) -> list[str]:
    """Every kernel instantiation this module can request on ``arch``."""
    names: dict[str, None] = {}  # ordered, without repeats
    for key in KEY_TYPES:
        for value_size in VALUE_TYPES:
            nt, vt = launch_box(arch, key.itemsize, value_size)
            for descending in ORDERS:
                names.update(dict.fromkeys(expressions(nt, vt, key, value_size, descending).values()))
    nt, vt = launch_box(arch, WORD.itemsize)
    for key in filter(packs, KEY_TYPES):
        for descending in ORDERS:
            names.update(dict.fromkeys(packing_expressions(nt, vt, key, descending).values()))
    for key in EXACT_FLOATS:
        nt, vt = launch_box(arch, key.itemsize)
        for descending in ORDERS:
            names.update(dict.fromkeys(encoding_expressions(nt, vt, key, descending).values()))
    for key in KEY_TYPES:
        names.update(dict.fromkeys(verify_expressions(key).values()))
    for key in BEYOND_KEYS:
        names[beyond_expression(key)] = None
    return list(names)


@functools.cache
def source(unit: str = "gpusort.cu") -> str:
    """What NVRTC compiles: the version and a digest of every source file, then the translation unit.

    CuPy's cache key covers this text but not the headers it includes; the
    digest makes any edit under kernels/ a new key.  ``unit`` is
    ``gpusort.cu`` (the sort's kernels), ``verify.cu`` (verification's),
    ``beyond.cu`` (top-k's fused pass), or ``float_keys.cuh``, the preamble
    of :func:`fused_kernel`.
    """
    digest = hashlib.sha256()
    for path in sorted(kernels_dir().glob("*.cu*")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return (
        f"// gpusort kernels {version()}, sources sha256 {digest.hexdigest()[:16]}\n"
        f'#include "{unit}"\n'
    )


def options() -> tuple[str, ...]:
    return ("-std=c++17", f"--include-path={kernels_dir()}")


class KernelCompileError(RuntimeError):
    """NVRTC rejected the kernels; the message has the options and the numbered source."""


def _explain(exc: Exception, opts: tuple[str, ...], unit: str) -> str:
    """The NVRTC log with the options, the numbered source and each cited line in context."""
    log = str(exc)
    parts = [f"NVRTC could not compile gpusort's kernels\noptions: {' '.join(opts)}\n{log}"]
    parts.append("source:\n" + _numbered(source(unit).splitlines(), 1, 10**9))
    for name, line in dict.fromkeys(re.findall(r"([\w.]+\.cuh?)\((\d+)\)", log)):
        path = kernels_dir() / Path(name).name
        if path.is_file():
            lines = path.read_text().splitlines()
            lo = max(1, int(line) - 3)
            parts.append(f"{path}:\n" + _numbered(lines[lo - 1 : int(line) + 3], lo, int(line)))
    return "\n\n".join(parts)


def _numbered(lines: list[str], first: int, mark: int) -> str:
    return "\n".join(
        f"{'>' if n == mark else ' '}{n:5d}  {text}" for n, text in enumerate(lines, start=first)
    )


@dataclass(frozen=True)
class _Launch:
    """Threads per CTA and keys per thread of a module's kernels."""

    nt: int
    vt: int

    @property
    def nv(self) -> int:
        """Keys per tile."""
        return self.nt * self.vt


@dataclass(frozen=True)
class Kernels(_Launch):
    """The kernels of one (device, key type, value width, order), compiled and loaded."""

    blocksort: Any
    merge: Any
    partition: Any
    partition_group: Any
    merge_four: Any = None  # keys-only modules of FOUR_WAY_KEY_SIZES have four-way passes
    partition_four: Any = None
    sample_splitters: Any = None  # keys-only modules: the bucket pass
    gather_rows: Any = None
    bucket_count: Any = None
    bucket_bases: Any = None
    bucket_subtables: Any = None
    bucket_scatter: Any = None
    blocksort_positions: Any = None  # the WORD module: last passes of a packed argsort
    merge_positions: Any = None
    merge_four_positions: Any = None


@dataclass(frozen=True)
class Packing(_Launch):
    """A packed argsort's first kernels for one (device, key type, order): keys in, words (or positions) out."""

    blocksort: Any
    blocksort_positions: Any
    gather_rows: Any
    sample_splitters: Any
    bucket_count: Any
    bucket_bases: Any
    bucket_subtables: Any
    bucket_scatter: Any

    #: The scatter packs the words, which the blocksort after it sorts.
    scatters_words = True


@dataclass(frozen=True)
class Encoding(_Launch):
    """A float sort's first and last kernels for one (device, :data:`~gpusort.cuda.tuning.EXACT_FLOATS` key, order): floats in, floats out."""

    blocksort: Any
    blocksort_bits: Any
    merge_bits: Any
    tie_bounds: Any
    tie_count: Any
    tie_gather: Any
    gather_rows: Any
    sample_splitters: Any
    bucket_count: Any
    bucket_bases: Any
    bucket_subtables: Any
    bucket_scatter: Any

    #: The scatter moves the floats' bits as they are, and the blocksort after it
    #: loads them as exact keys: converting them in the scatter would cost it
    #: a large part of its time.
    scatters_words = False


def _arch(device: int) -> int:
    import cupy

    with cupy.cuda.Device(device) as dev:
        return int(dev.compute_capability)


#: Kernels compiled together, as one NVRTC program: a module's families
#: compile at once, in threads (NVRTC releases the GIL), so a first call waits
#: for its slowest family, not for the sum of them.
FAMILIES = {
    "blocksort": "sort", "blocksort_positions": "sort", "blocksort_bits": "sort",
    "merge": "merge", "partition": "merge", "partition_group": "merge", "merge_positions": "merge",
    "merge_bits": "merge",
    "merge_four": "four", "partition_four": "four", "merge_four_positions": "four",
    "gather_rows": "buckets", "sample_splitters": "buckets", "bucket_count": "buckets", "bucket_bases": "buckets",
    "bucket_subtables": "buckets", "bucket_scatter": "buckets",
    "tie_bounds": "ties", "tie_count": "ties", "tie_gather": "ties",
}


def _compile(device: int, names: dict, unit: str = "gpusort.cu") -> dict:
    """``names`` (kind -> name expression) compiled, family by family at once, and loaded on ``device``."""
    families: dict[str, dict] = {}
    for kind, name in names.items():
        families.setdefault(FAMILIES.get(kind, kind), {})[kind] = name
    if len(families) == 1:
        return _compile_one(device, names, unit)
    with ThreadPoolExecutor(len(families), thread_name_prefix="gpusort-nvrtc") as pool:
        compiled = list(pool.map(lambda family: _compile_one(device, family, unit), families.values()))
    return {kind: kernel for family in compiled for kind, kernel in family.items()}


def _compile_one(device: int, names: dict, unit: str) -> dict:
    """``names`` compiled into one module (or read from CuPy's cache) and loaded on ``device``."""
    import cupy

    opts = options()
    module = cupy.RawModule(code=source(unit), options=opts, name_expressions=list(names.values()))
    try:
        with cupy.cuda.Device(device):
            return {kind: module.get_function(name) for kind, name in names.items()}
    except cupy.cuda.compiler.CompileException as exc:
        raise KernelCompileError(_explain(exc, opts, unit)) from None


def _once(build: Callable) -> Callable:
    """``build`` memoized by its arguments, each computed once even when threads ask at once.

    ``functools.cache`` lets every thread that misses compute the value:
    a worker's threads all starting a sort would compile the same module
    side by side, each slower for the others.  Here the first thread builds
    it and the others wait for it.
    """
    done: dict[tuple, Future] = {}
    lock = threading.Lock()

    @functools.wraps(build)
    def get(*args):
        with lock:
            future = done.get(args)
            mine = future is None
            if mine:
                future = done[args] = Future()
        if mine:
            try:
                future.set_result(build(*args))
            except BaseException as exc:
                with lock:
                    del done[args]  # a failed build is tried again by the next caller
                future.set_exception(exc)
        return future.result()

    return get


@_once
def _load(device: int, key: np.dtype, value_size: int, descending: bool) -> Kernels:
    nt, vt = launch_box(_arch(device), key.itemsize, value_size)
    return Kernels(nt, vt, **_compile(device, expressions(nt, vt, key, value_size, descending)))


@_once
def _load_packing(device: int, key: np.dtype, descending: bool) -> Packing:
    nt, vt = launch_box(_arch(device), WORD.itemsize)
    return Packing(nt, vt, **_compile(device, packing_expressions(nt, vt, key, descending)))


@_once
def _load_encoding(device: int, key: np.dtype, descending: bool) -> Encoding:
    nt, vt = launch_box(_arch(device), key.itemsize)
    return Encoding(nt, vt, **_compile(device, encoding_expressions(nt, vt, key, descending)))


def verify_expressions(key: np.dtype) -> dict:
    """The ``name_expressions`` of verification's module for ``key``: one kernel per direction."""
    k = KEY_TYPES[np.dtype(key)]
    return {descending: f"gpusort::kernel_verify<{VERIFY_NT}, {k}, {ORDERS[descending]}>" for descending in ORDERS}


@_once
def verify_kernels(device: int, key: np.dtype) -> dict:
    return _compile_one(device, verify_expressions(key), "verify.cu")


#: The keys of top-k's fused pass: integers, which are their own order keys, and
#: the unsigned bits of floats, which it encodes (bool goes as uint8).
BEYOND_KEYS = tuple(key for key in KEY_TYPES if key.kind in "iu")


def beyond_expression(key: np.dtype) -> str:
    """The ``name_expression`` of top-k's fused pass over integer keys ``key`` (kernels/kernel_beyond.cuh)."""
    return f"gpusort::kernel_beyond<{BEYOND_NT}, {BEYOND_VT}, {KEY_TYPES[np.dtype(key)]}>"


@_once
def beyond_kernel(device: int, key: np.dtype) -> Any:
    """Top-k's fused pass for integer ``key`` on ``device``, compiled on first use (a unit of its own)."""
    return _compile_one(device, {"beyond": beyond_expression(key)}, "beyond.cu")["beyond"]


def fused_kernel(in_params: str, out_params: str, operation: str, name: str) -> Any:
    """A CuPy elementwise kernel whose ``operation`` calls kernels/float_keys.cuh's device functions.

    The header comes in as the preamble, under :func:`source`'s digest, so
    that CuPy's cache misses when the header changes.
    """
    import cupy

    return cupy.ElementwiseKernel(in_params, out_params, operation, name, preamble=source("float_keys.cuh"),
                                  options=(f"--include-path={kernels_dir()}",))


def precompile(threads: int | None = None, device: int | None = None) -> int:
    """Compile every kernel module for ``device`` (default: the current one), in parallel, into CuPy's on-disk cache.

    A process that finds a module in the cache loads it in milliseconds;
    one that does not compiles it when a call first needs it (a second or
    two a module).  Run this once on a new machine -- ``gpusort compile``
    does -- to pay every compile at once, on every core.  Returns the number
    of modules.

    Examples
    --------
    >>> gpusort.cuda.build.precompile() > 100  # doctest: +SKIP
    True
    """
    import cupy

    device = cupy.cuda.Device().id if device is None else device
    jobs: list[tuple[Callable, tuple]] = [(_load, (device, key, vs, d)) for key in KEY_TYPES
                                          for vs in VALUE_TYPES for d in ORDERS]
    jobs += [(_load_packing, (device, key, d)) for key in filter(packs, KEY_TYPES) for d in ORDERS]
    jobs += [(_load_encoding, (device, key, d)) for key in EXACT_FLOATS for d in ORDERS]
    jobs += [(verify_kernels, (device, key)) for key in KEY_TYPES]
    jobs += [(beyond_kernel, (device, key)) for key in BEYOND_KEYS]
    with ThreadPoolExecutor(threads or os.cpu_count() or 1, thread_name_prefix="gpusort-precompile") as pool:
        for future in [pool.submit(load, *args) for load, args in jobs]:
            future.result()
    return len(jobs)


@functools.cache
def sm_count(device: int) -> int:
    """Streaming multiprocessors of CUDA device ``device``."""
    import cupy

    return cupy.cuda.runtime.deviceGetAttribute(cupy.cuda.runtime.cudaDevAttrMultiProcessorCount, device)


def kernels(key: np.dtype, value_size: int, descending: bool) -> Kernels:
    """The kernels for the current device, compiled on first use."""
    import cupy

    return _load(cupy.cuda.Device().id, np.dtype(key), value_size, bool(descending))


def packing(key: np.dtype, descending: bool) -> Packing:
    """The packed argsort's blocksorts of ``key`` for the current device, compiled on first use."""
    import cupy

    return _load_packing(cupy.cuda.Device().id, np.dtype(key), bool(descending))


def encoding(key: np.dtype, descending: bool) -> Encoding:
    """A float sort's first and last kernels for ``key`` on the current device, compiled on first use."""
    import cupy

    return _load_encoding(cupy.cuda.Device().id, np.dtype(key), bool(descending))
