"""The gpusort command line: parsing, help, exit codes and messages."""

from __future__ import annotations

import importlib.util
import shlex
import subprocess
import sys

import numpy as np
import pytest
import zarr

from gpusort.cli import EXAMPLES, build_parser, main


@pytest.fixture
def keys(tmp_path, monkeypatch):
    """A small Zarr array of keys in the working directory: keys.zarr."""
    monkeypatch.chdir(tmp_path)
    x = np.random.default_rng(0).integers(-(2**40), 2**40, 10_000)
    zarr.create_array("keys.zarr", data=x, chunks=(1_000,))
    return x


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_parsing_sizes_counts_and_defaults():
    args = build_parser().parse_args(["sort", "a.zarr", "b.zarr", "--chunks", "1_048_576",
                                      "--gpu-memory-budget", "4GiB", "--descending"])
    assert (args.src, args.dst, args.chunks, args.gpu_memory_budget) == ("a.zarr", "b.zarr", 2**20, 4 * 2**30)
    assert args.descending and not args.overwrite and args.cluster == "auto" and args.backend is None
    assert build_parser().parse_args(["sort", "a", "b", "--gpu-memory-budget", "512MB"]).gpu_memory_budget == 512e6
    args = build_parser().parse_args(["bench", "e2e", "--n", "100", "--out", "x"])
    assert (args.name, args.args) == ("e2e", ["--n", "100", "--out", "x"])


@pytest.mark.parametrize("argv, message", [
    (["sort", "a", "b", "--gpu-memory-budget", "4XB"], "'4XB' is not a size; write e.g. 8GiB"),
    (["sort", "a", "b", "--gpu-memory-budget", "0"], "the size must be positive"),
    (["sort", "a", "b", "--chunks", "0"], "--chunks: '0': must be at least 1"),
    (["sort", "a", "b", "--chunks", "many"], "'many' is not a whole number"),
    (["sort", "a", "b", "--backend", "tpu"], "invalid choice: 'tpu'"),
    (["sort", "a"], "the following arguments are required: DST"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_bad_options_exit_2_with_a_message(capsys, argv, message):
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("command", [[], ["sort"], ["verify"], ["bench"], ["info"]])
def test_help_shows_a_runnable_example(capsys, command):
    with pytest.raises(SystemExit) as exit:
        main([*command, "--help"])
    out = capsys.readouterr().out
    assert exit.value.code == 0 and "example" in out and "gpusort " + (command or ["sort"])[0] in out


def test_the_help_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    make_keys, sort, verify = EXAMPLES["gpusort"].splitlines()[1:4]
    subprocess.run(shlex.split(make_keys), check=True)
    assert main(shlex.split(sort)[1:] + ["--cluster", "threads", "--quiet"]) == 0
    assert main(shlex.split(verify)[1:] + ["--cluster", "threads", "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("OK: dst is src sorted (4194304 elements")


def test_sort_then_verify(keys, capsys):
    code, out, _ = run(capsys, "sort", "keys.zarr", "sorted.zarr", "--argsort-dst", "order.zarr",
                         "--chunks", "3000", "--descending", "--cluster", "threads", "--backend", "numpy")
    assert code == 0 and "sorted 10000 int64 keys (numpy backend) from keys.zarr into sorted.zarr" in out
    order = np.argsort(-keys, kind="stable")
    np.testing.assert_array_equal(zarr.open_array("sorted.zarr")[:], keys[order])
    np.testing.assert_array_equal(zarr.open_array("order.zarr")[:], order)
    assert zarr.open_array("sorted.zarr").chunks == (3000,)
    code, out, _ = run(capsys, "verify", "keys.zarr", "sorted.zarr", "--descending", "--cluster", "threads")
    assert code == 0 and out.startswith("OK: dst is src sorted (10000 elements")
    code, out, _ = run(capsys, "verify", "keys.zarr", "sorted.zarr", "--cluster", "threads", "--quiet")
    assert code == 1 and "dst is not sorted ascending: dst[0] = " in out


def test_sort_on_a_local_cluster_prints_the_dashboard(keys, capsys):
    code, out, err = run(capsys, "sort", "keys.zarr", "sorted.zarr", "--cluster", "local")
    assert code == 0 and "dask dashboard: http" in err and "Mkeys/s" in out
    np.testing.assert_array_equal(zarr.open_array("sorted.zarr")[:], np.sort(keys))


@pytest.mark.parametrize("argv, message", [
    (["sort", "missing.zarr", "out.zarr"], "src: missing.zarr does not exist"),
    (["sort", "keys.zarr", "keys.zarr"], "dst is src"),
    (["sort", "keys.zarr", "out.zarr", "--argsort-dst", "out.zarr"], "argsort_dst and dst are the same path"),
    (["sort", "complex.zarr", "out.zarr"], "src has dtype complex128 (complex), which gpusort cannot sort"),
    (["sort", "keys.zarr", "exists.zarr"], "exists; pass overwrite=True (gpusort sort --overwrite)"),
    (["sort", "keys.zarr", "out.zarr", "--cluster", "threads", "--gpu-memory-budget", "1GiB"],
     "gpu_memory_budget applies to backend='cupy' only"),
    (["verify", "keys.zarr", "missing.zarr"], "dst: missing.zarr does not exist"),
    (["verify", "keys.zarr", "float.zarr"], "dst has dtype float64 but src has dtype int64"),
    (["verify", "complex.zarr", "complex.zarr"], "src has dtype complex128 (complex), which gpusort cannot sort"),
    (["bench", "nonesuch"], "no benchmark 'nonesuch'; choose one of: "),
])
def test_user_errors_exit_2_without_a_traceback(keys, capsys, argv, message):
    zarr.create_array("complex.zarr", shape=(3,), dtype="c16")
    zarr.create_array("exists.zarr", shape=(3,), dtype="i8")
    zarr.create_array("float.zarr", shape=(3,), dtype="f8")
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err and "Traceback" not in err
    assert err.startswith(f"gpusort {argv[0]}: error: ")


@pytest.mark.skipif(importlib.util.find_spec("dask_cuda") is not None, reason="dask-cuda is installed here")
def test_cuda_cluster_needs_dask_cuda(keys, capsys):
    code, _, err = run(capsys, "sort", "keys.zarr", "out.zarr", "--cluster", "cuda")
    assert code == 2 and "--cluster cuda needs dask-cuda: pip install" in err


def test_info(capsys):
    code, out, _ = run(capsys, "info")
    assert code == 0
    for word in ("gpusort", "dask", "distributed", "zarr", "numpy", "cupy", "gpus", "backend"):
        assert any(line.startswith(word) for line in out.splitlines()), word


def test_bench_list(capsys):
    code, out, _ = run(capsys, "bench", "list")
    names = [line.split()[0] for line in out.splitlines()]
    assert code == 0 and {"e2e", "skew", "splitters", "plot"} <= set(names)


def test_bench_runs_the_file_with_its_arguments(capfd):
    pytest.importorskip("matplotlib")  # plot.py needs it; it is in the bench extra, not the test one
    assert main(["bench", "plot", "--help"]) == 0
    assert "Plot benchmark results" in capfd.readouterr().out


def test_console_script_entry_point():
    out = subprocess.run([sys.executable, "-c", "import sys; from gpusort.cli import main; sys.exit(main())",
                          "--version"], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.startswith("gpusort ")
