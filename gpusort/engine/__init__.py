"""The sort engine: Dask graphs, the exchanges between workers, splitters and what tasks do.

* :mod:`~gpusort.engine.graph`: the sort's graph, in one process or across workers;
* :mod:`~gpusort.engine.exchange`: across workers on distributed's P2P machinery;
* :mod:`~gpusort.engine.collective`, :mod:`~gpusort.engine.comms`: across GPU workers,
  one task per worker over NCCL communicators;
* :mod:`~gpusort.engine.tasks`: what a task does with chunks;
* :mod:`~gpusort.engine.along`, :mod:`~gpusort.engine.multikey`: N-D sorts along an axis,
  sorts by composite keys;
* :mod:`~gpusort.engine.select`, :mod:`~gpusort.engine.search`,
  :mod:`~gpusort.engine.distinct`: ``topk``, ``searchsorted``, ``unique``.
"""
