"""Plot benchmark results (the harness's JSON) as PNG files.

    python benchmarks/plot.py results/ --out results/plots
    gpusort bench plot results/e2e-*.json results/skew-*.json --out plots

Each plot is drawn from whatever the results hold and skipped, with the
reason, where they hold nothing for it:

throughput   keys/s against N per dtype, gpusort and its peers (uniform keys)
phases       gpusort's task-seconds by phase (gpusort.engine.graph.PHASES: runs, splitters, merges)
skew         keys/s and output chunk imbalance per key distribution
splitters    splitter bytes and seconds as a share of the sort, against N
gpus         keys/s against the number of GPUs (results with a ``gpus`` param)
host_link    keys/s as a fraction of the host-link floor (results that measured
             ``host_link_bytes_per_second``): two passes each way, so the floor
             is bandwidth / (2 x key bytes) keys/s
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

try:
    import matplotlib
except ModuleNotFoundError as exc:
    if __name__ != "__main__" or exc.name != "matplotlib":
        raise
    # `gpusort bench plot` after a plain install: the fix in one line, not a traceback.
    print(f"{Path(sys.argv[0]).name}: error: plotting needs matplotlib: pip install 'gpusort[bench]'",
          file=sys.stderr)
    raise SystemExit(2) from None

matplotlib.use("Agg")  # files only: no display needed
import matplotlib.pyplot as plt
import numpy as np
from matplotlib import ticker

Figure = plt.Figure


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("results", nargs="+", type=Path, help="result JSON files, or folders of them")
    parser.add_argument("--out", type=Path, default=Path("plots"), help="folder for the PNGs (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        rows = load(args.results)
    except ValueError as exc:  # the file's name and what is wrong say it all
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    if not rows:
        parser.error("no benchmark results found in " + ", ".join(map(str, args.results)))
    args.out.mkdir(parents=True, exist_ok=True)
    for name, plot in PLOTS.items():
        figures = plot(rows)
        if not figures:
            print(f"{name:10}  skipped: {plot.__doc__.splitlines()[0].lower().rstrip('.')} -- none in these results")
        for suffix, figure in figures.items():
            path = args.out / f"{name}{'-' + suffix if suffix else ''}.png"
            figure.savefig(path, dpi=120, bbox_inches="tight")
            plt.close(figure)
            print(f"{name:10}  {path}")
    return 0


def load(paths: Iterable[Path]) -> list[dict]:
    """One flat row per successful case: benchmark, machine, case, params and measurements.

    Raises a ValueError naming the file that is missing or holds no benchmark results.
    """
    files = [f for p in paths for f in (sorted(p.glob("*.json")) if p.is_dir() else [p])]
    rows = []
    for f in files:
        try:
            doc = json.loads(f.read_text())
            # Flat for reading, with the params also kept apart for labels.
            rows += [{"benchmark": doc["benchmark"], "machine": doc["machine"], "on": _machine_tag(doc["machine"]),
                      **entry, **entry["params"]} for entry in doc.get("summary", []) if entry.get("status") == "ok"]
        except FileNotFoundError:
            raise ValueError(f"{f} does not exist") from None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{f} is not a benchmark result (the JSON a bench file writes): "
                             f"{type(exc).__name__}: {exc}") from None
    return rows


def _groups(rows: Iterable[dict], *keys: str) -> dict[tuple, list[dict]]:
    out = defaultdict(list)
    for row in rows:
        out[tuple(row.get(k) for k in keys)].append(row)
    return dict(out)


def _label(row: dict, varying: Sequence[str]) -> str:
    words = [f"on {row[k]}" if k == "on" else f"{k}={row[k]}" for k in varying if row.get(k) is not None]
    return " ".join([row["case"], *words])


def _varying(rows: list[dict], fixed: Sequence[str]) -> list[str]:
    """Params (and the machine, ``on``), other than ``fixed``, that differ between rows.

    Lines are drawn per case and these, and labelled with them.
    """
    params = dict.fromkeys(k for r in rows for k in r["params"] if k not in fixed)
    return [k for k in [*params, "on"] if len({str(r.get(k)) for r in rows}) > 1]


def throughput(rows: list[dict]) -> dict[str, Figure]:
    """Throughput against N (results with n and dtype)."""
    # Uniform keys only; the skew plot has the skewed ones, and keys/s with them.
    rows = [r for r in rows if "n" in r and "dtype" in r and "chunk_imbalance" not in r
            and r.get("distribution", "uniform") == "uniform"]
    figures = {}
    for (bench,), bench_rows in _groups(rows, "benchmark").items():
        dtypes = sorted({r["dtype"] for r in bench_rows})
        fig, axes = plt.subplots(1, len(dtypes), figsize=(6 * len(dtypes), 4.2), squeeze=False)
        for ax, dtype in zip(axes[0], dtypes):
            of_dtype = [r for r in bench_rows if r["dtype"] == dtype]
            varying = _varying(of_dtype, ("n", "dtype"))
            for label, line in sorted(_groups(of_dtype, "case", *varying).items(), key=str):
                line.sort(key=lambda r: r["n"])
                ax.plot([r["n"] for r in line], [r["items_per_second"] for r in line], "o-",
                        label=_label(line[0], varying))
            ax.set(xscale="log", yscale="log", xlabel="keys (N)", ylabel="keys/s", title=f"{bench}: {dtype}")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        fig.text(0.5, -0.04, _machine(bench_rows), fontsize=8, ha="center")
        figures[bench] = fig
    return figures


def phases(rows: list[dict]) -> dict[str, Figure]:
    """Time by phase (results with phases)."""
    rows = [r for r in rows if r.get("phases")]
    if not rows:
        return {}
    rows.sort(key=lambda r: (r["benchmark"], r["case"], r.get("n", 0)))
    labels = [f"{r['case']} n={r.get('n')} {r.get('dtype', '')}" for r in rows]
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.45 * len(rows)))
    left = np.zeros(len(rows))
    names = list(dict.fromkeys(p for r in rows for p in r["phases"]))  # in the order they ran
    for phase in names:
        widths = np.array([r["phases"].get(phase, 0.0) for r in rows])
        ax.barh(labels, widths, left=left, label=phase)
        left += widths
    ax.scatter([r["median_seconds"] for r in rows], labels, marker="|", s=300, color="k", label="wall time")
    ax.set(xlabel="seconds (task-seconds summed over workers; | = wall time)", title="gpusort time by phase")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    return {"": fig}


def skew(rows: list[dict]) -> dict[str, Figure]:
    """Balance under skew (results with chunk_imbalance)."""
    rows = [r for r in rows if "chunk_imbalance" in r]
    figures = {}
    for (n, dtype), group in _groups(rows, "n", "dtype").items():
        dists = list(dict.fromkeys(r["distribution"] for r in group))
        cases = list(dict.fromkeys(r["case"] for r in group))
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
        width = 0.8 / len(cases)
        for i, case in enumerate(cases):
            by_dist = {r["distribution"]: r for r in group if r["case"] == case}
            xs = np.arange(len(dists)) + (i - (len(cases) - 1) / 2) * width
            top.bar(xs, [by_dist[d]["items_per_second"] if d in by_dist else 0 for d in dists], width, label=case)
            bars = bottom.bar(xs, [by_dist[d]["chunk_imbalance"] if d in by_dist else 0 for d in dists], width,
                              label=case)
            bottom.bar_label(bars, fmt="%.3g", fontsize=7)
        top.set(ylabel="keys/s", title=f"skewed keys: n={n} {dtype}")
        bottom.set(ylabel="longest output chunk / mean", yscale="log", ylim=(0.5, None))  # 1.0 bars show
        bottom.axhline(1.0, color="k", lw=0.8)
        bottom.set_xticks(np.arange(len(dists)), dists)
        top.legend(fontsize=8)
        for ax in (top, bottom):
            ax.grid(True, axis="y", alpha=0.3)
        figures[f"{n}-{dtype}"] = fig
    return figures


def splitters(rows: list[dict]) -> dict[str, Figure]:
    """Splitter overhead (results with splitter_byte_share)."""
    rows = [r for r in rows if "splitter_byte_share" in r]
    if not rows:
        return {}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for (runs, out_chunks), line in sorted(_groups(rows, "runs", "out_chunks").items()):
        line.sort(key=lambda r: r["n"])
        for ax, key in zip(axes, ("splitter_byte_share", "splitter_time_share")):
            ax.plot([r["n"] for r in line], [100 * r[key] for r in line], "o-", label=f"P={runs} J={out_chunks}")
    axes[0].set(ylabel="splitter bytes, % of key bytes", title="bytes moved by the splitters")
    axes[1].set(ylabel="splitter task-seconds, % of the sort's", title="time in the splitters")
    for ax in axes:
        ax.set(xscale="log", yscale="log", xlabel="keys (N)")
        # Percentages read better as 0.5, 2, 10 than as powers of ten.
        ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return {"": fig}


def gpus(rows: list[dict]) -> dict[str, Figure]:
    """Scaling with GPUs (results with a gpus param)."""
    rows = [r for r in rows if "gpus" in r]
    if not rows:
        return {}
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for (case, n, dtype), line in sorted(_groups(rows, "case", "n", "dtype").items(), key=str):
        line.sort(key=lambda r: r["gpus"])
        ax.plot([r["gpus"] for r in line], [r["items_per_second"] for r in line], "o-", label=f"{case} n={n} {dtype}")
    ax.set(xlabel="GPUs", ylabel="keys/s", title="scaling with GPUs")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return {"": fig}


def host_link(rows: list[dict]) -> dict[str, Figure]:
    """Fraction of the host-link floor (results with host_link_bytes_per_second)."""
    rows = [r for r in rows if r.get("host_link_bytes_per_second") and "dtype" in r]
    if not rows:
        return {}
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.45 * len(rows)))
    labels = [f"{r['case']} n={r.get('n')} {r['dtype']}" for r in rows]
    floor = [r["host_link_bytes_per_second"] / (2 * np.dtype(r["dtype"]).itemsize) for r in rows]
    bars = ax.barh(labels, [100 * r["items_per_second"] / f for r, f in zip(rows, floor)])
    ax.bar_label(bars, fmt="%.2g %%", padding=3)
    ax.axvline(100, color="k", lw=0.8)
    ax.set(xlabel="% of the host-link floor (bandwidth / (2 x key bytes) keys/s)",
           title="out-of-core sorts against the host link")
    return {"": fig}


def _machine_tag(machine: dict) -> str:
    """A machine in a few words: its first GPU, or its CPU count."""
    return (machine.get("gpus") or [f"{machine.get('cpus')} CPUs"])[0]


def _machine(rows: list[dict]) -> str:
    machines = {json.dumps(r["machine"], sort_keys=True) for r in rows}
    m = rows[0]["machine"]
    text = f"{m.get('cpus')} CPUs ({m.get('cpu')}), GPUs: {', '.join(m.get('gpus') or []) or 'none'}"
    others = len(machines) - 1
    return text + (f" (+{others} other machine{'s' * (others > 1)})" if others else "")


PLOTS: dict[str, Callable[[list[dict]], dict[str, Figure]]] = {
    "throughput": throughput, "phases": phases, "skew": skew, "splitters": splitters,
    "gpus": gpus, "host_link": host_link,
}

if __name__ == "__main__":
    raise SystemExit(main())
