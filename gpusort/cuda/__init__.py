"""gpusort's CUDA mergesort kernels (``kernels/``), compiled through CuPy and launched.

Layered as in Modern GPU and CUB, one idea a module, each importing only
the ones above it in this list:

* :mod:`~gpusort.cuda.tuning`: the types the kernels are instantiated for,
  the (architecture, key size, value size) -> (NT, VT) table and the shapes
  of every pass;
* :mod:`~gpusort.cuda.build`: the CUDA sources compiled with NVRTC and
  loaded, once per (device, key type, value width, order);
* :mod:`~gpusort.cuda.launch`: thin launchers, one kernel each;
* :mod:`~gpusort.cuda.buckets`: the bucket pass that large keys-only sorts
  begin with;
* :mod:`~gpusort.cuda.dispatch`: the host dispatchers (``mergesort``,
  ``packed_argsort``, ``exact_sort``, ``merge``, ``merge_tree``).

The package imports without CuPy; only compiling and launching need it.
"""
