"""Where and how gpusort runs: the GPUs seen, the cluster, the machine, and what a run cost.

Everything that starts or measures a computation around the library -- the
``gpusort`` command, the benchmarks, the workflows and the tests -- goes
through this package, one idea a module:

- :mod:`gpusort.runtime.clusters`: the one GPU probe (:func:`gpus`) and the
  one cluster factory (:func:`cluster`);
- :mod:`gpusort.runtime.options`: its command-line options
  (:func:`add_options`, :func:`from_options`), counts, sizes and flags;
- :mod:`gpusort.runtime.record`: what a run cost and where it ran: the
  machine (:func:`environment`, :func:`write_json`), time by phase
  (:func:`task_costs`, keyed by :data:`gpusort.engine.graph.PHASES`), the disk's
  speed, the bytes moved between workers and progress bars.

Callers use the names here (``runtime.cluster``), which are defined there.
Nothing here imports CuPy, dask-cuda or distributed until it is asked for
something that needs them.
"""

from gpusort.runtime.clusters import (KINDS, UCX_POOL_FRACTION, _INSTALL_GPU, cluster, codec_threads,
                                      cuda_cluster_missing, dask_config, default_backend, gpus, resolve,
                                      visible_devices)
from gpusort.runtime.options import add_options, count, flags, from_options, size
from gpusort.runtime.record import (VERSIONED, _Lines, bytes_moved, disk_speed, environment, phase_of,
                                    phase_seconds, phase_timer, progress, task_costs, version, write_json)

__all__ = ["KINDS", "UCX_POOL_FRACTION", "VERSIONED", "_INSTALL_GPU", "_Lines", "add_options", "bytes_moved",
           "cluster", "codec_threads", "count", "cuda_cluster_missing", "dask_config", "default_backend",
           "disk_speed", "environment", "flags", "from_options", "gpus", "phase_of", "phase_seconds", "phase_timer",
           "progress", "resolve", "size", "task_costs", "version", "visible_devices", "write_json"]
