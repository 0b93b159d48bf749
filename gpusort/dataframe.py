"""Sorting Dask DataFrames by their columns: pandas' ``sort_values`` on gpusort's sort.

A row travels as two fixed-width parts, made by one task per input
partition:

* its **composite order key** (:mod:`gpusort.composite`): every key
  column's order key (:func:`gpusort.order.key_columns`, scheme ``"tied"``:
  ``-0.0`` ties with ``0.0``, NaN with NaN, as pandas compares them), each
  in its own direction, packed most significant first into one unsigned
  integer, or into rows of 64-bit words past 64 bits.  A descending column
  is packed as its descending order key, which keeps NaN and NaT last, so
  one ascending comparison of the composite keys is pandas' order for any
  mix of directions.
* its **record**: the bytes of the index and of every column the key does
  not give back exactly -- the other columns and float keys, whose zeros
  and NaNs tie in the order key but keep their bits in the record.

Both go through one stable sort by composite key with the records carried
as values (:func:`gpusort.multikey.sort`: exact co-rank splitters, one merge
per output partition), so every column moves once, in bulk, and the graph
has ``O(partitions)`` tasks; a positional gather (``x[positions]``) would
multiply input by output partitions.  One task per output partition
unpacks its rows into a pandas DataFrame.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Sequence

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from gpusort import composite, multikey, order
from gpusort.api import SortOptions, check_flag


def sort_values(
    df: Any,
    by: Any,
    ascending: bool | Sequence[bool] = True,
    npartitions: int | None = None,
    *,
    backend: str | None = None,
    gpu_memory_budget: int | str | None = None,
) -> Any:
    """A Dask DataFrame's rows sorted by columns, as ``pandas.DataFrame.sort_values`` sorts them.

    pandas' semantics with ``kind="stable"`` and ``na_position="last"``: rows
    with equal keys keep their order, NaN and NaT come last in either
    direction, the index stays with its row, and every other column moves
    with the keys, bit for bit.

    Parameters
    ----------
    df : dask.dataframe.DataFrame
        pandas-backed.  Key columns: integers, floats, bool, datetime64
        (tz-aware too) or timedelta64.  Other columns and the index: any of
        those, complex, or categoricals with known categories.
    by : label or list of labels
        The key columns, the first primary; the index's name may stand for
        the index.
    ascending : bool or list of bool
        The direction of every key, or one per key.
    npartitions : int, optional
        Output partitions; by default ``df.npartitions``.  Every partition
        has ``ceil(len(df) / npartitions)`` rows but the last ones, which
        have the rest.
    backend, gpu_memory_budget
        As for :func:`gpusort.sort`: ``backend="cupy"`` sorts on the GPU.

    Returns
    -------
    dask.dataframe.DataFrame
        ``npartitions`` partitions of exactly balanced lengths, with unknown
        divisions: the index comes along with its rows, so it is not sorted
        (as with ``dask.dataframe``'s ``sort_values``).

    Notes
    -----
    Building the result computes the lengths of ``df``'s partitions, which
    a Dask DataFrame does not know (as ``df.to_dask_array(lengths=True)``
    does): that computes ``df`` once, so persist a DataFrame that is costly
    to compute.  Nothing else runs until the result is computed.

    Variable-width columns (strings, objects) are refused by name: carrying
    them would need every output partition to gather from every input one.
    Make such a column categorical (``df.categorize(columns=[...])``), or
    sort without it and join it back by index.

    Examples
    --------
    >>> import dask.dataframe as dd, pandas as pd, gpusort
    >>> pdf = pd.DataFrame({"k": [2, 1, 2, 1], "x": [0.5, float("nan"), 1.5, 2.5]})
    >>> out = gpusort.sort_values(dd.from_pandas(pdf, npartitions=2), ["k", "x"], ascending=[True, False])
    >>> out.compute()
       k    x
    3  1  2.5
    1  1  NaN
    2  2  1.5
    0  2  0.5
    >>> out.map_partitions(len).compute().tolist()
    [2, 2]
    """
    meta = _check_frame(df)
    keys = _key_fields(meta, by)
    descending = _directions(ascending, len(keys))
    if npartitions is None:
        npartitions = df.npartitions
    if isinstance(npartitions, bool) or not isinstance(npartitions, numbers.Integral) or npartitions < 1:
        raise ValueError(f"npartitions must be a positive int (the number of output partitions), or None; "
                         f"got {npartitions!r}")
    plan = _plan(meta, keys, descending)
    spec = SortOptions.of(backend=backend, gpu_memory_budget=gpu_memory_budget).spec(np.empty(0))
    lengths = tuple(int(n) for n in df.map_partitions(len).compute())  # the one thing computed now
    okeys, records = _encoded(df, plan, lengths)
    n = sum(lengths)
    per = max(1, -(-n // npartitions))
    sizes = tuple(min(per, max(n - j * per, 0)) for j in range(npartitions))
    okeys, records = multikey.sort(okeys, records, positions=False, chunk=sizes, backend=spec)
    decode = dask.delayed(_decode, pure=True)
    # Unoptimized: Dask's fusion of array tasks loses the tasks of DataFrames made by from_delayed.
    blocks = (x.to_delayed(optimize_graph=False).ravel() for x in (okeys, records))
    parts = [decode(plan, k, r) for k, r in zip(*blocks)]
    return dd.from_delayed(parts, meta=meta, divisions=None, verify_meta=False)


@dataclass(frozen=True)
class _Field:
    """One fixed-width field of a row: a column (by position) or the index (``position=-1``)."""

    label: Any
    position: int
    dtype: Any
    storage: np.dtype
    """The NumPy dtype it travels as: the column's, a tz-aware datetime's UTC datetime64, a categorical's codes."""

    def values(self, part: pd.DataFrame) -> np.ndarray:
        column = pd.Series(part.index) if self.position < 0 else part.iloc[:, self.position]
        if isinstance(self.dtype, pd.CategoricalDtype):
            return column.cat.codes.to_numpy()
        if isinstance(self.dtype, pd.DatetimeTZDtype):
            return column.dt.tz_convert(None).to_numpy()
        return column.to_numpy()

    def rebuild(self, values: np.ndarray) -> Any:
        if isinstance(self.dtype, pd.CategoricalDtype):
            return pd.Categorical.from_codes(values, dtype=self.dtype)
        if isinstance(self.dtype, pd.DatetimeTZDtype):
            return pd.DatetimeIndex(values).tz_localize("UTC").tz_convert(self.dtype.tz).array
        return values


@dataclass(frozen=True)
class _Plan:
    """What the encode and decode tasks need: the fields, which are keys and how, which travel as records."""

    columns: tuple[_Field, ...]
    index: _Field
    keys: tuple[_Field, ...]
    descending: tuple[bool, ...]
    carried: tuple[_Field, ...]
    layout: composite.Layout

    @property
    def width(self) -> int:
        return sum(f.storage.itemsize for f in self.carried)


def _check_frame(df: Any) -> pd.DataFrame:
    """``df``'s meta (an empty pandas DataFrame), or a clear error."""
    meta = getattr(df, "_meta", None)
    if not hasattr(df, "to_delayed") or not isinstance(meta, pd.DataFrame):
        if isinstance(df, pd.DataFrame):
            raise TypeError("df is a pandas DataFrame; sort it with its own sort_values(), or wrap it first: "
                            "dask.dataframe.from_pandas(df, npartitions=...)")
        raise TypeError(f"df must be a pandas-backed Dask DataFrame; got {type(df).__name__} "
                        "(a Dask Series: sort its to_frame())")
    if isinstance(meta.index, pd.MultiIndex):
        raise TypeError("df has a MultiIndex, which sort_values cannot carry; reset_index() first")
    return meta


def _key_fields(meta: pd.DataFrame, by: Any) -> list[tuple[Any, int]]:
    """``(label, position)`` of every key, the index's position -1."""
    labels = list(by) if isinstance(by, (list, tuple)) else [by]
    if not labels:
        raise ValueError("by is empty; name at least one column to sort by")
    keys = []
    for label in labels:
        hits = np.flatnonzero(meta.columns == label) if label in meta.columns else []
        if len(hits) > 1:
            raise ValueError(f"by names column {label!r}, which df has {len(hits)} times; make the labels unique")
        if len(hits) == 1:
            keys.append((label, int(hits[0])))
        elif label is not None and label == meta.index.name:
            keys.append((label, -1))
        else:
            raise KeyError(f"by names {label!r}, which is neither a column of df nor its index's name; "
                           f"columns: {list(meta.columns)}")
    return keys


def _directions(ascending: Any, nkeys: int) -> tuple[bool, ...]:
    """Whether each key sorts largest first, from ``ascending`` (one bool, or one per key)."""
    if isinstance(ascending, (list, tuple)):
        if len(ascending) != nkeys:
            raise ValueError(f"ascending has {len(ascending)} entries but by names {nkeys} columns; "
                             "give one bool per column, or a single bool")
        for i, a in enumerate(ascending):
            check_flag(a, f"ascending[{i}]")
        return tuple(not a for a in ascending)
    check_flag(ascending, "ascending")
    return (not ascending,) * nkeys


def _field(meta: pd.DataFrame, label: Any, position: int, key: bool) -> _Field:
    """The field of one column (or the index), or an error that names it and the fix."""
    what = "df's index" if position < 0 else f"column {label!r}"
    dtype = meta.index.dtype if position < 0 else meta.dtypes.iloc[position]
    if isinstance(dtype, pd.DatetimeTZDtype):
        return _Field(label, position, dtype, np.dtype(f"datetime64[{dtype.unit}]"))
    if isinstance(dtype, pd.CategoricalDtype) and not key:
        from dask.dataframe.utils import UNKNOWN_CATEGORIES

        if UNKNOWN_CATEGORIES in dtype.categories:
            raise TypeError(f"{what} is categorical with unknown categories; make them known first "
                            f"(df.categorize(columns=[{label!r}]) computes them)")
        return _Field(label, position, dtype, pd.Categorical([], dtype=dtype).codes.dtype)
    kinds = "iufbmM" if key else "iufcbmM"
    if isinstance(dtype, np.dtype) and dtype.kind in kinds:
        return _Field(label, position, dtype, dtype)
    if key:
        raise TypeError(f"{what} has dtype {dtype}, which sort_values cannot sort by: keys are integers, "
                        "floats, bool, datetime64 or timedelta64 (convert it first, e.g. with "
                        f"astype('float64'), or sort by a numeric code of it)")
    raise TypeError(
        f"{what} has dtype {dtype}, which sort_values cannot carry: it moves fixed-width columns (numbers, bool, "
        "datetimes, categoricals with known categories) as bytes in one pass, and a variable-width one would make "
        "every output partition gather from every input one. Make it categorical first "
        f"(df.categorize(columns=[{label!r}]) computes its categories), or sort without it and join it back by index"
    )


def _plan(meta: pd.DataFrame, keys: list[tuple[Any, int]], descending: tuple[bool, ...]) -> _Plan:
    key_fields = tuple(_field(meta, label, i, key=True) for label, i in keys)
    columns = tuple(_field(meta, label, i, key=False) for i, label in enumerate(meta.columns))
    index = _field(meta, meta.index.name, -1, key=False)
    # Order keys of every dtype but floats decode to exactly their bits: float keys travel as records too,
    # with the other columns and the index (always: a record is never empty).
    exact = {f.position for f in key_fields if f.storage.kind != "f"} - {-1}
    carried = tuple(f for f in (index, *columns) if f.position not in exact)
    widths = [w for f, d in zip(key_fields, descending) for w in order.key_widths(f.storage, d)]
    return _Plan(columns, index, key_fields, descending, carried, composite.Layout(tuple(widths)))


def _encoded(df: Any, plan: _Plan, lengths: tuple[int, ...]) -> tuple[da.Array, da.Array]:
    """Composite keys and records of every partition, as Dask arrays of one task per partition each.

    Two tasks read each partition rather than one making a pair: Dask
    counts (and spills) a pair and each field taken from it apart, so under
    memory pressure a pair's arrays would be held, and reloaded, twice.
    """
    parts = df.to_delayed()
    token = tokenize(df, plan)
    words = plan.layout.words
    kchunks = (lengths,) if words == 1 else (lengths, (words,))
    out = []
    for make, chunks, dtype in ((_okeys, kchunks, plan.layout.dtype),
                                (_records, (lengths, (plan.width,)), np.dtype(np.uint8))):
        name = f"{make.__name__.strip('_')}-{token}"
        dsk = {(name, i, *([0] * (len(chunks) - 1))): (make, plan, p.key) for i, p in enumerate(parts)}
        out.append(da.Array(HighLevelGraph.from_collections(name, dsk, dependencies=parts), name, chunks, dtype=dtype))
    return out[0], out[1]


def _okeys(plan: _Plan, part: pd.DataFrame) -> np.ndarray:
    """One partition's composite order keys: every key's order-key columns, in its direction, packed."""
    columns = []
    for f, d in zip(plan.keys, plan.descending):
        columns += order.key_columns(f.values(part), d, "tied")[0]
    return plan.layout.pack(columns)


def _records(plan: _Plan, part: pd.DataFrame) -> np.ndarray:
    """One partition's records: the bytes of every carried field, side by side, one row each."""
    fields = [np.ascontiguousarray(f.values(part)) for f in plan.carried]
    return np.concatenate([v.view(np.uint8).reshape(len(part), v.dtype.itemsize) for v in fields], axis=1)


def _decode(plan: _Plan, okeys: np.ndarray, records: np.ndarray) -> pd.DataFrame:
    """One output partition from its sorted composite keys and records."""
    values: dict[int, np.ndarray] = {}
    at = 0
    for f in plan.carried:
        values[f.position] = records[:, at:at + f.storage.itemsize].copy().view(f.storage).reshape(len(records))
        at += f.storage.itemsize
    column = 0
    for f, d in zip(plan.keys, plan.descending):
        if f.position not in values:
            values[f.position] = order.decode_column(plan.layout.unpack(okeys, column), f.storage, d, "tied")
        column += len(order.key_widths(f.storage, d))
    index = pd.Index(plan.index.rebuild(values[-1]), name=plan.index.label)
    out = pd.DataFrame({i: f.rebuild(values[i]) for i, f in enumerate(plan.columns)}, index=index)
    out.columns = pd.Index([f.label for f in plan.columns])
    return out
