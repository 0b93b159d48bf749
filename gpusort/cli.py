"""The ``gpusort`` command: sort and verify Zarr arrays, run benchmarks, describe the setup.

``gpusort sort`` and ``gpusort verify`` compute where ``--cluster`` says
(:func:`gpusort.runtime.cluster`: a new ``LocalCluster``, a new
``LocalCUDACluster``, one process over every GPU, Dask's threaded scheduler,
or a running scheduler); ``auto`` is ``cuda`` where CuPy, dask-cuda and a GPU
are present, else ``local``.  Also ``python -m gpusort``.

User errors -- a missing path, an unsortable dtype, a clashing option, an
unknown ``--cluster``, a full disk -- and setup errors -- a GPU asked for
where CuPy, dask-cuda or a GPU is missing -- end with one line on stderr,
naming the flags and the fix, and exit status 2, never a traceback; Ctrl-C
ends with one line and exit status 130; a reader that stops reading
(``gpusort info | head -1``) ends it quietly, with status 141; ``gpusort
verify`` exits 1 when the check fails.  Errors raised while computing are
not the user's and keep their traceback.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import difflib
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from gpusort import runtime
from gpusort.backends import BACKENDS

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
  gpusort sort keys.zarr sorted.zarr --chunk-size 1048576 --argsort-dst order.zarr
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
    "compile": """\
Every kernel module gpusort can ask for, for each GPU seen, compiled at once
on every core into CuPy's kernel cache (CUPY_CACHE_DIR, ~/.cupy/kernel_cache
by default), so that no first call in any later process compiles.

example:
  gpusort compile""",
}


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
    command = "gpusort"
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit:
            sys.stdout.flush()  # --help and --version print, then exit
            raise
        command = f"gpusort {args.command}"
        status = args.run(args)
        sys.stdout.flush()  # a reader gone away shows here, not as Python exits
        return status
    except BrokenPipeError:
        # The reader stopped reading (`gpusort info | head -1`): end quietly, with the
        # status of a program that SIGPIPE ended, as the tools around it do.
        _discard_stdout()
        return BROKEN_PIPE
    except ImportError as exc:
        if exc.name is None or exc.name.partition(".")[0] not in GPU_MODULES:
            raise
        # A GPU package missing where the work ran (a worker of a running cluster, say).
        print(f"{command}: error: cannot import {exc.name} where this ran ({exc}): {runtime._INSTALL_GPU}",
              file=sys.stderr)
        return 2
    except (UserError, OSError) as exc:
        # These name the argument (or file) and the fix; a traceback adds nothing.
        print(f"{command}: error: {runtime.flags(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{command}: interrupted", file=sys.stderr)
        return 130


#: The exit status after a broken pipe: 128 + SIGPIPE, as a shell reports a program SIGPIPE ended.
BROKEN_PIPE = 141
#: Packages of the GPU extras (``pip install 'gpusort[cuda12]'``): missing, they are a setup error.
GPU_MODULES = ("cupy", "cupyx", "cupy_backends", "dask_cuda", "rmm", "ucxx", "distributed_ucxx")


def _discard_stdout() -> None:
    """Point this process's stdout at ``os.devnull``: what is still buffered for it is dropped quietly.

    Python flushes stdout as it exits, and a flush into the broken pipe would
    print an "Exception ignored" message.  Only the process's own stdout: a
    replaced ``sys.stdout`` (a caller capturing it) is left alone.
    """
    if sys.stdout is not sys.__stdout__:
        return
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``gpusort`` and its subcommands."""
    # allow_abbrev=False: argparse would take --chunk for --chunk-size, and any prefix of a
    # future option for today's, silently.
    parser = argparse.ArgumentParser(
        prog="gpusort", allow_abbrev=False,
        description="Sort arrays larger than GPU memory with Dask: Zarr to Zarr, verified.",
        epilog=EXAMPLES["gpusort"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gpusort {runtime.version('gpusort')}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Command)

    on_dask = argparse.ArgumentParser(add_help=False, allow_abbrev=False)  # options of the commands that compute
    runtime.add_options(on_dask)
    on_dask.add_argument("--quiet", action="store_true", help="no progress bars (the summary is still printed)")

    def command(name: str, help: str, computes: bool = False) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help, description=help, epilog=EXAMPLES[name], allow_abbrev=False,
                                   parents=[on_dask] if computes else [],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)

    sort = command("sort", "Sort the 1-D Zarr array SRC into a new Zarr array DST.", computes=True)
    sort.add_argument("src", metavar="SRC", help="the keys: path of a 1-D Zarr array (format 3 or 2)")
    sort.add_argument("dst", metavar="DST", help="path of the sorted Zarr array to create")
    sort.add_argument("--chunk-size", type=runtime.count, metavar="N",
                      help="output chunk length in elements (default: as many chunks as SRC)")
    sort.add_argument("--chunks", action=_Refused, help=argparse.SUPPRESS,  # --chunk-size's old name
                      why="the output chunk length is --chunk-size N; --chunks, a number of chunks in the "
                          "workflows and benchmarks, is not an option here")
    sort.add_argument("--descending", action="store_true", help="largest first (NaN still last)")
    sort.add_argument(
        "--gpu-memory-budget", type=runtime.size, metavar="SIZE",
        help="the most GPU memory each worker's sort steps may hold (e.g. 8GiB); with --backend cupy",
    )
    sort.add_argument("--backend", choices=BACKENDS,
                      help="where runs are sorted and merged (default: cupy where a GPU is seen, else numpy)")
    sort.add_argument("--argsort-dst", metavar="PATH",
                      help="also write the stable int64 positions that sort SRC to this Zarr array")
    sort.add_argument("--overwrite", action="store_true", help="replace DST (and --argsort-dst) if they exist")
    sort.add_argument("--temp-dir", type=_directory, metavar="DIR",
                      help="where the sorted runs wait on disk between the phases, about the size of SRC "
                           "(default: a hidden folder beside DST); implies --runs disk under auto")
    sort.add_argument("--runs", choices=("auto", "memory", "disk"), default="auto",  # zarr_io.RUNS, without Zarr
                      help="where the sorted runs wait: in the workers' memory (keys cross the disk twice), on "
                           "disk (any size, four crossings), or auto: memory where three copies of the keys fill "
                           "at most half the workers' memory (default: %(default)s)")
    sort.set_defaults(run=_run_sort)

    verify = command("verify", "Check that the Zarr array DST is the Zarr array SRC sorted.", computes=True)
    verify.add_argument("src", metavar="SRC", help="path of the unsorted Zarr array")
    verify.add_argument("dst", metavar="DST", help="path of its sorted copy")
    verify.add_argument("--descending", action="store_true", help="DST should be largest first")
    verify.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto",
                        help="where host chunks are checked (default: auto, a worker's GPU when it has one)")
    verify.set_defaults(run=_run_verify)

    bench = command("bench", "Run a benchmark, or plot benchmark results.")
    bench.add_argument("name", metavar="NAME|list|plot", help="a benchmark name, list, or plot")
    bench.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the benchmark")
    bench.set_defaults(run=_run_bench)

    info = command("info", "Print versions, the GPUs seen and the defaults that follow.")
    info.set_defaults(run=_run_info)

    compile_ = command("compile", "Compile every kernel into CuPy's cache, on every core (once a machine).")
    compile_.add_argument("--threads", type=runtime.count, metavar="N", help="compiler threads (default: cores)")
    compile_.set_defaults(run=_run_compile)
    return parser


class _Command(argparse.ArgumentParser):
    """A subcommand's parser: an argument it does not know is its own error.

    argparse hands a subcommand's unknown arguments back to the ``gpusort``
    parser, whose error shows the top-level usage line and no hint.  Here the
    subcommand's usage line shows, with the option nearest to the first one
    unknown (``--chunk``: did you mean ``--chunk-size``?).
    """

    def parse_known_args(self, args: Sequence[str] | None = None,
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}{_nearest_option(self, extras)}")
        return namespace, extras


def _nearest_option(parser: argparse.ArgumentParser, extras: Sequence[str]) -> str:
    """``"; did you mean --x?"`` for the first of ``extras`` that looks like a mistyped option of ``parser``."""
    shown = [o for a in parser._actions if a.help != argparse.SUPPRESS for o in a.option_strings]
    for word in extras:
        if word.startswith("--"):
            near = difflib.get_close_matches(word.partition("=")[0], shown, n=1)
            if near:
                return f"; did you mean {near[0]}?"
    return ""


class _Refused(argparse.Action):
    """An option that is refused with ``why``: a name that meant something else once, say."""

    def __init__(self, option_strings: list[str], dest: str, why: str, **kwargs: Any):
        super().__init__(option_strings, dest, **kwargs)
        self.why = why

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        raise argparse.ArgumentError(self, self.why)


def _directory(text: str) -> Path:
    if not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is not a directory; create it first")
    return Path(text)


# --- sort and verify ---------------------------------------------------------------------


def _run_sort(args: argparse.Namespace) -> int:
    from gpusort.zarr_io import prepare_sort

    _checked(runtime.resolve, args.cluster)  # a misspelt --cluster fails before any work
    backend = args.backend or runtime.default_backend()
    job = _checked(prepare_sort, args.src, args.dst, chunks=args.chunk_size, descending=args.descending,
                   backend=backend, argsort_dst=args.argsort_dst, overwrite=args.overwrite,
                   gpu_memory_budget=args.gpu_memory_budget, temp_dir=args.temp_dir,
                   runs=args.runs)  # every check before a cluster starts, and once
    with _cluster(args), runtime.progress():
        start = time.perf_counter()
        job.run(progress=not args.quiet)
        seconds = time.perf_counter() - start
    x = job.keys
    n = x.shape[0]
    print(f"sorted {n} {x.dtype} keys ({backend} backend) from {args.src} into {args.dst}"
          f"{' and ' + args.argsort_dst if args.argsort_dst else ''} in {seconds:.2f} s "
          f"({n / seconds / 1e6:.1f} Mkeys/s)")
    return 0


def _run_verify(args: argparse.Namespace) -> int:
    from gpusort.verification import check_pair, verify

    kind = _checked(runtime.resolve, args.cluster)
    _checked(check_pair, args.src, args.dst)  # fail before a cluster starts
    if args.device == "gpu" and kind != "address":  # the workers run here: the GPU probe answers for them
        names, why = runtime.gpus()
        if not names:
            raise UserError(f"--device gpu needs CuPy and a CUDA GPU, and here {why}; or use --device cpu")
    with _cluster(args), runtime.progress():
        report = verify(args.src, args.dst, descending=args.descending, device=args.device,
                        progress=not args.quiet)
    print(report)
    return 0 if report.ok else 1


def _checked(check: Any, *args: Any, **kwargs: Any) -> Any:
    """``check(*args, **kwargs)``; the ValueError or TypeError of a bad argument becomes a UserError."""
    try:
        return check(*args, **kwargs)
    except (ValueError, TypeError) as exc:
        raise UserError(str(exc)) from exc


@contextlib.contextmanager
def _cluster(args: argparse.Namespace) -> Iterator[Any]:
    """:func:`gpusort.runtime.cluster` as the options say; a cluster that cannot start is a UserError."""
    with contextlib.ExitStack() as stack:
        # Both commands that compute read Zarr arrays, and sort writes one.
        yield _checked(stack.enter_context, runtime.from_options(args, dashboard=not args.quiet, codecs=True))


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


def _run_compile(args: argparse.Namespace) -> int:
    names, why = runtime.gpus()
    if not names:
        raise UserError(f"compile needs CuPy and a CUDA GPU, and here {why}")
    from gpusort.cuda import build

    for device in range(len(names)):
        start = time.perf_counter()
        modules = build.precompile(args.threads, device)
        print(f"GPU {device} ({names[device]}): {modules} kernel modules in {time.perf_counter() - start:.1f} s")
    return 0


# --- info ----------------------------------------------------------------------------------


def _run_info(args: argparse.Namespace) -> int:
    env = runtime.environment()
    for module, version in env["versions"].items():
        print(f"{module:12} {version or 'not installed'}")
    machine = env["machine"]
    print(f"{'python':12} {machine['python']}")
    print(f"{'cpus':12} {machine['cpus']} ({machine['cpu']})")
    print(f"{'gpus':12} {', '.join(machine['gpus']) or 'none: ' + machine['gpus_missing']}")
    print(f"{'backend':12} {runtime.default_backend()} (gpusort sort's default)")
    missing = runtime.cuda_cluster_missing()
    print(f"{'cluster':12} {'local' if missing else 'cuda'} (--cluster auto{'; not cuda: ' + missing if missing else ''})")
    return 0
