"""gpusort's public front-ends: the array functions, ``merge`` and DataFrames.

* :mod:`~gpusort.front.api`: ``sort``, ``argsort``, ``lexsort``, ``sort_by_key``, ``topk``,
  ``searchsorted``, ``unique``: argument checks, then the graph;
* :mod:`~gpusort.front.sorted_merge`: ``merge`` and ``merge_by_key`` of sorted arrays;
* :mod:`~gpusort.front.dataframe`: ``sort_values`` of Dask DataFrames.

Users call them by :mod:`gpusort`'s names; the front-ends users import by path
(:mod:`gpusort.zarr_io`, :mod:`gpusort.verification`, :mod:`gpusort.gpu`) stay there.
"""
