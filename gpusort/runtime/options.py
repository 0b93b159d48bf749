"""The command-line options of a cluster, and numbers as people type them.

:func:`add_options` adds the options of :func:`gpusort.runtime.clusters.cluster`
to a parser and :func:`from_options` starts what they say, so the ``gpusort``
command, the benchmarks and the workflows take the same options;
:func:`count` and :func:`size` read element counts and byte sizes as people
write them; :func:`flags` spells the library's argument names in its
messages as the flags that set them.

Nothing here imports CuPy, dask-cuda or distributed until it is asked for
something that needs them.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import re
from collections.abc import Iterator
from typing import Any

from gpusort.runtime.clusters import _TAKES, cluster, codec_threads, resolve


def count(text: str) -> int:
    """A positive whole number as people write element counts: ``1048576``, ``1e9`` or ``2**20``.

    An ``argparse`` type.

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


def size(text: str, *, zero: bool = False) -> int:
    """A number of bytes as people write it: ``8GiB``, ``512MB``, ``1000000000``; ``zero``: 0 allowed.

    An ``argparse`` type.

    Examples
    --------
    >>> size("2GiB"), size("0", zero=True)
    (2147483648, 0)
    """
    from dask.utils import parse_bytes

    try:
        value = parse_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size; write e.g. 8GiB, 512MB or 1000000000") from exc
    if value < 0 or (value == 0 and not zero):
        raise argparse.ArgumentTypeError(f"{text!r}: the size must be positive")
    return value


def add_options(parser: argparse.ArgumentParser, *, gpu: bool = False) -> None:
    """Add the options of :func:`cluster` to ``parser``: ``--cluster``, ``--workers``, ``--threads``,
    ``--memory-limit``, and with ``gpu`` also ``--gpus``, ``--protocol``, ``--rmm-pool-size`` and
    ``--device-memory-limit``.  :func:`from_options` starts what they say.
    Make ``parser`` with ``allow_abbrev=False``, as every parser of gpusort's
    is: else argparse silently takes ``--worker 2`` for ``--workers 2``.

    Examples
    --------
    >>> p = argparse.ArgumentParser(allow_abbrev=False)
    >>> add_options(p)
    >>> vars(p.parse_args(["--cluster", "local", "--workers", "2"]))
    {'cluster': 'local', 'workers': 2, 'threads': None, 'memory_limit': None}
    """
    group = parser.add_argument_group("where to compute")
    group.add_argument(
        "--cluster", default="auto", metavar="auto|local|cuda|process|threads|ADDRESS",
        help="a new LocalCluster (local), a new LocalCUDACluster, one worker per GPU (cuda), one worker "
             "process over every GPU (process), Dask's threaded scheduler in this process (threads), or a "
             "running scheduler's address (tcp://host:8786); auto: cuda where CuPy, dask-cuda and a GPU "
             "are present, else local (default: %(default)s)")
    group.add_argument("--workers", type=count, metavar="N",
                       help="worker processes of a new cluster (default: Dask's; cuda: one per GPU)")
    group.add_argument("--threads", type=count, metavar="N",
                       help="threads per worker, or in all with --cluster threads (default: Dask's; cuda: 4)")
    group.add_argument("--memory-limit", type=functools.partial(size, zero=True), metavar="SIZE",
                       help="host memory per worker of a new cluster, e.g. 16GiB; 0: no limit "
                            "(default: Dask's, the machine's memory shared by the workers)")
    if gpu:
        group.add_argument("--gpus", metavar="N|IDS", help="GPUs to use: a count (2) or device ids (0,3) (default: all)")
        group.add_argument("--protocol", choices=("tcp", "ucx"),
                           help="transport between workers; ucx needs distributed-ucxx (default: tcp)")
        group.add_argument("--rmm-pool-size", type=size, metavar="SIZE",
                           help="cuda: an RMM pool per worker, which CuPy allocates from too (needs rmm)")
        group.add_argument("--device-memory-limit", type=size, metavar="SIZE",
                           help="cuda: spill GPU-resident chunks to host above this per worker "
                                "(default: dask-cuda's)")


@contextlib.contextmanager
def from_options(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None, *,
                 codecs: bool = False, **overrides: Any) -> Iterator[Any]:
    """:func:`cluster` as the options of :func:`add_options` in ``args`` say, ``overrides`` winning.

    With ``parser``, a cluster that cannot start (the ValueError of
    :func:`cluster`) exits the program with status 2 and the reason in one
    line, naming flags (:func:`flags`).  ``codecs``: the work is bound by
    Zarr's codecs, not the GPU, so a new GPU cluster whose threads are not
    given runs :func:`codec_threads` a worker.
    """
    names = set().union(*_TAKES.values())  # every option some cluster kind takes
    options = {name: getattr(args, name) for name in names if hasattr(args, name)} | overrides
    kind = options.pop("kind", args.cluster)
    with contextlib.ExitStack() as stack:
        try:
            if codecs and options.get("threads") is None and resolve(kind) == "cuda":
                options["threads"] = codec_threads()
            client = stack.enter_context(cluster(kind, **options))
        except ValueError as exc:
            if parser is None:
                raise
            parser.exit(2, f"{parser.prog}: error: {flags(str(exc))}\n")
        yield client


# Python arguments, as the library's messages name them, and the flags that set them.
_FLAGS = {"kind": "--cluster", "backend": "--backend", "chunks": "--chunk-size", "descending": "--descending",
          "overwrite": "--overwrite", "argsort_dst": "--argsort-dst", "gpu_memory_budget": "--gpu-memory-budget",
          "temp_dir": "--temp-dir", "workers": "--workers", "threads": "--threads",
          "memory_limit": "--memory-limit", "gpus": "--gpus", "protocol": "--protocol",
          "rmm_pool_size": "--rmm-pool-size", "device_memory_limit": "--device-memory-limit"}


def flags(message: str) -> str:
    """``message`` with the Python arguments it names (``backend='cupy'``) spelt as flags (``--backend cupy``).

    The library's messages name its arguments; printed by a command line
    (``gpusort``, a workflow, a benchmark) they should name its flags.

    Examples
    --------
    >>> flags("gpu_memory_budget applies to backend='cupy' only")
    '--gpu-memory-budget applies to --backend cupy only'
    >>> flags("dst: /d/out.zarr exists; pass overwrite=True (gpusort sort --overwrite) to replace it")
    'dst: /d/out.zarr exists; pass --overwrite to replace it'
    >>> flags("dst: /data/argsort_dst.zarr exists; temp_dir/keys and temp_dir are paths, then an argument")
    'dst: /data/argsort_dst.zarr exists; temp_dir/keys and --temp-dir are paths, then an argument'
    """
    def flag(match: re.Match) -> str:
        name, value = match["name"] or match["bare"], (match["value"] or "").strip("'\"")
        return _FLAGS[name] + ("" if value in ("", "True") else f" {value}")

    # A name alone is an argument only where no English word is spelt so: with an underscore.
    bare = "|".join(name for name in _FLAGS if "_" in name)
    # Never inside a path: /data/argsort_dst.zarr stays a file name.
    text = re.sub(rf"(?<![\w./-])(?:(?P<name>{'|'.join(_FLAGS)})=(?P<value>'[^']*'|\"[^\"]*\"|[^\s,;:)]+)"
                  rf"|(?P<bare>{bare}))(?![\w/-]|\.\w)", flag, message)
    # The library's own hint at the flag is now said already.
    return re.sub(r" \(gpusort \w+ (--[\w-]+)\)", lambda m: "" if text.count(m[1]) > 1 else m[0], text)
