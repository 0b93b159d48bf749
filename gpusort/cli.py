"""The ``gpusort`` command: sort and verify Zarr arrays, run benchmarks, describe the setup.

``gpusort sort`` and ``gpusort verify`` run on a Dask cluster they start
(``--cluster local``: ``distributed.LocalCluster``; ``cuda``: dask-cuda's
``LocalCUDACluster``, one worker per GPU), on one they join (an address), or
on Dask's threaded scheduler in this process (``threads``).  The default,
``auto``, is ``cuda`` where a GPU and dask-cuda are installed, else ``local``.

User errors -- a missing path, an unsortable dtype, a clashing option, a
full disk -- end with one line on stderr and exit status 2, never a
traceback; ``gpusort verify`` exits 1 when the check fails.  Errors raised
while computing are not the user's and keep their traceback.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import importlib.metadata
import importlib.util
import platform
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

_MAKE_KEYS = (
    "python -c \"import numpy as np, zarr; zarr.create_array('keys.zarr', "
    "data=np.random.default_rng(0).integers(0, 2**40, 2**22), chunks=(2**18,))\""
)
EXAMPLES = {
    "gpusort": f"""\
example (2^22 random int64 keys, sorted and checked on a local cluster):
  {_MAKE_KEYS}
  gpusort sort keys.zarr sorted.zarr
  gpusort verify keys.zarr sorted.zarr
  gpusort info
  gpusort bench list""",
    "sort": f"""\
examples:
  {_MAKE_KEYS}
  gpusort sort keys.zarr sorted.zarr --chunks 1048576 --argsort-dst order.zarr
  gpusort sort keys.zarr sorted-desc.zarr --descending --cluster threads --quiet
  gpusort sort keys.zarr sorted.zarr --overwrite --cluster cuda --backend cupy --gpu-memory-budget 8GiB""",
    "verify": f"""\
exit status: 0 when DST is SRC sorted, 1 when not (what failed and where is
printed), 2 for bad arguments.

example:
  {_MAKE_KEYS}
  gpusort sort keys.zarr sorted.zarr && gpusort verify keys.zarr sorted.zarr""",
    "bench": """\
NAME is a benchmark (gpusort bench list shows them) or "plot"; the arguments
after it go to that benchmark (gpusort bench NAME --help lists them).

examples:
  gpusort bench list
  gpusort bench e2e --out results --repeat 3
  gpusort bench plot results/*.json --out results/plots""",
    "info": """\
example:
  gpusort info""",
}

# Modules whose versions `gpusort info` prints and the benchmarks record.
_VERSIONED = ("gpusort", "numpy", "dask", "distributed", "zarr", "cupy", "dask_cuda",
              "pandas", "pyarrow", "torch")


class UserError(Exception):
    """A mistake in the command line: reported in one line, exit status 2."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``gpusort`` command line; the exit status.

    Examples
    --------
    >>> main(["info"])  # doctest: +ELLIPSIS
    gpusort ...
    0
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (UserError, OSError) as exc:
        # These name the argument (or file) and the fix; a traceback adds nothing.
        print(f"gpusort {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"gpusort {args.command}: interrupted", file=sys.stderr)
        return 130


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``gpusort`` and its subcommands."""
    parser = argparse.ArgumentParser(
        prog="gpusort",
        description="Sort arrays larger than GPU memory with Dask: Zarr to Zarr, verified.",
        epilog=EXAMPLES["gpusort"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gpusort {_version('gpusort')}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    on_dask = argparse.ArgumentParser(add_help=False)  # options of the commands that compute
    on_dask.add_argument(
        "--cluster", default="auto", metavar="auto|local|cuda|threads|ADDRESS",
        help="where to compute: a new LocalCluster (local), a new LocalCUDACluster (cuda), Dask's "
             "threaded scheduler in this process (threads), or a running scheduler's address "
             "(tcp://host:8786); auto picks cuda where a GPU and dask-cuda are installed, else local",
    )
    on_dask.add_argument("--quiet", action="store_true", help="no progress bars and no summary")

    def command(name: str, help: str, computes: bool = False) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help, description=help, epilog=EXAMPLES[name],
                                   parents=[on_dask] if computes else [],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)

    sort = command("sort", "Sort the 1-D Zarr array SRC into a new Zarr array DST.", computes=True)
    sort.add_argument("src", metavar="SRC", help="the keys: path of a 1-D Zarr array (format 3 or 2)")
    sort.add_argument("dst", metavar="DST", help="path of the sorted Zarr array to create")
    sort.add_argument("--chunks", type=count, metavar="N",
                      help="output chunk length in elements (default: as many chunks as SRC)")
    sort.add_argument("--descending", action="store_true", help="largest first (NaN still last)")
    sort.add_argument(
        "--gpu-memory-budget", type=_size, metavar="SIZE",
        help="the most GPU memory each worker's sort steps may hold (e.g. 8GiB); with --backend cupy",
    )
    sort.add_argument("--backend", choices=("numpy", "cupy"),
                      help="where runs are sorted and merged (default: cupy where a GPU is seen, else numpy)")
    sort.add_argument("--argsort-dst", metavar="PATH",
                      help="also write the stable int64 positions that sort SRC to this Zarr array")
    sort.add_argument("--overwrite", action="store_true", help="replace DST (and --argsort-dst) if they exist")
    sort.set_defaults(run=_run_sort)

    verify = command("verify", "Check that the Zarr array DST is the Zarr array SRC sorted.", computes=True)
    verify.add_argument("src", metavar="SRC", help="path of the unsorted Zarr array")
    verify.add_argument("dst", metavar="DST", help="path of its sorted copy")
    verify.add_argument("--descending", action="store_true", help="DST should be largest first")
    verify.set_defaults(run=_run_verify)

    bench = command("bench", "Run a benchmark, or plot benchmark results.")
    bench.add_argument("name", metavar="NAME|list|plot", help="a benchmark name, list, or plot")
    bench.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the benchmark")
    bench.set_defaults(run=_run_bench)

    info = command("info", "Print versions, the GPUs seen and the defaults that follow.")
    info.set_defaults(run=_run_info)
    return parser


def _size(text: str) -> int:
    from dask.utils import parse_bytes

    try:
        size = parse_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size; write e.g. 8GiB, 512MB or 1000000000") from exc
    if size <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the size must be positive")
    return size


def count(text: str) -> int:
    """A positive whole number as people write element counts: ``1048576``, ``1e9`` or ``2**20``.

    Examples
    --------
    >>> count("2**20"), count("1e9"), count("33554432")
    (1048576, 1000000000, 33554432)
    """
    try:
        base, _, power = text.partition("**")
        value = int(base) ** int(power) if power else float(text)
        if value != int(value):
            raise ValueError
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (e.g. 1048576, 1e9 or 2**20)") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be at least 1")
    return int(value)


# --- sort and verify ---------------------------------------------------------------------


def _run_sort(args: argparse.Namespace) -> int:
    from gpusort.zarr_io import _prepare, sort_zarr

    backend = args.backend or default_backend()
    kwargs = {"chunks": args.chunks, "descending": args.descending, "backend": backend,
              "argsort_dst": args.argsort_dst, "overwrite": args.overwrite,
              "gpu_memory_budget": args.gpu_memory_budget}
    x, *_ = _checked(_prepare, args.src, args.dst, **kwargs)  # fail before a cluster starts
    with scheduler(args.cluster, args.quiet):
        start = time.perf_counter()
        sort_zarr(args.src, args.dst, progress=not args.quiet, **kwargs)
        seconds = time.perf_counter() - start
    if not args.quiet:
        n = x.shape[0]
        print(f"sorted {n} {x.dtype} keys ({backend} backend) from {args.src} into {args.dst}"
              f"{' and ' + args.argsort_dst if args.argsort_dst else ''} in {seconds:.2f} s "
              f"({n / seconds / 1e6:.1f} Mkeys/s)")
    return 0


def _run_verify(args: argparse.Namespace) -> int:
    from gpusort.verify import check_pair, verify

    _checked(check_pair, args.src, args.dst)  # fail before a cluster starts
    with scheduler(args.cluster, args.quiet):
        report = verify(args.src, args.dst, descending=args.descending, progress=not args.quiet)
    print(report)
    return 0 if report.ok else 1


def _checked(check: Any, *args: Any, **kwargs: Any) -> Any:
    """``check(*args, **kwargs)``; the ValueError or TypeError of a bad argument becomes a UserError."""
    try:
        return check(*args, **kwargs)
    except (ValueError, TypeError) as exc:
        raise UserError(str(exc)) from exc


@contextlib.contextmanager
def scheduler(cluster: str = "auto", quiet: bool = False) -> Iterator[Any]:
    """Make the cluster that ``--cluster`` names Dask's current scheduler; yields its client.

    ``cluster`` is ``"auto"``, ``"local"``, ``"cuda"``, ``"threads"`` (no
    cluster: yields ``None``) or a scheduler address.  Clusters started here
    are closed on exit.  Unless ``quiet``, the dashboard address is printed.

    Examples
    --------
    >>> import dask.array as da
    >>> with scheduler("threads") as client:
    ...     int(da.arange(10, chunks=5).sum().compute())
    45
    """
    kind = cluster
    if kind == "auto":
        kind = "cuda" if gpu_names()[0] and importlib.util.find_spec("dask_cuda") else "local"
    if kind == "threads":
        yield None
        return
    from distributed import Client, LocalCluster

    if kind == "local":
        started = LocalCluster()
    elif kind == "cuda":
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError as exc:
            raise UserError(
                "--cluster cuda needs dask-cuda: pip install 'gpusort[cuda12]' (or [cuda13]); "
                "or use --cluster local"
            ) from exc
        started = LocalCUDACluster()
    else:
        started = None  # an address: join that scheduler
    with contextlib.ExitStack() as stack:
        if started is not None:
            stack.enter_context(started)
        try:
            client = stack.enter_context(Client(started or kind, timeout="10s"))
        except OSError as exc:
            raise UserError(f"--cluster {kind}: no Dask scheduler answers there ({exc})") from exc
        if not quiet:
            print(f"dask dashboard: {client.dashboard_link}", file=sys.stderr)
        yield client


# --- bench ---------------------------------------------------------------------------------


def bench_dir() -> Path:
    """Where the benchmark files are: in the wheel, or in the source checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_benchmarks", here.parent / "benchmarks"):
        if (candidate / "harness.py").is_file():
            return candidate
    raise UserError(f"no benchmarks found (looked in {here / '_benchmarks'} and {here.parent / 'benchmarks'})")


def benchmarks() -> dict[str, Path]:
    """Benchmark names (``bench_NAME.py``, plus ``plot``) and their files."""
    folder = bench_dir()
    found = {p.stem.removeprefix("bench_"): p for p in sorted(folder.glob("bench_*.py"))}
    if (folder / "plot.py").is_file():
        found["plot"] = folder / "plot.py"
    return found


def _run_bench(args: argparse.Namespace) -> int:
    found = benchmarks()
    if args.name == "list":
        for name, path in found.items():
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            print(f"{name:12}  {doc.strip().splitlines()[0] if doc.strip() else ''}")
        return 0
    if args.name not in found:
        raise UserError(f"no benchmark {args.name!r}; choose one of: {', '.join(found)} (or list)")
    # A fresh interpreter, as `python benchmarks/bench_NAME.py ARGS` would be:
    # the file's folder lands on sys.path, so `from harness import ...` works.
    return subprocess.call([sys.executable, str(found[args.name]), *args.args])


# --- info ----------------------------------------------------------------------------------


def _run_info(args: argparse.Namespace) -> int:
    env = environment()
    for module, version in env["versions"].items():
        print(f"{module:12} {version or 'not installed'}")
    machine = env["machine"]
    print(f"{'python':12} {machine['python']}")
    print(f"{'cpus':12} {machine['cpus']} ({machine['cpu']})")
    gpus, why = gpu_names()
    print(f"{'gpus':12} {', '.join(gpus) if gpus else 'none: ' + why}")
    print(f"{'backend':12} {default_backend()} (gpusort sort's default)")
    cluster = "cuda" if gpus and env["versions"]["dask_cuda"] else "local"
    print(f"{'cluster':12} {cluster} (--cluster auto)")
    return 0


def default_backend() -> str:
    """``"cupy"`` where CuPy sees a GPU, else ``"numpy"``."""
    return "cupy" if gpu_names()[0] else "numpy"


def gpu_names() -> tuple[list[str], str]:
    """(names of the GPUs CuPy sees, why there are none)."""
    if importlib.util.find_spec("cupy") is None:
        return [], "cupy is not installed"
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
        names = [cupy.cuda.runtime.getDeviceProperties(i)["name"].decode() for i in range(count)]
    except Exception as exc:  # a CuPy built for another CUDA, no driver, ...
        return [], f"CuPy finds no CUDA device ({type(exc).__name__}: {exc})"
    return names, "" if names else "CuPy finds no CUDA device"


def environment() -> dict[str, Any]:
    """Versions and machine facts, as ``gpusort info`` prints and benchmarks record.

    Examples
    --------
    >>> env = environment()
    >>> sorted(env), env["versions"]["numpy"] is not None
    (['machine', 'versions'], True)
    """
    import dask.system
    import distributed.system

    gpus, why = gpu_names()
    machine = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": dask.system.CPU_COUNT,
        "cpu": _cpu_model(),
        "memory_bytes": distributed.system.MEMORY_LIMIT,
        "gpus": gpus,
    }
    if not gpus:
        machine["gpus_missing"] = why
    return {"versions": {m: _version(m) for m in _VERSIONED}, "machine": machine}


def _version(module: str) -> str | None:
    """The installed version of ``module``, without importing it where possible."""
    if importlib.util.find_spec(module) is None:
        return None
    dists = _distributions().get(module)
    if dists:
        return importlib.metadata.version(dists[0])
    # Not installed as a distribution, e.g. gpusort run from its source checkout.
    return getattr(__import__(module), "__version__", "unknown")


@functools.cache
def _distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"
