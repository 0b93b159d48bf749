"""Memory: the GPU memory plan of a sort, pinned host staging and pools, spill files.

* :mod:`~gpusort.memory.plan`: GPU memory budgets, step sizes, pieces that fit;
* :mod:`~gpusort.memory.staging`: pinned host staging, the budgeted GPU pool;
* :mod:`~gpusort.memory.hostpool`: the run pool's and the host cache's allocators;
* :mod:`~gpusort.memory.spill`: the exchange's arrays in files under a memory limit.
"""
