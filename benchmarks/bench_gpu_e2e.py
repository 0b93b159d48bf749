"""GPU end to end: gpusort with backend="cupy" on dask-cuda's LocalCUDACluster, and its floors.

Groups (``--cases``), each a table and a JSON file, all in one run:

``link``       host<->device copies of 1 GiB on this process's GPU: pinned and
               pageable, each way, and gpusort's staged copy of pageable memory
               (``gpusort.memory.staging.to_device``).  The host-link floor of the
               out-of-core sort -- every key up and down twice, the two directions
               overlapping -- is min(pinned H2D, pinned D2H) / (2 x key bytes).
``cupy``       CuPy chunks already in GPU memory (``--n-cupy`` int64 keys in
               ``--chunks-cupy`` chunks, one GPU), against ``cupy.sort`` of the whole
               array in this process.
``host``       NumPy chunks in host memory (``--n-host`` int64 keys), sorted on the
               GPU within ``--budget`` per worker, on 1 GPU and on each of
               ``--gpu-counts``; peak GPU memory *measured* on every worker.
``dataframe``  NumPy chunks (``--n-df`` int64 keys): gpusort on the GPU against
               ``dask.dataframe.sort_values`` on a LocalCluster of every core.

Inputs are fresh (new Dask keys) every repetition and persisted before the
clock starts; results are persisted, then checked with ``gpusort.verify``
on the GPUs (count, order-independent 64-bit checksum, order within and
across chunks), and host results for exactly balanced chunks.  Reported per
run: task seconds by phase (``gpusort.engine.graph.PHASES``), bytes moved between
workers, peak GPU memory.  A goal table closes the run.  Clusters come from
``gpusort.runtime.cluster``; ``--dry-run-on-cpu`` runs it all on a CPU
``LocalCluster`` with ``backend="numpy"``.

    python benchmarks/bench_gpu_e2e.py --out results
    python benchmarks/bench_gpu_e2e.py --cases host --n-host 2**31 --gpu-counts 1,2
"""

from __future__ import annotations

import contextlib
import sys

import dask
import numpy as np
from distributed import wait
from harness import Case, add_ratios, dask_keys, gpusort_on_cluster, parse_args, run_cases

from gpusort import runtime
from gpusort.verification import verify

GROUPS = ("link", "cupy", "host", "dataframe")
DRY = False  # --dry-run-on-cpu: LocalCluster and backend="numpy", to test this file anywhere


def options(p):
    p.add_argument("--cases", default=",".join(GROUPS), help="groups to run, of %s (default: all)" % (GROUPS,))
    p.add_argument("--n-cupy", type=runtime.count, default=2**28, help="keys, CuPy-chunk case (default: %(default)s)")
    p.add_argument("--chunks-cupy", type=int, default=16, help="chunks, CuPy-chunk case (default: %(default)s)")
    p.add_argument("--n-host", type=runtime.count, default=2**31, help="keys, host case (default: %(default)s)")
    p.add_argument("--chunks-host", default="32", help="chunks, host case; a list runs each (default: %(default)s)")
    p.add_argument("--budget", default="2GiB", help="GPU memory budget per worker, host cases (default: %(default)s)")
    p.add_argument("--gpu-counts", default="1", help="GPU counts for the host case, e.g. 1,2 (default: %(default)s)")
    p.add_argument("--modes", default="workers,process",
                   help="for more than one GPU: 'workers' (LocalCUDACluster, a worker per GPU) and/or "
                        "'process' (one worker process using every GPU) (default: %(default)s)")
    p.add_argument("--host-repeat", type=int, default=2, help="timed runs of the host case (default: %(default)s)")
    p.add_argument("--n-df", type=runtime.count, default=2**27, help="keys, dataframe case (default: %(default)s)")
    p.add_argument("--chunks-df", type=int, default=16, help="chunks, dataframe case (default: %(default)s)")
    p.add_argument("--df-repeat", type=int, default=1, help="timed runs of dask.dataframe (default: %(default)s)")
    p.add_argument("--threads", type=int, default=4, help="threads per GPU worker (default: %(default)s)")
    p.add_argument("--protocol", choices=("tcp", "ucx"), help="tcp or ucx (default: tcp)")
    p.add_argument("--rmm-pool-size", default=None, help="RMM pool per GPU worker (default: none)")
    p.add_argument("--df-workers", type=int, default=None, help="LocalCluster workers for dask.dataframe (default: cores)")
    p.add_argument("--dry-run-on-cpu", action="store_true",
                   help="exercise the bench on a CPU LocalCluster with backend='numpy' (no GPU, no numbers)")
    p.set_defaults(repeat=3)


def main(argv=None) -> int:
    args = parse_args(__doc__, argv, options)
    groups = [g for g in args.cases.split(",") if g]
    unknown = set(groups) - set(GROUPS)
    if unknown:
        raise SystemExit(f"--cases: unknown {sorted(unknown)}; choose from {GROUPS}")
    global DRY
    DRY = args.dry_run_on_cpu
    results: dict[str, list[dict]] = {}
    status = 0
    for group in groups:
        missing = runtime.cuda_cluster_missing()
        if group != "link" and not DRY and missing:
            print(f"{group}: skipped: {missing}\n")
            continue
        summary, failed = globals()[f"group_{group}"](args)
        results[group] = summary
        status |= failed
    print_goals(args, results)
    return status


def run_group(name: str, args, cases: list[Case], baseline: str | None = None,
              show=("phase_runs", "phase_splitters", "phase_merges", "peak_gpu_mib", "moved_mib")):
    """The harness's :func:`run_cases` for one group: (summary rows, failed)."""
    summary = run_cases(f"gpu_e2e-{name}", args, cases, baseline, show)
    print(flush=True)
    return summary, int(any(s["status"] == "failed" for s in summary))


def gpu_cluster(args, gpus: int = 1, mode: str = "workers") -> contextlib.AbstractContextManager:
    """``gpus`` GPUs as a worker each (``mode="workers"``) or one process over all (``"process"``).

    No host memory limit: the workers hold tens of GiB of host chunks on purpose.
    """
    if DRY:
        return runtime.cluster("local" if mode == "workers" else "process", threads=args.threads,
                               memory_limit=0, **({"workers": gpus} if mode == "workers" else {}))
    if mode == "process":
        return runtime.cluster("process", gpus=gpus, threads=args.threads * gpus, memory_limit=0)
    return runtime.cluster("cuda", gpus=gpus, threads=args.threads, protocol=args.protocol,
                           rmm_pool_size=args.rmm_pool_size, memory_limit=0)


def measurements(client, start: float, moved_before: int, host_path: bool) -> dict:
    """Phase seconds, bytes between workers and peak GPU memory of the run since ``start``."""
    phases = runtime.phase_seconds(client, start)
    out = {"phases": phases, **{f"phase_{p}": s for p, s in phases.items()},
           "moved_mib": (runtime.bytes_moved(client) - moved_before) / 2**20, "peak_gpu_mib": 0.0}
    if DRY:
        return out
    if host_path:
        peaks = [s for s in client.run(_memory_stats).values() if s]
        out["peak_gpu_mib"] = max(s["peak_bytes"] for s in peaks) / 2**20
        out["budget_mib"] = max(s["budget_bytes"] for s in peaks) / 2**20
    else:
        out["peak_gpu_mib"] = max(client.run(_default_pool_bytes).values()) / 2**20
    return out


def _memory_stats(reset: bool = False) -> dict:
    from gpusort.backends.cupy import memory_stats

    return memory_stats(reset)


def _default_pool_bytes() -> int:
    import cupy

    return cupy.get_default_memory_pool().total_bytes()


def _free_default_pool() -> None:
    """Empty CuPy's pool on a worker that uses it, so that its size after a run is that run's peak."""
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        cupy.get_default_memory_pool().free_all_blocks()


def _on_gpu(x):
    """``x`` with CuPy chunks (NumPy ones in a dry run)."""
    if DRY:
        return x
    import cupy

    return x.map_blocks(cupy.asarray, meta=cupy.empty(0, x.dtype))


def check_sorted(x, y) -> None:
    """``y`` is ``x`` sorted: :func:`gpusort.verify`, computed on the GPUs."""
    report = verify(_on_gpu(x), _on_gpu(y))
    assert report.ok, str(report)


def check_balanced(y) -> None:
    assert list(y.chunks[0][:-1]) == [y.chunks[0][0]] * (len(y.chunks[0]) - 1), "unbalanced chunks"


# --- groups --------------------------------------------------------------------------------------


def group_link(args):
    nbytes = 2**30

    def pinned(rep):
        import cupy
        import cupyx

        h = cupyx.empty_pinned(nbytes // 8, np.int64)
        h[:] = rep
        return h, cupy.empty(nbytes // 8, np.int64)

    def pageable(rep):
        import cupy

        return np.full(nbytes // 8, rep, np.int64), cupy.empty(nbytes // 8, np.int64)

    def h2d(hd):
        hd[1].set(hd[0])

    def d2h(hd):
        hd[1].get(out=hd[0])

    def staged(hd):
        from gpusort.memory import staging

        staging.to_device(hd[0], hd[1])
        staging.streams().work.synchronize()

    params = {"n": nbytes // 8, "dtype": "int64", "bytes": nbytes}
    cases = [Case(name, setup, fn, None, nbytes // 8, params, device="gpu", bytes=nbytes)
             for name, setup, fn in (("H2D pinned", pinned, h2d), ("D2H pinned", pinned, d2h),
                                     ("H2D pageable", pageable, h2d), ("D2H pageable", pageable, d2h),
                                     ("H2D staged (gpusort)", pageable, staged))]
    return run_group("link", args, cases, show=("bytes_per_second",))


def group_cupy(args):
    n, chunk = args.n_cupy, -(-args.n_cupy // args.chunks_cupy)
    params = {"n": n, "dtype": "int64", "chunks": args.chunks_cupy, "gpus": 1}
    with gpu_cluster(args) as client:
        def setup(rep):
            x = _on_gpu(dask_keys(n, chunk, "int64", "uniform", seed=100 + rep)).persist()
            wait(x)
            client.run(_free_default_pool)
            return x, runtime.bytes_moved(client)

        sort_on_cluster = gpusort_on_cluster()

        def sort(inputs):
            return sort_on_cluster(inputs[0])  # (keys, bytes moved so far)

        def check(inputs, out):
            x, moved = inputs
            y, start = out
            measured = measurements(client, start, moved, host_path=False)
            check_sorted(x, y)
            return measured

        def raw(rep):
            import cupy

            return cupy.asarray(dask_keys(n, n, "int64", "uniform", seed=200 + rep).compute())

        def cupy_sort(x):
            import cupy

            return cupy.sort(x)

        cases = [Case("gpusort[cupy chunks]", setup, sort, check, n, params,
                      requires=() if DRY else ("cupy", "dask_cuda")),
                 Case("cupy.sort (whole array)", raw, cupy_sort, None, n, params, device="gpu")]
        return run_group("cupy", args, cases, baseline="cupy.sort (whole array)")


def host_case(args, client, gpus: int, n: int, chunks: int, name: str) -> Case:
    chunk = -(-n // chunks)
    params = {"n": n, "dtype": "int64", "chunks": chunks, "gpus": gpus, "budget": args.budget}

    def setup(rep):
        x = dask_keys(n, chunk, "int64", "uniform", seed=300 + rep).persist()
        wait(x)
        client.run(_free_default_pool)
        if not DRY:
            client.run(_memory_stats, True)
        return x, runtime.bytes_moved(client)

    sort_on_cluster = gpusort_on_cluster(**({} if DRY else {"backend": "cupy", "gpu_memory_budget": args.budget}))

    def sort(inputs):
        return sort_on_cluster(inputs[0])  # (keys, bytes moved so far)

    def check(inputs, out):
        x, moved = inputs
        y, start = out
        measured = measurements(client, start, moved, host_path=True)
        check_sorted(x, y)
        check_balanced(y)
        client.run(_free_default_pool)
        return measured

    return Case(name, setup, sort, check, n, params, requires=() if DRY else ("cupy", "dask_cuda"))


def group_host(args):
    summary, failed = [], 0
    for gpus in [int(g) for g in args.gpu_counts.split(",")]:
        for mode in (["workers"] if gpus == 1 else args.modes.split(",")):
            with gpu_cluster(args, gpus, mode) as client:
                cases = []
                for chunks in [int(c) for c in args.chunks_host.split(",")]:
                    case = host_case(args, client, gpus, args.n_host, chunks, "gpusort[host chunks]")
                    case.params["mode"] = mode
                    case.repeat = args.host_repeat
                    cases.append(case)
                s, f = run_group(f"host-{gpus}gpu-{mode}", args, cases)
            summary += s
            failed |= f
    return summary, failed


def group_dataframe(args):
    n = args.n_df
    params = {"n": n, "dtype": "int64", "chunks": args.chunks_df}
    with gpu_cluster(args) as client:
        case = host_case(args, client, 1, n, args.chunks_df, "gpusort[host chunks]")
        case.params = params
        summary, failed = run_group("dataframe-gpusort", args, [case])
    with runtime.cluster("local", workers=args.df_workers or dask.system.CPU_COUNT, threads=1):
        chunk = -(-n // args.chunks_df)

        def setup(rep):
            x = dask_keys(n, chunk, "int64", "uniform", seed=400 + rep).persist()
            wait(x)
            return x

        def sort(x):
            import dask.dataframe as dd

            y = dd.from_dask_array(x, columns=["k"]).sort_values("k").persist()
            wait(y)
            return y

        def check(x, y):
            k = y["k"].to_dask_array(lengths=True)
            fx, fy = dask.compute(x.sum(dtype=np.uint64), k.sum(dtype=np.uint64))
            assert fx == fy and len(k) == n, "dask.dataframe lost keys"

        df = Case("dask.dataframe.sort_values", setup, sort, check, n, params, requires=("pandas", "pyarrow"))
        df.repeat, df.warmup = args.df_repeat, 0
        s2, f2 = run_group("dataframe-peer", args, [df])
    summary += s2
    add_ratios(summary, "dask.dataframe.sort_values")
    return summary, failed | f2


# --- goals ----------------------------------------------------------------------------------------


def print_goals(args, results) -> None:
    def find(group, case, **params):
        for e in results.get(group, []):
            if e["case"] == case and e["status"] == "ok" and all(e["params"].get(k) == v for k, v in params.items()):
                return e
        return None

    lines = []
    link = {e["case"]: e.get("bytes_per_second") for e in results.get("link", []) if e["status"] == "ok"}
    if link.get("H2D pinned") and link.get("D2H pinned"):
        floor = min(link["H2D pinned"], link["D2H pinned"]) / 16
        lines.append(f"host-link floor (int64)   {floor / 1e9:6.2f} Gkeys/s  (pinned H2D {link['H2D pinned'] / 1e9:.1f}, "
                     f"D2H {link['D2H pinned'] / 1e9:.1f}, pageable H2D {link.get('H2D pageable', 0) / 1e9:.1f}, "
                     f"staged H2D {link.get('H2D staged (gpusort)', 0) / 1e9:.1f} GB/s)")
    e = find("cupy", "gpusort[cupy chunks]")
    if e:
        raw = find("cupy", "cupy.sort (whole array)")
        lines.append(f"CuPy chunks, 1 GPU        {e['items_per_second'] / 1e9:6.2f} Gkeys/s  goal >= 3     "
                     f"{'met' if e['items_per_second'] >= 3e9 else 'missed'}"
                     + (f"  (cupy.sort whole array {raw['items_per_second'] / 1e9:.2f})" if raw else ""))
    one = None
    for e in results.get("host", []):
        if e["status"] != "ok":
            continue
        gpus, mode, chunks = e["params"]["gpus"], e["params"].get("mode", "workers"), e["params"]["chunks"]
        ok = e["items_per_second"] >= 1.5e9 and e.get("peak_gpu_mib", 1e18) * 2**20 <= runtime.size(args.budget)
        lines.append(f"host chunks x{chunks}, {gpus} GPU(s) ({mode})  {e['items_per_second'] / 1e9:6.2f} Gkeys/s  "
                     f"goal >= 1.5, "
                     f"peak {e.get('peak_gpu_mib', float('nan')):.0f} MiB <= {args.budget}, "
                     f"moved {e.get('moved_mib', 0):.0f} MiB  {'met' if ok else 'missed'}")
        if gpus == 1:
            one = one or {}
            one[chunks] = e
        elif one and chunks in one:
            base = one[chunks]
            speedup = base["median_seconds"] / e["median_seconds"]
            lines.append(f"  {gpus} GPUs ({mode}) vs 1 GPU   {speedup:6.2f}x         goal >= 1.7   "
                         f"{'met' if speedup >= 1.7 else 'missed'}")
    e, df = find("dataframe", "gpusort[host chunks]"), find("dataframe", "dask.dataframe.sort_values")
    if e and df:
        ratio = df["median_seconds"] / e["median_seconds"]
        lines.append(f"vs dask.dataframe         {ratio:6.1f}x         goal >= 50    {'met' if ratio >= 50 else 'missed'}"
                     f"  ({e['items_per_second'] / 1e6:.0f} vs {df['items_per_second'] / 1e6:.1f} Mkeys/s)")
    if lines:
        print("goals")
        print("\n".join(lines))


if __name__ == "__main__":
    raise SystemExit(main())
