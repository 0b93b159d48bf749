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
from typing import Any, Callable, Sequence

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from gpusort import composite, multikey, order
from gpusort.api import SortOptions


def sort_values(
    df: Any,
    by: Any,
    ascending: bool | Sequence[bool] = True,
    npartitions: int | None = None,
    *,
    na_position: str = "last",
    key: Callable[[pd.Series], Any] | None = None,
    backend: str | None = None,
    gpu_memory_budget: int | str | None = None,
) -> Any:
    """A Dask DataFrame's rows sorted by columns, as ``pandas.DataFrame.sort_values`` sorts them.

    pandas' semantics with ``kind="stable"``: rows with equal keys keep
    their order, NaN and NaT come last (or first) in either direction, the
    index stays with its row, and every other column moves with the keys,
    bit for bit.

    Parameters
    ----------
    df : dask.dataframe.DataFrame
        pandas-backed.  Key columns: integers, floats, bool, datetime64
        (tz-aware too) or timedelta64.  Other columns and the index (a
        MultiIndex too): any of those, complex, or categoricals with known
        categories.
    by : label or list of labels
        The key columns, the first primary; the index's name (a level's
        name, for a MultiIndex) may stand for the index (that level).  An
        empty list returns ``df`` as it is, as pandas does.
    ascending : bool or list of bool
        The direction of every key, or one per key; ints are taken as
        pandas takes them (``0`` is descending).
    na_position : {"last", "first"}
        Where every key's NaN and NaT go, in either direction.
    key : callable, optional
        pandas' vectorized key: called on every key column (a Series) of
        every partition before the sort, it returns keys of the same length
        to sort by in its place.  Its result's dtype must be one that
        ``by`` takes; the columns themselves come back unchanged.
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
    if na_position not in ("last", "first"):
        raise ValueError(f"invalid na_position: {na_position!r}; use 'last' or 'first'")
    if key is not None and not callable(key):
        raise TypeError(f"key must be a callable that maps a Series to keys of its length, or None; got {key!r}")
    if npartitions is None:
        npartitions = df.npartitions
    if isinstance(npartitions, bool) or not isinstance(npartitions, numbers.Integral) or npartitions < 1:
        raise ValueError(f"npartitions must be a positive int (the number of output partitions), or None; "
                         f"got {npartitions!r}")
    if not keys:  # pandas returns the frame as it is
        return df
    plan = _plan(df, meta, keys, descending, na_position == "first", key)
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
    """One fixed-width field of a row: a column (by position) or a level of the index (``position = -1 - level``)."""

    label: Any
    position: int
    dtype: Any
    storage: np.dtype
    """The NumPy dtype it travels as: the column's, a tz-aware datetime's UTC datetime64, a categorical's codes."""
    key: Callable[[pd.Series], Any] | None = None
    """pandas' vectorized key, for a sort key that sorts by what it returns (``dtype`` is then the result's)."""

    def column(self, part: pd.DataFrame) -> pd.Series:
        """The column (or index level) as ``part`` holds it."""
        if self.position < 0:
            return pd.Series(part.index.get_level_values(-1 - self.position), name=self.label)
        return part.iloc[:, self.position]

    def values(self, part: pd.DataFrame) -> np.ndarray:
        """What travels: the storage's NumPy values, of the key's result where a ``key=`` callable is given."""
        column = self.column(part)
        if self.key is not None:
            column = pd.Series(self.key(column))
            if len(column) != len(part):
                raise ValueError(f"key= returned {len(column)} keys for {self.label!r} in a partition of "
                                 f"{len(part)} rows; it must return one key a row, as pandas requires")
            if column.dtype != self.dtype:
                # Planned from a few made-up rows: a partition's result must fit that dtype, or its
                # order keys would be packed at the wrong width.
                if not (isinstance(column.dtype, np.dtype) and isinstance(self.dtype, np.dtype)
                        and np.can_cast(column.dtype, self.dtype, "safe")):
                    raise TypeError(f"key= returned dtype {column.dtype} for {self.label!r} in a partition, "
                                    f"but {self.dtype} for the frame's made-up rows (df._meta_nonempty); "
                                    f"make it return one dtype, e.g. key(s).astype('float64')")
                column = column.astype(self.dtype)
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
    index: tuple[_Field, ...]
    multi_index: bool
    keys: tuple[_Field, ...]
    descending: tuple[bool, ...]
    na_first: tuple[bool, ...]
    """For every key, whether a column before its order key puts its NaN and NaT first."""
    carried: tuple[_Field, ...]
    layout: composite.Layout

    @property
    def width(self) -> int:
        return sum(f.storage.itemsize for f in self.carried)

    def key_columns(self, part: pd.DataFrame) -> list:
        """One partition's order-key columns: for every key its NA column (if any), then its order keys."""
        columns = []
        for f, d, na_first in zip(self.keys, self.descending, self.na_first):
            values = f.values(part)
            if na_first:
                columns.append((~pd.isna(values)).astype(np.uint8))  # 0 for NaN and NaT: they come first
            columns += order.key_columns(values, d, "tied")[0]
        return columns


def _check_frame(df: Any) -> pd.DataFrame:
    """``df``'s meta (an empty pandas DataFrame), or a clear error."""
    meta = getattr(df, "_meta", None)
    if not hasattr(df, "to_delayed") or not isinstance(meta, pd.DataFrame):
        if isinstance(df, pd.DataFrame):
            raise TypeError("df is a pandas DataFrame; sort it with its own sort_values(), or wrap it first: "
                            "dask.dataframe.from_pandas(df, npartitions=...)")
        raise TypeError(f"df must be a pandas-backed Dask DataFrame; got {type(df).__name__} "
                        "(a Dask Series: sort its to_frame())")
    return meta


def _key_fields(meta: pd.DataFrame, by: Any) -> list[tuple[Any, int]]:
    """``(label, position)`` of every key, index level ``l``'s position ``-1 - l``."""
    labels = list(by) if isinstance(by, list) else [by]
    keys = []
    for label in labels:
        hits = [i for i, c in enumerate(meta.columns) if _same_label(c, label)]
        if len(hits) > 1:
            raise ValueError(f"by names column {label!r}, which df has {len(hits)} times; make the labels unique")
        levels = [lv for lv, name in enumerate(meta.index.names) if name is not None and name == label]
        if len(hits) == 1:
            keys.append((label, hits[0]))
        elif levels:
            keys.append((label, -1 - levels[0]))
        else:
            raise KeyError(f"by names {label!r}, which is neither a column of df nor its index's name; "
                           f"columns: {list(meta.columns)}")
    return keys


def _same_label(column: Any, label: Any) -> bool:
    """Whether ``label`` names ``column``; one missing label (``None``, NaN) names another.

    Compared one by one, not by ``columns == label``, which is all False
    for ``None``; and Dask's DataFrames hold a column labelled ``None`` as
    NaN.
    """
    missing = [pd.api.types.is_scalar(x) and pd.isna(x) for x in (column, label)]
    return all(missing) or (not any(missing) and bool(column == label))


def _directions(ascending: Any, nkeys: int) -> tuple[bool, ...]:
    """Whether each key sorts largest first, from ``ascending`` (one bool, or one per key), as pandas reads it."""
    if isinstance(ascending, (list, tuple)):
        if len(ascending) != nkeys:
            raise ValueError(f"ascending has {len(ascending)} entries but by names {nkeys} columns; "
                             "give one bool per column, or a single bool")
        return tuple(not _direction(a, f"ascending[{i}]") for i, a in enumerate(ascending))
    return (not _direction(ascending, "ascending"),) * nkeys


def _direction(value: Any, argname: str) -> bool:
    """A bool or an int, as pandas takes them (its ``ValueError`` for anything else: ``"False"`` would read as true)."""
    if isinstance(value, (bool, np.bool_, numbers.Integral)):
        return bool(value)
    raise ValueError(f"{argname} must be a bool (or an int, as pandas takes it); got {value!r} of type "
                     f"{type(value).__name__}")


def _field(meta: pd.DataFrame, label: Any, position: int, key: bool, dtype: Any = None,
           transform: Callable | None = None) -> _Field:
    """The field of one column (or index level), or an error that names it and the fix.

    ``dtype`` and ``transform``: a key's dtype after pandas' ``key=`` callable, which its values go through.
    """
    what = ("df's index" if meta.index.nlevels == 1 else f"level {-1 - position} of df's index") if position < 0 \
        else f"column {label!r}"
    if transform is not None:
        what += " after key="
    if dtype is None:
        dtype = meta.index.get_level_values(-1 - position).dtype if position < 0 else meta.dtypes.iloc[position]
    if isinstance(dtype, pd.DatetimeTZDtype):
        return _Field(label, position, dtype, np.dtype(f"datetime64[{dtype.unit}]"), transform)
    if isinstance(dtype, pd.CategoricalDtype) and not key:
        from dask.dataframe.utils import UNKNOWN_CATEGORIES

        if UNKNOWN_CATEGORIES in dtype.categories:
            raise TypeError(f"{what} is categorical with unknown categories; make them known first "
                            f"(df.categorize(columns=[{label!r}]) computes them)")
        return _Field(label, position, dtype, pd.Categorical([], dtype=dtype).codes.dtype, transform)
    kinds = "iufbmM" if key else "iufcbmM"
    if isinstance(dtype, np.dtype) and dtype.kind in kinds:
        return _Field(label, position, dtype, dtype, transform)
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


def _plan(df: Any, meta: pd.DataFrame, keys: list[tuple[Any, int]], descending: tuple[bool, ...], na_first: bool,
          key: Callable | None) -> _Plan:
    if key is None:
        key_fields = tuple(_field(meta, label, i, key=True) for label, i in keys)
    else:  # the key's dtype, from what it makes of a few made-up rows (an empty Series may keep any dtype)
        sample = df._meta_nonempty
        key_fields = tuple(_field(meta, label, i, True, pd.Series(key(_Field(label, i, None, None).column(sample)
                                                                          )).dtype, key)
                           for label, i in keys)
    index = tuple(_field(meta, name, -1 - lv, key=False) for lv, name in enumerate(meta.index.names))
    columns = tuple(_field(meta, label, i, key=False) for i, label in enumerate(meta.columns))
    # Order keys of every dtype but floats decode to exactly their bits: float keys, keys through key= and
    # index levels travel as records, with the other columns (always: a record is never empty).
    exact = {f.position for f in key_fields if f.storage.kind != "f" and f.key is None and f.position >= 0}
    carried = tuple(f for f in (*index, *columns) if f.position not in exact)
    # NaN and NaT first: a 1-bit column before each key that can hold them, 0 where it does.
    nulls = tuple(na_first and f.storage.kind in "fmM" for f in key_fields)
    widths = [w for f, d, n in zip(key_fields, descending, nulls) for w in [1] * n + order.key_widths(f.storage, d)]
    return _Plan(columns, index, isinstance(meta.index, pd.MultiIndex), key_fields, descending, nulls, carried,
                 composite.Layout(tuple(widths)))


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
    return plan.layout.pack(plan.key_columns(part))


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
    for f, d, na_first in zip(plan.keys, plan.descending, plan.na_first):
        column += na_first
        if f.position not in values:
            values[f.position] = order.decode_column(plan.layout.unpack(okeys, column), f.storage, d, "tied")
        column += len(order.key_widths(f.storage, d))
    levels = [f.rebuild(values[f.position]) for f in plan.index]
    if plan.multi_index:
        index = pd.MultiIndex.from_arrays(levels, names=[f.label for f in plan.index])
    else:
        index = pd.Index(levels[0], name=plan.index[0].label)
    out = pd.DataFrame({i: f.rebuild(values[i]) for i, f in enumerate(plan.columns)}, index=index)
    out.columns = pd.Index([f.label for f in plan.columns])
    return out
