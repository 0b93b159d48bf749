"""The GPU cluster the workflows start: dask-cuda's LocalCUDACluster with gpusort's options.

Shared by ``out_of_core_sort.py`` and ``multi_gpu_scaling.py`` (copy it along
with them).  Imports nothing GPU-related until a cluster is started, so
``--help`` works anywhere and a missing CuPy or dask-cuda is one clear line.

The levers, each an option:

``--gpus``                 which GPUs: a count or a list such as ``0,1`` (default: all)
``--protocol``             ``tcp`` (always works) or ``ucx`` (NVLink between GPUs, where
                           distributed-ucxx is installed)
``--gpu-memory-budget``    per worker, what gpusort's out-of-core steps may hold on the GPU
``--device-memory-limit``  per worker, when dask-cuda spills GPU-resident chunks to host
``--rmm-pool-size``        an RMM pool per worker; CuPy (and so gpusort) then allocates from it
``--threads``              threads per worker: concurrent tasks overlap copies with kernels
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
from typing import Any, Iterator


class MissingGpuStack(SystemExit):
    """CuPy, dask-cuda or a GPU is missing: the message says what to install."""


def add_options(parser: argparse.ArgumentParser, *, budget: str | None = "2GiB") -> None:
    group = parser.add_argument_group("GPU cluster (dask-cuda LocalCUDACluster)")
    group.add_argument("--gpus", default=None,
                       help="GPUs to use: a count (2) or device ids (0,1) (default: all)")
    group.add_argument("--protocol", choices=("tcp", "ucx"), default="tcp",
                       help="worker-to-worker transport; ucx needs distributed-ucxx (default: %(default)s)")
    group.add_argument("--threads", type=int, default=4,
                       help="threads per worker (default: %(default)s)")
    group.add_argument("--gpu-memory-budget", default=budget,
                       help="GPU memory per worker for sorting host chunks, e.g. 2GiB (default: %(default)s)")
    group.add_argument("--device-memory-limit", default="default",
                       help="dask-cuda: spill GPU-resident chunks to host above this per worker "
                            "(default: dask-cuda's, 80%% of the GPU)")
    group.add_argument("--rmm-pool-size", default=None,
                       help="an RMM pool of this size per worker, used by CuPy too (needs rmm)")


def require_gpu_stack(protocol: str = "tcp") -> None:
    """Exit with one clear line if CuPy, dask-cuda, a GPU (or UCX for ``protocol='ucx'``) is missing."""
    missing = [m for m in ("cupy", "dask_cuda") if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingGpuStack(
            f"this workflow needs {' and '.join(missing)}: pip install 'gpusort[cuda13]' "
            "(or [cuda12]) on a machine with an NVIDIA GPU"
        )
    import cupy

    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver, or a CuPy built for another CUDA
        raise MissingGpuStack(f"CuPy finds no CUDA GPU ({type(exc).__name__}: {exc})") from None
    if count == 0:
        raise MissingGpuStack("CuPy finds no CUDA GPU")
    if protocol == "ucx" and importlib.util.find_spec("distributed_ucxx") is None:
        raise MissingGpuStack("--protocol ucx needs distributed-ucxx (pip install distributed-ucxx-cu13); "
                              "or use --protocol tcp")


def visible_devices(gpus: str | None) -> str | None:
    """``--gpus`` as CUDA_VISIBLE_DEVICES: ``"2"`` means the first two GPUs, ``"0,3"`` those two."""
    if gpus is None:
        return None
    if "," not in gpus:
        return ",".join(str(i) for i in range(int(gpus)))
    return gpus


@contextlib.contextmanager
def cuda_client(args: argparse.Namespace, gpus: str | None = None) -> Iterator[Any]:
    """A client on a fresh LocalCUDACluster configured from :func:`add_options`' options."""
    require_gpu_stack(args.protocol)
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # never NVLink multicast on shared machines
    from dask_cuda import LocalCUDACluster
    from distributed import Client

    options: dict[str, Any] = dict(
        CUDA_VISIBLE_DEVICES=visible_devices(gpus if gpus is not None else args.gpus),
        threads_per_worker=args.threads,
        protocol=args.protocol,
        device_memory_limit=args.device_memory_limit,
        dashboard_address=":0",
    )
    if args.rmm_pool_size:
        if importlib.util.find_spec("rmm") is None:
            raise MissingGpuStack("--rmm-pool-size needs rmm: pip install rmm-cu13 (or -cu12)")
        options.update(rmm_pool_size=args.rmm_pool_size, rmm_allocator_external_lib_list=["cupy"])
    cluster = LocalCUDACluster(**options)
    try:
        with Client(cluster) as client:
            client.wait_for_workers(len(cluster.workers))
            yield client
            client.run(_release_pinned)  # tens of GiB to unmap would outlast the nanny's patience
    finally:
        try:
            cluster.close(timeout=60)
        except Exception as exc:  # a nanny that had to kill its slow-exiting worker: the work is done
            print(f"(cluster close: {type(exc).__name__}: {exc})")


def _release_pinned() -> None:
    import cupy

    cupy.get_default_pinned_memory_pool().free_all_blocks()
