"""What one task does with chunks: check what they declare, sort them into a run, merge pieces back into keys.

Every path that sorts -- the graph in one process (:mod:`gpusort.engine.graph`), the
exchange between workers (:mod:`gpusort.engine.exchange`) and the external sort
(:mod:`gpusort.zarr_io`) -- checks its input chunks, encodes order keys
(:mod:`gpusort.keys.order`) and decodes merged pieces through these functions, so
they agree on every chunk's bits.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from gpusort.arrays import concatenate, in_order, namespace, to_numpy
from gpusort.backends import Pair, get_backend, on_device
from gpusort.keys import order

Declared = tuple[int, int, np.dtype, "np.dtype | None"]
"""``(chunk index, length, key dtype, value dtype)``: what the Dask array says a chunk holds."""


def gathered(declared: Sequence[Declared], offset: int | None, chunks: Sequence[Any], upload: Any = None) -> Pair:
    """Consecutive input chunks ``(keys, values, keys, values, ...)`` as one pair, checked against ``declared``.

    With ``offset`` (argsort) the values are the global positions of the keys,
    from ``offset`` on.  Each chunk is checked first (:func:`check_declared`).
    ``upload``: a backend whose memory the pair goes to, host chunks joined
    as they go up (:meth:`gpusort.backends.Backend.upload`).

    Examples
    --------
    >>> gathered([(0, 2, np.dtype(int), None), (1, 1, np.dtype(int), None)], 10,
    ...          [np.array([5, 4]), None, np.array([3]), None])
    (array([5, 4, 3]), array([10, 11, 12]))
    """
    check_declared(declared, chunks)
    keys, values = chunks[0::2], chunks[1::2]

    def join(parts: Sequence[Any], dtype: np.dtype) -> Any:
        if upload is None:
            return concatenate(parts, dtype)
        return upload.upload([np.asarray(p, dtype) for p in parts])

    keys = join(keys, declared[0][2])
    if offset is not None:
        return keys, namespace(keys).arange(offset, offset + len(keys), dtype=np.int64)
    if values[0] is None:
        return keys, None
    return keys, join(values, declared[0][3])


def check_declared(declared: Sequence[Declared], chunks: Sequence[Any]) -> None:
    """Raise where an input chunk ``(keys, values, keys, values, ...)`` is not what ``declared`` says.

    The splitters trust the declared chunk lengths, so a chunk that loads
    short, long or as another dtype would silently lose or garble elements
    downstream: it is stopped here, by name.  Byte order alone may differ.
    """
    for (k, length, dtype, value_dtype), kc, vc in zip(declared, chunks[0::2], chunks[1::2]):
        for what, got, want in (("keys", kc, dtype), ("values", vc, value_dtype)):
            if got is not None and (len(got) != length or not np.can_cast(got.dtype, want, "equiv")):
                raise ValueError(
                    f"input chunk {k} loaded {len(got)} {what} of dtype {got.dtype}, but its dask array "
                    f"declares {length} of dtype {want}: fix the source of chunk {k}, or declare the "
                    "array's real chunks and dtype"
                )


def sort_pair(backend: Any, descending: bool, scheme: order.Scheme, keys: Any, values: Any,
              overwrite: bool = False) -> Pair:
    """One run: the order keys of ``keys``, sorted on ``backend``, with ``values`` carried stably.

    ``overwrite``: ``keys`` and ``values`` are the caller's temporaries (a
    concatenation), whose memory the sort may use.
    """
    okeys = order.encode(keys, descending, scheme)
    sorter = get_backend(backend)
    if okeys.ndim == 1 and sorter.is_sorted(okeys):  # sorted input needs no sort: a sample says which
        return okeys, values
    return sorter.sort_run(okeys, values, overwrite=overwrite)


def sort_chunks(backend: Any, descending: bool, scheme: order.Scheme, offset: int | None,
                declared: Sequence[Declared], *chunks: Any, upload: bool = False) -> Pair:
    """One run of consecutive input chunks (:func:`gathered`, then :func:`sort_pair`).

    Several chunks are concatenated into a temporary, which the sort may
    use; with ``upload``, host chunks go up into one on ``backend`` first.
    Several GPU chunks of keys alone go to the sort as they are
    (:func:`sort_parts`), which reads them where they lie.
    """
    keys = chunks[0::2]
    if offset is None and not upload and len(keys) > 1 and declared[0][3] is None and on_device(keys[0]) \
            and all(k.ndim == 1 and k.dtype == declared[0][2] for k in keys):
        check_declared(declared, chunks)
        return sort_parts(backend, descending, scheme, list(keys))
    pair = gathered(declared, offset, chunks, get_backend(backend) if upload else None)
    return sort_pair(backend, descending, scheme, *pair, overwrite=upload or len(declared) > 1)


def sort_parts(backend: Any, descending: bool, scheme: order.Scheme, parts: list[Any]) -> Pair:
    """Keys alone, in ``parts`` end to end, as one run of order keys: the backend sorts the list as it is.

    The GPU's sort reads the parts where they lie (its bucket pass), so no
    joined copy of them is made (:meth:`gpusort.backends.Backend.sort_run`).
    Parts already in order end to end are joined and not sorted.

    Examples
    --------
    >>> sort_parts("numpy", False, "exact", [np.array([3, 1]), np.array([2])])
    (array([1, 2, 3]), None)
    """
    okeys = [order.encode(p, descending, scheme) for p in parts]
    sorter = get_backend(backend)
    filled = [p for p in okeys if len(p)]
    if sorter.is_sorted(filled):
        return concatenate(okeys), None
    return sorter.sort_run(filled)


def sort_chunks_whole(backend: Any, dtype: np.dtype, descending: bool, scheme: order.Scheme, offset: int | None,
                      declared: Sequence[Declared], *chunks: Any) -> Pair:
    """All input chunks sorted as one run and decoded to ``dtype``: the whole result in one task.

    Host chunks on a backend that sorts them in one step
    (``sort_parts``: the CuPy backend within its budget) are uploaded, encoded,
    sorted, decoded and downloaded there, with no host pass over them; else
    :func:`sort_chunks`, then decoded.
    """
    check_declared(declared, chunks)
    sorter = get_backend(backend)
    keys, values = list(chunks[0::2]), list(chunks[1::2])
    if isinstance(keys[0], np.ndarray):
        n = sum(len(k) for k in keys)
        run = sorter.sort_parts([np.ascontiguousarray(k, declared[0][2]) for k in keys],
                                (offset, n) if offset is not None else None if values[0] is None
                                else [np.ascontiguousarray(v, declared[0][3]) for v in values],
                                lambda k: order.encode(k, descending, scheme),
                                lambda k: order.decode(k, dtype, descending, scheme),
                                order.encode_temporaries(dtype, descending, scheme))
        if run is not None:
            return run
    okeys, ovalues = sort_chunks(backend, descending, scheme, offset, declared, *chunks)
    return order.decode(okeys, dtype, descending, scheme), ovalues


def merge_pieces(backend: Any, dtype: np.dtype, descending: bool, scheme: order.Scheme, pieces: list[Pair],
                 scratch: Pair | None = None) -> Pair:
    """One block of output: the k-way merge of its pieces (in run order), decoded to ``dtype``.

    Pieces that follow one another (each one's last key not after the
    next one's first, as of sorted input) are concatenated, not merged.
    ``scratch``: the pieces' concatenation, which the caller gives up
    (:meth:`gpusort.backends.Backend.merge_runs`).
    """
    if disjoint([keys for keys, _ in pieces]):
        if scratch is not None:
            okeys, values = scratch
        else:
            okeys = concatenate([k for k, _ in pieces], pieces[0][0].dtype)
            values = None if pieces[0][1] is None else concatenate([v for _, v in pieces], pieces[0][1].dtype)
    else:
        okeys, values = get_backend(backend).merge_runs(pieces, scratch=scratch)
    return order.decode(okeys, dtype, descending, scheme), values


def disjoint(runs: Sequence[Any]) -> bool:
    """Whether sorted 1-D runs follow one another: their concatenation is sorted.

    Reads two keys a run, where it lives, and none where fewer than two
    runs hold keys: a read waits for the kernels that write the run.

    Examples
    --------
    >>> disjoint([np.array([1, 2]), np.array([], int), np.array([2, 5])]), disjoint([np.array([1, 3]), np.array([2])])
    (True, False)
    """
    held = [r for r in runs if len(r)]
    if len(held) < 2:
        return True
    if any(r.ndim != 1 for r in held):
        return False  # rows of composite keys: merged
    ends = [(to_numpy(r[:1])[0], to_numpy(r[-1:])[0]) for r in held]
    return all(in_order(last, first) for (_, last), (first, _) in zip(ends, ends[1:]))
