"""The gpusort command line: parsing, help, exit codes and messages."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

from gpusort import runtime
from gpusort.cli import EXAMPLES, build_parser, main

ROOT = Path(__file__).resolve().parent.parent


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
    args = build_parser().parse_args(["sort", "a.zarr", "b.zarr", "--chunk-size", "1_048_576",
                                      "--gpu-memory-budget", "4GiB", "--descending"])
    assert (args.src, args.dst, args.chunk_size, args.gpu_memory_budget) == ("a.zarr", "b.zarr", 2**20, 4 * 2**30)
    assert args.descending and not args.overwrite and args.cluster == "auto" and args.backend is None
    assert build_parser().parse_args(["sort", "a", "b", "--gpu-memory-budget", "512MB"]).gpu_memory_budget == 512e6
    args = build_parser().parse_args(["bench", "e2e", "--n", "100", "--out", "x"])
    assert (args.name, args.args) == ("e2e", ["--n", "100", "--out", "x"])


@pytest.mark.parametrize("argv, message", [
    (["sort", "a", "b", "--gpu-memory-budget", "4XB"], "'4XB' is not a size; write e.g. 8GiB"),
    (["sort", "a", "b", "--gpu-memory-budget", "0"], "the size must be positive"),
    (["sort", "a", "b", "--chunk-size", "0"], "--chunk-size: '0': must be at least 1"),
    (["sort", "a", "b", "--chunk-size", "many"], "'many' is not a whole number"),
    # What --chunk-size is now was --chunks, which counts chunks everywhere else.
    (["sort", "a", "b", "--chunks", "1000"], "argument --chunks: the output chunk length is --chunk-size N"),
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
    out, err = capsys.readouterr()
    assert "OK: dst is src sorted (4194304 elements" in out and "Completed" not in err


def test_sort_then_verify(keys, capsys):
    code, out, _ = run(capsys, "sort", "keys.zarr", "sorted.zarr", "--argsort-dst", "order.zarr",
                         "--chunk-size", "3000", "--descending", "--cluster", "threads", "--backend", "numpy")
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


def test_sort_and_verify_on_a_local_cluster_log_nothing(keys, tmp_path):
    """Dask logs no WARNING or ERROR line for a sort and its check that succeed: P2P's start and end, say."""
    local = ["--cluster", "local", "--workers", "2", "--threads", "1", "--quiet"]
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    for argv in (["sort", "keys.zarr", "sorted.zarr"], ["verify", "keys.zarr", "sorted.zarr"]):
        done = subprocess.run([sys.executable, "-m", "gpusort", *argv, *local], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=300)
        assert done.returncode == 0 and not re.search(r" - (WARNING|ERROR) - ", done.stderr), done.stderr


@pytest.mark.parametrize("argv, message", [
    (["sort", "missing.zarr", "out.zarr"], "src: missing.zarr does not exist"),
    (["sort", "keys.zarr", "keys.zarr"], "dst is src"),
    (["sort", "keys.zarr", "out.zarr", "--argsort-dst", "out.zarr"], "--argsort-dst and dst are the same path"),
    (["sort", "complex.zarr", "out.zarr"], "src has dtype complex128 (complex), which gpusort cannot sort"),
    (["sort", "keys.zarr", "exists.zarr"], "exists; pass --overwrite to replace it"),
    (["sort", "keys.zarr", "out.zarr", "--cluster", "threads", "--gpu-memory-budget", "1GiB"],
     "--gpu-memory-budget applies to --backend cupy only"),
    (["sort", "keys.zarr", "out.zarr", "--cluster", "lcoal"],
     "--cluster lcoal is not known; choose one of auto, threads, local, cuda, process, or a scheduler address"),
    (["verify", "keys.zarr", "keys.zarr", "--cluster", "cuda-local"], "--cluster cuda-local is not known"),
    (["sort", "keys.zarr", "out.zarr", "--cluster", "threads", "--workers", "2"],
     "--workers 2 applies only to --cluster local or --cluster cuda, not to --cluster threads"),
    (["sort", "keys.zarr", "out.zarr", "--cluster", "tcp://127.0.0.1:1"], "--cluster tcp://127.0.0.1:1: no Dask scheduler"),
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
    assert err.startswith(f"gpusort {argv[0]}: error: ") and err.count("\n") == 1
    assert not Path("out.zarr").exists()


@pytest.mark.skipif(runtime.cuda_cluster_missing() is None, reason="a CUDA cluster can start here")
def test_cuda_cluster_says_what_is_missing(keys, capsys):
    code, _, err = run(capsys, "sort", "keys.zarr", "out.zarr", "--cluster", "cuda")
    assert code == 2 and "--cluster cuda cannot start here: " in err and "pip install" in err
    assert "; or use --cluster local" in err and err.count("\n") == 1


@pytest.mark.skipif(bool(runtime.gpus()[0]), reason="CuPy sees a GPU here: these are no setup errors")
def test_gpu_setup_errors_are_one_line_and_exit_2(keys, capsys, monkeypatch):
    """A GPU asked for where CuPy (or a GPU, or dask-cuda) is missing: one line with the fix, exit status 2."""
    for argv, message in [
        (["verify", "keys.zarr", "keys.zarr", "--device", "gpu", "--cluster", "threads"],
         "--device gpu needs CuPy and a CUDA GPU, and here "),
        (["verify", "keys.zarr", "keys.zarr", "--device", "gpu", "--cluster", "local"],
         "--device gpu needs CuPy and a CUDA GPU, and here "),
        (["sort", "keys.zarr", "out.zarr", "--backend", "cupy", "--cluster", "threads"],
         "--backend cupy needs CuPy and a CUDA GPU, and here "),
        (["sort", "keys.zarr", "out.zarr", "--cluster", "cuda"], "--cluster cuda cannot start here: "),
    ]:
        code, out, err = run(capsys, *argv)
        assert (code, out) == (2, ""), (argv, code, out)
        assert err.startswith(f"gpusort {argv[0]}: error: {message}") and err.count("\n") == 1, (argv, err)
        assert "pip install 'gpusort[cuda12]' (or [cuda13])" in err or "CUDA device" in err, (argv, err)

    def missing_on_a_worker(*args, **kwargs):  # as a running cluster's worker without CuPy reports it
        raise ModuleNotFoundError("No module named 'cupy'", name="cupy")

    monkeypatch.setattr("gpusort.verification.verify", missing_on_a_worker)
    code, out, err = run(capsys, "verify", "keys.zarr", "keys.zarr", "--cluster", "threads")
    assert (code, out) == (2, "")
    assert err == ("gpusort verify: error: cannot import cupy where this ran (No module named 'cupy'): "
                   f"{runtime._INSTALL_GPU}\n")


@pytest.mark.parametrize("argv, near", [
    (["sort", "a", "b", "--chunk", "1000"], "--chunk-size"),
    (["sort", "a", "b", "--desc"], "--descending"),
    (["sort", "a", "b", "--worker", "2"], "--workers"),  # one of gpusort.runtime's options
    (["sort", "a", "b", "--gpu-memory", "1GiB"], "--gpu-memory-budget"),
    (["verify", "a", "b", "--dev", "cpu"], "--device"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_a_mistyped_option_gets_its_commands_usage_and_the_nearest_option(capsys, argv, near):
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args(argv)
    out, err = capsys.readouterr()
    usage, *_, message = err.splitlines()
    assert exit.value.code == 2 and out == "" and usage.startswith(f"usage: gpusort {argv[0]} ")
    assert message == f"gpusort {argv[0]}: error: unrecognized arguments: {' '.join(argv[3:])}; did you mean {near}?"


def test_an_abbreviated_top_level_option_is_refused(capsys):
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args(["--vers"])  # --version
    assert exit.value.code == 2 and "gpusort: error: " in capsys.readouterr().err


def test_an_unknown_option_far_from_any_gets_no_suggestion(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["sort", "a", "b", "--frobnicate"])
    assert capsys.readouterr().err.splitlines()[-1] == "gpusort sort: error: unrecognized arguments: --frobnicate"


@pytest.mark.parametrize("argv", [
    ["info"], ["bench", "list"],
    ["sort", "keys.zarr", "sorted.zarr", "--cluster", "threads", "--quiet"],
    ["verify", "keys.zarr", "keys.zarr", "--cluster", "threads", "--quiet"],
], ids=" ".join)
def test_a_reader_that_stops_reading_ends_it_quietly(keys, argv):
    """`gpusort info | head -1`: a broken pipe ends the command without a word, status 0 or 141 (SIGPIPE's)."""
    proc = subprocess.Popen([sys.executable, "-m", "gpusort", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=os.environ | {"PYTHONPATH": str(ROOT)})
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) in (0, 141) and err == "", (proc.returncode, err)


def test_new_sort_flags_parse(tmp_path):
    args = build_parser().parse_args(["sort", "a", "b", "--workers", "3", "--threads", "2", "--memory-limit",
                                      "4GiB", "--temp-dir", str(tmp_path)])
    assert (args.workers, args.threads, args.memory_limit, args.temp_dir) == (3, 2, 4 * 2**30, tmp_path)
    assert build_parser().parse_args(["sort", "a", "b", "--memory-limit", "0"]).memory_limit == 0


def test_temp_dir_must_exist(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["sort", "a", "b", "--temp-dir", "/no/such/folder"])
    assert exit.value.code == 2 and "'/no/such/folder' is not a directory; create it first" in capsys.readouterr().err


def test_quiet_hides_the_bars_but_keeps_the_summary(keys, capsys):
    code, out, err = run(capsys, "sort", "keys.zarr", "sorted.zarr", "--cluster", "threads", "--quiet")
    assert code == 0 and "sorted 10000 int64 keys" in out and "Completed" not in err
    code, out, err = run(capsys, "sort", "keys.zarr", "again.zarr", "--cluster", "threads", "--threads", "1")
    assert code == 0 and "sorted 10000 int64 keys" in out and "100% Completed" in err


def test_ctrl_c_is_one_line_and_exit_130(keys, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("gpusort.zarr_io.ZarrSort.run", interrupted)
    code, out, err = run(capsys, "sort", "keys.zarr", "sorted.zarr", "--cluster", "threads")
    assert (code, out, err) == (130, "", "gpusort sort: interrupted\n")


def test_sort_checks_and_opens_its_source_once(keys, capsys, monkeypatch):
    import gpusort.zarr_io as zarr_io

    opened = []
    real = zarr_io.as_dask_array
    monkeypatch.setattr(zarr_io, "as_dask_array", lambda *a, **k: opened.append(a[0]) or real(*a, **k))
    code, _, _ = run(capsys, "sort", "keys.zarr", "sorted.zarr", "--cluster", "threads")
    assert code == 0 and opened == ["keys.zarr"]


def test_python_dash_m_gpusort():
    out = subprocess.run([sys.executable, "-m", "gpusort", "--help"], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.startswith("usage: gpusort ") and "sort" in out.stdout


def test_runs_choices_are_sort_zarrs():
    from gpusort.zarr_io import RUNS

    sort = build_parser()._subparsers._group_actions[0].choices["sort"]
    (runs,) = [a for a in sort._actions if a.dest == "runs"]
    assert tuple(runs.choices) == RUNS and runs.default == "auto"


@pytest.mark.parametrize("runs, computations", [("memory", 1), ("disk", 2)])
def test_progress_in_a_file_is_a_few_lines(keys, tmp_path, runs, computations):
    """stderr to a file: no redraws (\\r), a line now and then, each bar's last state."""
    with open(tmp_path / "log", "w") as log:
        subprocess.run([sys.executable, "-m", "gpusort", "sort", "keys.zarr", "sorted.zarr", "--cluster", "threads",
                        "--runs", runs], stderr=log, check=True, env=os.environ | {"PYTHONPATH": str(ROOT)})
    text = (tmp_path / "log").read_text()
    assert "\r" not in text and text.count("100% Completed") == computations
    assert len(text.splitlines()) <= 3 * computations


def test_info(capsys):
    code, out, _ = run(capsys, "info")
    assert code == 0
    for word in ("gpusort", "dask", "distributed", "zarr", "numpy", "cupy", "gpus", "backend", "cluster"):
        assert any(line.startswith(word) for line in out.splitlines()), word


def test_bench_list(capsys):
    code, out, _ = run(capsys, "bench", "list")
    names = [line.split()[0] for line in out.splitlines()]
    assert code == 0 and {"e2e", "skew", "splitters", "plot"} <= set(names)


def test_bench_runs_the_file_with_its_arguments(capfd):
    pytest.importorskip("matplotlib")  # plot.py needs it; it is in the bench extra, not the test one
    assert main(["bench", "plot", "--help"]) == 0
    assert "Plot benchmark results" in capfd.readouterr().out


def test_bench_plot_without_matplotlib_names_the_extra_in_one_line(tmp_path, not_installed):
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(not_installed("matplotlib")), str(ROOT)])}
    done = subprocess.run([sys.executable, "-m", "gpusort", "bench", "plot", str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "plot.py: error: plotting needs matplotlib: pip install 'gpusort[bench]'\n"


def test_console_script_entry_point():
    out = subprocess.run([sys.executable, "-c", "import sys; from gpusort.cli import main; sys.exit(main())",
                          "--version"], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.startswith("gpusort ")


@pytest.mark.parametrize("content", ["not json", '{"summary": "no rows"}'])
def test_bench_plot_with_a_bad_file_is_one_line_and_exit_2(tmp_path, capfd, content):
    pytest.importorskip("matplotlib")
    (tmp_path / "bad.json").write_text(content)
    assert main(["bench", "plot", str(tmp_path / "bad.json"), "--out", str(tmp_path / "plots")]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "bad.json is not a benchmark result" in err and "Traceback" not in err
    code = main(["bench", "plot", str(tmp_path / "missing.json")])
    err = capfd.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "missing.json does not exist" in err


def test_compile_without_a_gpu_is_a_setup_error():
    from gpusort import runtime

    if runtime.gpus()[0]:
        pytest.skip("a GPU is here: compile runs")
    done = subprocess.run([sys.executable, "-m", "gpusort", "compile"], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "compile needs CuPy" in done.stderr


@pytest.mark.gpu
def test_compile_fills_the_cache_for_every_gpu():
    done = subprocess.run([sys.executable, "-m", "gpusort", "compile", "--threads", "4"], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("kernel modules in") == len(runtime.gpus()[0])
