"""The benchmark harness (benchmarks/harness.py) and the bench files' command lines."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # as `python benchmarks/bench_X.py` has it

import harness
from harness import Case, keys_between, parse_args

from gpusort.engine.graph import PHASES


def args(tmp_path, *extra):
    return parse_args("test", ["--out", str(tmp_path), "--repeat", "3", "--warmup", "1", "--quiet", *extra])


def results(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def test_parse_args_common_and_extra_options():
    a = parse_args("demo", [], lambda p: p.add_argument("--n", type=int, default=7))
    assert (a.out, a.repeat, a.warmup, a.quiet, a.n) == (Path("results"), 5, 1, False, 7)
    for bad in (["--repeat", "0"], ["--warmup", "-1"], ["--nonesuch"]):
        with pytest.raises(SystemExit):
            parse_args("demo", bad)


def test_abbreviated_options_are_refused(capsys):
    """--rep is no --repeat: argparse would take any unambiguous prefix silently."""
    for argv in (["--rep", "3"], ["--warm", "0"], ["--clus", "threads"]):
        with pytest.raises(SystemExit) as exit:
            parse_args("demo", argv, cluster=True)
        assert exit.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err
    pytest.importorskip("matplotlib")  # plot.py needs it
    with pytest.raises(SystemExit) as exit:
        runpy.run_path(str(BENCHMARKS / "plot.py"))["main"](["results.json", "--ou", "plots"])
    assert exit.value.code == 2 and "unrecognized arguments: --ou" in capsys.readouterr().err


def test_fresh_inputs_warmup_untimed_checked_and_measured():
    seen, checked = [], []

    def setup(rep):
        seen.append(rep)
        return np.full(3, rep)

    def check(x, y):
        checked.append((int(x[0]), int(y)))
        return {"measured": float(y), "phases": {"a": 1.0}}

    rows = harness.time_case(Case("sum", setup, np.sum, check, 3), repeat=3, warmup=2)
    assert seen == [0, 1, 2, 3, 4]  # a fresh, distinct input every repetition
    assert checked == [(r, 3 * r) for r in range(5)]  # warm-ups are checked too
    assert [r["rep"] for r in rows] == [2, 3, 4]  # only timed repetitions are kept
    assert all(r["seconds"] > 0 and r["seconds"] == r["wall_seconds"] for r in rows)
    assert [r["measured"] for r in rows] == [6.0, 9.0, 12.0] and rows[0]["phases"] == {"a": 1.0}


def test_run_writes_tidy_json_never_overwrites_and_prints(tmp_path, capsys):
    cases = [
        Case("fast", lambda rep: np.arange(10), np.sort, None, 10, {"n": 10}),
        Case("slow", lambda rep: np.arange(10), lambda x: np.sort(x, kind="stable"), None, 10, {"n": 10}),
        Case("gone", lambda rep: None, None, None, 10, {"n": 10}, requires=("no_such_module_here",)),
        Case("gpu", lambda rep: None, None, None, 10, {"n": 10}, device="gpu", requires=("no_such_gpu_lib",)),
    ]
    a = parse_args("test", ["--out", str(tmp_path), "--repeat", "2"])
    assert harness.run("demo", a, cases, baseline="slow") == 0
    assert harness.run("demo", a, cases[:1]) == 0
    docs = results(tmp_path)
    assert len(docs) == 2  # the second run wrote a new file
    first = max(docs, key=lambda doc: len(doc["summary"]))
    assert {"benchmark", "created", "config", "machine", "versions", "runs", "summary", "skipped"} <= set(first)
    assert first["config"]["repeat"] == 2 and first["config"]["out"] == str(tmp_path)
    assert first["machine"]["cpus"] >= 1 and first["versions"]["numpy"] == np.__version__
    assert [(r["case"], r["n"], r["rep"]) for r in first["runs"]] == [("fast", 10, 1), ("fast", 10, 2),
                                                                      ("slow", 10, 1), ("slow", 10, 2)]
    fast, slow = first["summary"]
    assert fast["params"] == {"n": 10} and fast["repetitions"] == 2 and slow["ratio"] == 1.0
    assert fast["items_per_second"] == pytest.approx(10 / fast["median_seconds"])
    assert {(s["case"], s["reason"]) for s in first["skipped"]} == {
        ("gone", "no_such_module_here is not installed"), ("gpu", "no_such_gpu_lib is not installed")}
    out = capsys.readouterr().out
    assert "case  n   median s" in out and "gone  10  skipped: no_such_module_here is not installed" in out
    assert "results: " in out


def test_a_failed_check_is_reported_and_the_others_still_run(tmp_path):
    def wrong(x, y):
        assert False, "wrong answer"

    cases = [Case("bad", lambda rep: 1, lambda x: x, wrong, 1), Case("good", lambda rep: 1, lambda x: x, None, 1)]
    assert harness.run("demo", args(tmp_path), cases) == 1
    (doc,) = results(tmp_path)
    bad, good = doc["summary"]
    assert bad["status"] == "failed" and "AssertionError: wrong answer" in bad["reason"]
    assert good["status"] == "ok" and doc["runs"][0]["case"] != "bad"


def test_summarize_ratio_and_table():
    case = Case("a", None, None, None, 100, {"n": 100})
    entry = harness.summarize(case, [{"rep": 1, "seconds": 2.0, "x": 1}, {"rep": 2, "seconds": 4.0, "x": 3}])
    assert (entry["median_seconds"], entry["min_seconds"], entry["items_per_second"], entry["x"]) == (3.0, 2.0,
                                                                                                    100 / 3, 2)
    other = {"case": "b", "params": {"n": 100}, "status": "ok", "median_seconds": 6.0}
    elsewhere = {"case": "c", "params": {"n": 5}, "status": "ok", "median_seconds": 1.0}  # no b at n=5
    harness.add_ratios([entry, other, elsewhere], "b")
    assert entry["ratio"] == 2.0 and "ratio" in other and "ratio" not in elsewhere
    table = harness.format_table([entry], show=["x"]).splitlines()
    assert table[0].split() == ["case", "n", "median", "s", "min", "s", "Mkeys/s", "ratio", "x"]
    assert table[2].split() == ["a", "100", "3", "2", "3.333e-05", "2.00x", "2"]


@pytest.mark.parametrize("distribution", harness.DISTRIBUTIONS)
@pytest.mark.parametrize("dtype", ["int8", "uint64", "float32", "int64"])
def test_keys_any_chunk_alone(distribution, dtype):
    whole = harness.dask_keys(1000, 300, dtype, distribution, seed=1).compute()
    assert whole.dtype == np.dtype(dtype) and whole.shape == (1000,)
    np.testing.assert_array_equal(whole[300:600], keys_between(300, 600, 1000, dtype, distribution, seed=1))
    if distribution == "equal":
        assert (whole == whole[0]).all()
    if distribution == "one99":
        assert (whole == 42).mean() > 0.95
    if distribution in ("sorted", "reverse") and dtype in ("int64", "float32"):
        np.testing.assert_array_equal(whole, np.sort(whole) if distribution == "sorted" else np.sort(whole)[::-1])
    with pytest.raises(ValueError, match="distribution='nope' is not known"):
        keys_between(0, 1, 1, dtype, "nope", 0)


@pytest.mark.parametrize("bench", ["bench_e2e.py", "bench_skew.py", "bench_splitters.py", "plot.py"])
def test_bench_help(bench, capsys):
    if bench == "plot.py":
        pytest.importorskip("matplotlib")  # in the bench extra, not the test one
    module = runpy.run_path(str(BENCHMARKS / bench))
    with pytest.raises(SystemExit) as exit:
        module["main"](["--help"])
    assert exit.value.code == 0 and "--out" in capsys.readouterr().out


def test_e2e_bench_end_to_end_then_plot(tmp_path, capsys):
    e2e = runpy.run_path(str(BENCHMARKS / "bench_e2e.py"))
    assert e2e["main"](["--out", str(tmp_path), "--n", "20000", "--chunks", "4", "--repeat", "1",
                        "--warmup", "0", "--workers", "1"]) == 0
    (doc,) = results(tmp_path)
    summary = {s["case"]: s for s in doc["summary"]}
    gpu_peers = {"cupy.sort", "cupy.argsort", "torch.sort"}
    assert set(summary) | {s["case"] for s in doc["skipped"]} == {"gpusort[numpy]", "dask.dataframe", "np.sort"} | gpu_peers
    assert {"gpusort[numpy]", "dask.dataframe", "np.sort"} <= set(summary)
    # The graph's phases in order; tasks of no phase follow under their own names.
    # (the exchange runs only between several workers).
    ran = [p for p in summary["gpusort[numpy]"]["phases"] if p in PHASES]
    assert ran == [p for p in PHASES if p in ran] and {"runs", "merges"} <= set(ran)
    assert summary["dask.dataframe"]["ratio"] == 1.0
    assert "gpusort[numpy]  20000" in capsys.readouterr().out
    pytest.importorskip("matplotlib")
    plot = runpy.run_path(str(BENCHMARKS / "plot.py"))
    assert plot["main"]([str(tmp_path), "--out", str(tmp_path / "plots")]) == 0
    assert {p.name for p in (tmp_path / "plots").iterdir()} == {"throughput-e2e.png", "phases.png"}
    assert "skew        skipped" in capsys.readouterr().out


@pytest.mark.parametrize("bench, argv, measured", [
    ("bench_skew.py", ["--n", "6000", "--chunks", "3", "--distributions", "one99"], "chunk_imbalance"),
    ("bench_splitters.py", ["--n", "6000", "--runs", "3", "--out-chunks", "4"], "splitter_bytes"),
])
def test_cluster_benches_end_to_end(tmp_path, bench, argv, measured):
    module = runpy.run_path(str(BENCHMARKS / bench))
    assert module["main"]([*argv, "--out", str(tmp_path), "--repeat", "1", "--warmup", "0", "--quiet"]) == 0
    (doc,) = results(tmp_path)
    ours = [s for s in doc["summary"] if s["case"] == "gpusort[numpy]"]
    assert len(ours) == 1 and ours[0]["status"] == "ok" and ours[0]["items"] == 6000
    assert measured in ours[0]


def test_gpu_bench_dry_run_on_cpu(tmp_path):
    """bench_gpu_e2e's clusters, checks and measurements, on a CPU LocalCluster with backend numpy."""
    gpu_e2e = runpy.run_path(str(BENCHMARKS / "bench_gpu_e2e.py"))
    assert gpu_e2e["main"](["--dry-run-on-cpu", "--cases", "cupy,host", "--n-cupy", "6000", "--n-host", "6000",
                            "--chunks-host", "3", "--gpu-counts", "1,2", "--modes", "process", "--threads", "1",
                            "--repeat", "1", "--warmup", "0", "--host-repeat", "1", "--out", str(tmp_path),
                            "--quiet"]) == 0
    docs = results(tmp_path)
    assert {d["benchmark"] for d in docs} == {"gpu_e2e-cupy", "gpu_e2e-host-1gpu-workers", "gpu_e2e-host-2gpu-process"}
    for doc in docs:
        (entry,) = doc["summary"]
        assert entry["status"] == "ok" and entry["phase_runs"] > 0 and "phase_merges" in entry


def test_exchange_bench_cpu_groups_end_to_end(tmp_path, capsys):
    """The engine's CPU rows, tiny: peers in the same run, goal lines, every result verified."""
    module = runpy.run_path(str(BENCHMARKS / "bench_exchange.py"))
    assert module["main"](["--cases", "cpu,presorted", "--n-cpu", "20000", "--n-chunks", "8192",
                           "--n-presorted", "16000", "--repeat", "1", "--warmup", "0", "--out", str(tmp_path)]) == 0
    docs = {d["benchmark"]: d for d in results(tmp_path)}
    assert set(docs) == {"exchange-cpu", "exchange-chunks", "exchange-presorted"}
    cases = {s["case"] for s in docs["exchange-cpu"]["summary"]}
    assert {"gpusort[2 workers]", "np.sort (one core)"} <= cases
    assert {s["case"] for s in docs["exchange-presorted"]["summary"]} == {
        "gpusort[uniform]", "gpusort[sorted]", "gpusort[nearly]"}
    out = capsys.readouterr().out
    assert "one core's np.sort" in out and "sorted input" in out and "256 vs 16 chunks" in out


def test_kernels_bench_without_a_gpu_is_a_setup_error(tmp_path, capsys):
    from gpusort import runtime

    if runtime.gpus()[0]:
        pytest.skip("a GPU is here: the bench runs")
    module = runpy.run_path(str(BENCHMARKS / "bench_kernels.py"))
    assert module["main"](["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "needs CuPy and a CUDA GPU" in err and "Traceback" not in err


def test_beyond_bench_every_row_tiny(tmp_path):
    """bench_beyond's rows at tiny sizes: each peer checked, the GPU row skipped with its reason where no GPU."""
    beyond = runpy.run_path(str(BENCHMARKS / "bench_beyond.py"))
    assert beyond["main"](["--merge-n", "3000", "--merge-chunks", "3", "--frame-n", "2000", "--frame-partitions", "3",
                           "--big-frame-n", "3000", "--big-frame-partitions", "2", "--big-memory-limit", "1GiB",
                           "--gpu-merge-n", "1000", "--gpu-merge-chunks", "2", "--repeat", "1", "--warmup", "0",
                           "--distinct-strings", "300", "--out", str(tmp_path), "--quiet"]) == 0
    docs = {doc["benchmark"]: doc for doc in results(tmp_path)}
    assert set(docs) == {"beyond-merge", "beyond-gpu-merge", "beyond-sort_values", "beyond-sort_values-big",
                         "beyond-sort_values-string"}
    for name in ("beyond-merge", "beyond-sort_values", "beyond-sort_values-big", "beyond-sort_values-string"):
        assert {s["status"] for s in docs[name]["summary"]} == {"ok"} and len(docs[name]["summary"]) == 2
    ours = {s["case"]: s for s in docs["beyond-sort_values"]["summary"]}["gpusort.sort_values"]
    assert ours["partition_imbalance"] == pytest.approx(1.0, abs=1e-3) and "ratio" in ours  # 667, 667, 666 rows
    gpu = docs["beyond-gpu-merge"]
    assert {c["case"] for c in gpu["summary"] + gpu["skipped"]} == {
        "gpusort.merge", "gpusort.gpu.merge", "Dask floor: a view a chunk"}
