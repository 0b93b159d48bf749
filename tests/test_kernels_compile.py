"""Every kernel instantiation gpusort.cuda.build can request compiles for sm_90.

Needs nvcc, not a GPU: a template error in kernels/ fails CI on any machine
with the CUDA compiler.  The ptxas resource report (registers, shared memory,
spills) is printed (``pytest -s``) and written to ``ptxas-sm_90.txt`` in the
test's temporary directory; benchmarks/NOTES.md quotes it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from gpusort.cuda import build, tuning

ARCH = 90

pytestmark = pytest.mark.skipif(
    shutil.which("nvcc") is None, reason="nvcc is not on the PATH (the CUDA toolkit compiles these)"
)


def _key_of(expression: str) -> str:
    """The key type an instantiation is for: one translation unit per key type, one for kernels of no key."""
    typed = re.search(r"<(?:\d+, )*(?!\d)([^,>]+)[,>]", expression)  # past NT, VT and the like
    return typed.group(1) if typed else "keyless"


def _compile(unit: str, expressions: list[str], tmp_path, arch: int = ARCH) -> str:
    """nvcc -cubin one translation unit for sm_``arch`` that takes the address of every kernel in it."""
    cu = tmp_path / f"{unit}.cu"
    lines = [f'#include "{build.kernels_dir() / "gpusort.cu"}"', "void* const kernels[] = {"]
    lines += [f"    (void*)&{e}," for e in expressions]
    lines += ["};"]
    cu.write_text("\n".join(lines) + "\n")
    cmd = [
        "nvcc", f"-arch=sm_{arch}", "-std=c++17", "-cubin", "-Xptxas", "-v",
        "-diag-suppress", "177",  # the array above is never read, on purpose
        f"-I{build.kernels_dir()}", "-o", str(cu.with_suffix(".cubin")), str(cu),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stdout}{done.stderr}"
    return done.stdout + done.stderr


def _resources(log: str) -> list[tuple[str, str]]:
    """(mangled kernel name, its ptxas resource lines) for each kernel in a log."""
    out = []
    for block in log.split("Compiling entry function ")[1:]:
        name = block.split("'")[1]
        usage = re.findall(r"(\d+ bytes stack frame.*|Used \d+ registers.*)", block)
        out.append((name, "; ".join(usage)))
    return out


def test_every_instantiation_compiles_for_sm_90(tmp_path):
    names = build.instantiations(ARCH)
    units: dict[str, list[str]] = {}
    for e in names:
        units.setdefault(_key_of(e).replace(" ", "_").replace("gpusort::", ""), []).append(e)
    assert len(units) == len(tuning.KEY_TYPES) + 1  # and the bucket pass's scans

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        logs = list(pool.map(lambda u: _compile(u, units[u], tmp_path), units))

    report = [row for log in logs for row in _resources(log)]
    assert len(report) == len(names)  # ptxas saw every kernel we asked for
    text = "\n".join(f"{name}: {usage}" for name, usage in report)
    (tmp_path / f"ptxas-sm_{ARCH}.txt").write_text(text + "\n")
    print(f"\nptxas -v, sm_{ARCH}, kernels {build.version()}\n{text}")


def test_the_oldest_architecture_compiles_the_fallback_tiles(tmp_path):
    # Devices below sm_90 take _FALLBACK's tiles; sm_75 (Turing) is the oldest
    # CUDA 13 builds for and lacks sm_80's warp reductions.  The float sorts'
    # kernels (exact keys, tie groups) and one integer module of each order.
    names = [e for e in build.instantiations(75)
             if any(f"<{t}" in e or f", {t}" in e for t in ("gpusort::f16", "float", "int,", "unsigned int"))]
    units = {"float16": [e for e in names if "f16" in e], "float32": [e for e in names if "float" in e],
             "int32": [e for e in names if "int" in e and "float" not in e and "f16" not in e]}
    assert all(units.values())
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(lambda u: _compile(u, units[u], tmp_path, arch=75), units))


def test_the_sample_fences_fit_a_launch_without_asking():
    # kernel_sample_splitters keeps every SAMPLE_FENCE-th key of the sample in
    # dynamic shared memory: 48 KB without raising the limit, for 8-byte keys.
    fences = tuning.BUCKETS * tuning.BUCKET_SAMPLE // tuning.SAMPLE_FENCE
    assert fences * 8 <= 48 * 1024
    assert all((nt * vt) % tuning.SAMPLE_FENCE == 0 for nt, vt in [*tuning.TUNING.values(), tuning._FALLBACK])


def test_instantiations_cover_every_key_value_and_order():
    names = build.instantiations(ARCH)
    for key in tuning.KEY_TYPES:
        for value_size in tuning.VALUE_TYPES:
            nt, vt = tuning.launch_box(ARCH, key.itemsize, value_size)
            assert nt & (nt - 1) == 0 and vt % 2 == 1, (key, value_size, nt, vt)
            for descending in tuning.ORDERS:
                expected = build.expressions(nt, vt, key, value_size, descending).values()
                assert set(expected) <= set(names)
    for key in tuning.KEY_TYPES:  # four-way passes: keys-only sorts of the sizes where they pay
        for value_size in tuning.VALUE_TYPES:
            names_of = build.expressions(128, 11, key, value_size, False)
            four = value_size == 0 and key.itemsize in tuning.FOUR_WAY_KEY_SIZES
            assert ("merge_four" in names_of) == ("partition_four" in names_of) == four, (key, value_size)
            # Bucket passes: keys-only sorts of every key type.
            assert ("bucket_count" in names_of) == ("bucket_scatter" in names_of) == (value_size == 0)
    # Packed argsorts: a blocksort per narrow key type and order; the word module stores positions.
    nt, vt = tuning.launch_box(ARCH, tuning.WORD.itemsize)
    packed = [key for key in tuning.KEY_TYPES if tuning.packs(key)]
    assert len(packed) == 8 and not tuning.packs(np.int64) and not tuning.packs(np.float64)
    for key in packed:
        for descending in tuning.ORDERS:
            packing = build.packing_expressions(nt, vt, key, descending)
            assert set(packing.values()) <= set(names) and "bucket_scatter" in packing
    # Float sorts by exact keys: loads and stores of each float and order, around the word's own kernels.
    for key in tuning.EXACT_FLOATS:
        nt_f, vt_f = tuning.launch_box(ARCH, key.itemsize)
        for descending in tuning.ORDERS:
            encoding = build.encoding_expressions(nt_f, vt_f, key, descending)
            assert set(encoding.values()) <= set(names) and "tie_bounds" in encoding
            words_or_floats = ("bucket_bases", "bucket_subtables", "bucket_count", "bucket_scatter",
                               "sample_splitters", "gather_rows", "tie_bounds", "tie_count", "tie_gather")
            assert all(f"exact_keys<{tuning.KEY_TYPES[key]}, {str(descending).lower()}>" in e
                       for kind, e in encoding.items() if kind not in words_or_floats)
            # The scatter moves the floats' bits; the blocksort after it loads them as exact keys.
            assert encoding["bucket_scatter"].endswith("gpusort::as_is>") and "exact_keys" in encoding["bucket_count"]
    assert {"merge_positions", "merge_four_positions"} <= set(build.expressions(nt, vt, tuning.WORD, 0, False))
    assert "merge_positions" not in build.expressions(nt, vt, tuning.WORD, 0, True)
    assert "merge_positions" not in build.expressions(nt, vt, np.int64, 0, False)
    assert tuning.launch_box(ARCH, np.dtype(np.int8).itemsize, 2) == tuning.TUNING[ARCH, 4, 4]
    assert tuning.launch_box(ARCH, 8, 0) == tuning.TUNING[ARCH, 8, 0]
    assert tuning.launch_box(ARCH + 10, 8, 8) == tuning.TUNING[ARCH, 8, 8]  # newer: nearest below
