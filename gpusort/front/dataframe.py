"""Sorting Dask DataFrames by their columns: pandas' ``sort_values`` on gpusort's sort.

A row travels as two fixed-width parts, made by one task per input
partition:

* its **composite order key** (:mod:`gpusort.keys.composite`): every key
  column's order key (:func:`gpusort.keys.order.key_columns`, scheme ``"tied"``:
  ``-0.0`` ties with ``0.0``, NaN with NaN, as pandas compares them), each
  in its own direction, packed most significant first into one unsigned
  integer, or into rows of 64-bit words past 64 bits.  A descending column
  is packed as its descending order key, which keeps NaN and NaT last, so
  one ascending comparison of the composite keys is pandas' order for any
  mix of directions.
* its **record**: the bytes of the index and of every column the key does
  not give back exactly -- the other columns and float keys, whose zeros
  and NaNs tie in the order key but keep their bits in the record, and
  strings, which travel as fixed-width UTF-8 records (:mod:`gpusort.keys.text`).

Both go through one stable sort by composite key with the records carried
as values (:func:`gpusort.engine.multikey.sort`: exact co-rank splitters, one merge
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

from gpusort.engine import multikey
from gpusort.front.api import SortOptions
from gpusort.keys import composite, order, text


def sort_values(
    df: Any,
    by: Any,
    ascending: bool | Sequence[bool] = True,
    npartitions: int | None = None,
    *,
    axis: int | str = 0,
    inplace: bool = False,
    kind: str = "stable",
    na_position: str = "last",
    ignore_index: bool = False,
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
        (tz-aware too), timedelta64, strings, ``object`` columns of ints or
        of floats, or categoricals with known categories.  Other columns
        and the index (a MultiIndex too): any of those, or complex.
    by : label or list of labels
        The key columns, the first primary; the index's name (a level's
        name, for a MultiIndex) may stand for the index (that level).  An
        empty list returns ``df`` as it is, as pandas does.
    ascending : bool or list of bool
        The direction of every key, or one per key; ints are taken as
        pandas takes them (``0`` is descending).
    axis : {0, "index"}
        pandas' argument: rows are sorted; ``axis=1`` (sorting the columns)
        is refused with a ``NotImplementedError``.
    inplace : bool
        pandas' argument: ``False``; a Dask DataFrame cannot change in
        place, so ``True`` is refused with a ``NotImplementedError``.
    kind : {"stable", "mergesort", "quicksort", "heapsort"}
        pandas' argument: every kind sorts stably, which is pandas' order
        for ``"stable"`` and ``"mergesort"``, and for the others wherever
        keys do not tie.
    na_position : {"last", "first"}
        Where every key's NaN and NaT go, in either direction.
    ignore_index : bool
        Whether the result's index is ``0, 1, ..., len(df) - 1`` (a
        ``RangeIndex`` in every partition) in place of ``df``'s, which is
        then not moved at all.
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
    does), and the longest string of every string column (or what an
    ``object`` column holds: strings, ints or floats) in the same pass:
    that computes ``df`` once, so persist a DataFrame that is costly to
    compute.  Nothing else runs until the result is computed.

    Strings (``str``/``string`` columns, and ``object`` columns of ``str``)
    travel and sort as fixed-width UTF-8 bytes padded to the column's
    longest string (:mod:`gpusort.keys.text`), in Python's (and pandas') order of
    code points; a column with a few very long strings makes every row that
    wide.  Categorical keys sort by their categories' order, as pandas sorts
    ordered and unordered ones.

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
    _check_pandas_options(axis, inplace, kind, ignore_index)
    keys = _key_fields(meta, by)
    descending = _directions(ascending, len(keys))
    if na_position not in ("last", "first"):
        # Dask's message, with pandas' "invalid na_position" before it.
        raise ValueError(f"invalid na_position: {na_position!r}; na_position must be either 'first' or 'last'")
    if key is not None and not callable(key):
        raise TypeError(f"key must be a callable that maps a Series to keys of its length, or None; got {key!r}")
    if npartitions is None:
        npartitions = df.npartitions
    if isinstance(npartitions, bool) or not isinstance(npartitions, numbers.Integral) or npartitions < 1:
        raise ValueError(f"npartitions must be a positive int (the number of output partitions), or None; "
                         f"got {npartitions!r}")
    if not keys:  # pandas returns the frame as it is
        return df
    spec = SortOptions.of(backend=backend, gpu_memory_budget=gpu_memory_budget).spec(np.empty(0))
    lengths, widths = _measured(df, meta, keys, key)  # the one thing computed now
    plan = _plan(df, meta, keys, descending, na_position == "first", key, widths, ignore_index)
    okeys, records = _encoded(df, plan, lengths)
    n = sum(lengths)
    per = max(1, -(-n // npartitions))
    sizes = tuple(min(per, max(n - j * per, 0)) for j in range(npartitions))
    okeys, records = multikey.sort(okeys, records, positions=False, chunk=sizes, backend=spec)
    decode = dask.delayed(_decode, pure=True)
    # Unoptimized: Dask's fusion of array tasks loses the tasks of DataFrames made by from_delayed.
    blocks = (x.to_delayed(optimize_graph=False).ravel() for x in (okeys, records))
    starts = np.cumsum((0,) + sizes[:-1]).tolist()  # each partition's first row: its RangeIndex for ignore_index
    parts = [decode(plan, k, r, start) for k, r, start in zip(*blocks, starts)]
    if ignore_index:
        meta = meta.reset_index(drop=True)
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

    def values(self, part: pd.DataFrame) -> np.ndarray:
        """What travels: the storage's NumPy values, of the key's result where a ``key=`` callable is given."""
        column = _column(part, self.position, self.label)
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
        if self.text:
            return text.records(column, self.storage["b"].shape[0], self.label)
        return column.to_numpy(self.storage if self.objects else None)

    @property
    def text(self) -> bool:
        """Whether it travels as :mod:`gpusort.keys.text` records of strings."""
        return text.is_text(self.dtype) and self.storage.kind == "V"

    @property
    def objects(self) -> bool:
        """Whether it is an ``object`` column of numbers, which travel as :data:`gpusort.keys.text.NUMBERS`."""
        return text.is_text(self.dtype) and self.storage.kind != "V"

    def missing(self, values: np.ndarray) -> np.ndarray:
        """Where :meth:`values` holds NaN, NaT, a missing category or a missing string."""
        if self.text:
            return values["n"] < 0
        if isinstance(self.dtype, pd.CategoricalDtype):
            return values < 0
        return pd.isna(values)

    def rebuild(self, values: np.ndarray) -> Any:
        if self.text:
            return text.strings(values, self.dtype)
        if self.objects:  # an Index of dtype object, as text.strings makes: an array of ints would infer int64
            return pd.Index(values.astype(object), dtype=object)
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
    """The index's levels, none for ``ignore_index``."""
    multi_index: bool
    keys: tuple[_Field, ...]
    descending: tuple[bool, ...]
    na_column: tuple[str | None, ...]
    """For every key, ``"first"`` or ``"last"`` where a column before its order key puts its missing values
    there, ``None`` where its order key puts them last itself."""
    carried: tuple[_Field, ...]
    layout: composite.Layout

    @property
    def width(self) -> int:
        return sum(f.storage.itemsize for f in self.carried)

    def key_columns(self, part: pd.DataFrame) -> list:
        """One partition's order-key columns: for every key its NA column (if any), then its order keys."""
        columns = []
        for f, d, na in zip(self.keys, self.descending, self.na_column):
            values = f.values(part)
            if na is not None:
                missing = f.missing(values)
                columns.append((missing if na == "last" else ~missing).astype(np.uint8))
            columns += text.key_columns(values, d) if f.text else order.key_columns(values, d, "tied")[0]
        return columns



def _column(part: pd.DataFrame, position: int, label: Any) -> pd.Series:
    """Column ``position`` of ``part``, or its index level ``-1 - position``, as a Series."""
    if position < 0:
        return pd.Series(part.index.get_level_values(-1 - position), name=label)
    return part.iloc[:, position]


def _key_widths(f: _Field, descending: bool) -> list[int]:
    """Bit widths of one key's order-key columns (its missing values' column apart)."""
    return text.key_widths(f.storage["b"].shape[0]) if f.text else order.key_widths(f.storage, descending)


def _check_pandas_options(axis: Any, inplace: Any, kind: Any, ignore_index: Any) -> None:
    """Errors for pandas' arguments that sort_values does not take, of pandas' exception types where it has one."""
    if not isinstance(inplace, (bool, np.bool_)):  # pandas' validate_bool_kwarg's type and words
        raise ValueError(f'For argument "inplace" expected type bool, received type {type(inplace).__name__}.')
    if not isinstance(axis, bool) and axis in (1, "columns"):
        raise NotImplementedError("sort_values does not support axis=1 (sorting the columns by rows' values): "
                                  "a Dask DataFrame sorts its rows; sort a pandas frame's columns in pandas")
    if isinstance(axis, bool) or axis not in (0, "index"):
        raise ValueError(f"No axis named {axis!r} for object type DataFrame; sort_values sorts rows: axis=0")
    if inplace:
        raise NotImplementedError("sort_values does not support inplace=True: a Dask DataFrame cannot change in "
                                  "place; assign the result instead: df = gpusort.sort_values(df, ...)")
    if kind not in ("stable", "mergesort", "quicksort", "heapsort"):
        raise ValueError(f"kind must be 'stable', 'mergesort', 'quicksort' or 'heapsort' (every one sorts "
                         f"stably); got {kind!r}")


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
        if len(ascending) != nkeys:  # pandas' words, which Dask's tests look for too
            raise ValueError(f"Length of ascending ({len(ascending)}) != length of by ({nkeys}): "
                             "give one bool per key, or a single bool")
        return tuple(not _direction(a, f"ascending[{i}]") for i, a in enumerate(ascending))
    return (not _direction(ascending, "ascending"),) * nkeys


def _direction(value: Any, argname: str) -> bool:
    """A bool or an int, as pandas takes them (its ``ValueError`` for anything else: ``"False"`` would read as true)."""
    if isinstance(value, (bool, np.bool_, numbers.Integral)):
        return bool(value)
    raise ValueError(f"{argname} must be a bool (or an int, as pandas takes it); got {value!r} of type "
                     f"{type(value).__name__}")


def _field(meta: pd.DataFrame, label: Any, position: int, key: bool, widths: dict[int, int], dtype: Any = None,
           transform: Callable | None = None) -> _Field:
    """The field of one column (or index level), or an error that names it and the fix.

    ``widths``: the longest string of every text column (by position), as measured, or the NumPy dtype that
    an ``object`` column of numbers travels as (:func:`gpusort.keys.text.content`).  ``dtype`` and
    ``transform``: a key's dtype after pandas' ``key=`` callable, which its values go through.
    """
    what = _what(meta, label, position)
    if transform is not None:
        what += " after key="
    if dtype is None:
        dtype = _dtype(meta, position)
    if isinstance(dtype, pd.DatetimeTZDtype):
        return _Field(label, position, dtype, np.dtype(f"datetime64[{dtype.unit}]"), transform)
    if text.is_text(dtype) and isinstance(widths.get(position), np.dtype):
        return _Field(label, position, dtype, widths[position], transform)
    if text.is_text(dtype) and (position in widths or transform is not None):
        return _Field(label, position, dtype, text.storage(widths.get(position, 0)), transform)
    if isinstance(dtype, pd.CategoricalDtype):
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
                        "floats, bool, datetime64, timedelta64, strings or categoricals (convert it first, e.g. "
                        "with astype('float64') or astype(str))")
    raise TypeError(f"{what} has dtype {dtype}, which sort_values cannot carry: it moves numbers, bool, "
                    "datetimes, strings and categoricals; convert it first (e.g. astype(str), or a numeric dtype)")


def _what(meta: pd.DataFrame, label: Any, position: int) -> str:
    """How an error names a column, or a level of the index."""
    if position >= 0:
        return f"column {label!r}"
    return "df's index" if meta.index.nlevels == 1 else f"level {-1 - position} of df's index"


def _key_dtype(df: Any, label: Any, position: int, key: Callable) -> Any:
    """A key's dtype after ``key=``, from what it makes of a few made-up rows (an empty Series may keep any).

    A key that changes the rows' number is refused here, before any partition runs it: per partition, a
    partition of one row could hide it.
    """
    sample = _column(df._meta_nonempty, position, label)
    keys = pd.Series(key(sample))
    if len(keys) != len(sample):  # pandas' words, which its tests look for
        raise ValueError(f"User-provided `key` function must not change the shape of the array: key= returned "
                         f"{len(keys)} keys for the {len(sample)} made-up rows of {label!r} (df._meta_nonempty); "
                         "it must return one key a row")
    return keys.dtype


def _measured(df: Any, meta: pd.DataFrame, keys: list[tuple[Any, int]], key: Callable | None
              ) -> tuple[tuple[int, ...], tuple[dict[int, Any], dict[int, int]]]:
    """The partitions' lengths, what every text column holds and the longest string of every text key, in one pass.

    Returns the lengths and two maps by position: of the columns (and index
    levels) as they are -- the longest string, or the NumPy dtype an
    ``object`` column of numbers travels as -- and of the widths of the
    keys' results after ``key=``.
    """
    fields = [(-1 - lv, name) for lv, name in enumerate(meta.index.names)] + list(enumerate(meta.columns))
    texts = [(p, label) for p, label in fields if text.is_text(_dtype(meta, p))]
    keyed = [(p, label) for label, p in keys if key is not None and text.is_text(_key_dtype(df, label, p, key))]
    stats = np.array(dask.compute(*[dask.delayed(_stats, pure=True)(part, texts, keyed, key)
                                    for part in df.to_delayed()]), dtype=np.int64).reshape(-1, 1 + 2 * len(texts)
                                                                                           + len(keyed))
    held = {}
    for j, (p, label) in enumerate(texts):
        codes = set(stats[:, 1 + 2 * j].tolist()) - {0}
        if len(codes) > 1:
            raise TypeError(f"{_what(meta, label, p)} has dtype object and holds strings, ints or floats in "
                            "some partitions and others elsewhere; sort_values moves object columns that are all "
                            "str, all int or all float: convert it first (e.g. astype(str), or a numeric dtype)")
        held[p] = text.NUMBERS[codes.pop()] if codes & text.NUMBERS.keys() else int(stats[:, 2 + 2 * j].max())
    return tuple(stats[:, 0].tolist()), (held, {p: int(stats[:, 1 + 2 * len(texts) + j].max())
                                                for j, (p, _) in enumerate(keyed)})


def _dtype(meta: pd.DataFrame, position: int) -> Any:
    """The dtype of column ``position``, or of index level ``-1 - position``."""
    return meta.index.get_level_values(-1 - position).dtype if position < 0 else meta.dtypes.iloc[position]


def _stats(part: pd.DataFrame, texts: list, keyed: list, key: Callable | None) -> list[int]:
    """One partition's length, what each of ``texts`` holds and its longest string, then each key's longest."""
    out = [len(part)]
    for p, label in texts:
        column = _column(part, p, label)
        held = text.content(column)
        out += [held, text.longest(column, label) if held < 2 else 0]
    return out + [text.longest(pd.Series(key(_column(part, p, label))), label) for p, label in keyed]


def _plan(df: Any, meta: pd.DataFrame, keys: list[tuple[Any, int]], descending: tuple[bool, ...], na_first: bool,
          key: Callable | None, widths: tuple[dict[int, int], dict[int, int]], ignore_index: bool) -> _Plan:
    if key is None:
        key_fields = tuple(_field(meta, label, i, True, widths[0]) for label, i in keys)
    else:
        key_fields = tuple(_field(meta, label, i, True, widths[1], _key_dtype(df, label, i, key), key)
                           for label, i in keys)
    # For ignore_index, the index neither travels nor comes back (nor need its dtype be one that travels).
    index = () if ignore_index else tuple(_field(meta, name, -1 - lv, False, widths[0])
                                          for lv, name in enumerate(meta.index.names))
    columns = tuple(_field(meta, label, i, False, widths[0]) for i, label in enumerate(meta.columns))
    # Order keys of every dtype but floats decode to exactly their bits: float keys, keys through key= and
    # index levels travel as records, with the other columns.  A record is never empty: the first field
    # travels where nothing else would.
    exact = {f.position for f in key_fields
             if f.storage.kind not in "fV" and f.key is None and f.position >= 0}
    carried = tuple(f for f in (*index, *columns) if f.position not in exact) or (*columns, *key_fields)[:1]
    # A 1-bit column before a key puts its missing values first or last: before strings and categoricals
    # (whose order keys know no missing value), and before floats and datetimes for na_position="first".
    where = "first" if na_first else "last"
    na_column = tuple(where if f.text or isinstance(f.dtype, pd.CategoricalDtype) or (na_first and f.storage.kind
                                                                                      in "fmM") else None
                      for f in key_fields)
    bits = [w for f, d, na in zip(key_fields, descending, na_column) for w in [1] * (na is not None)
            + _key_widths(f, d)]
    return _Plan(columns, index, isinstance(meta.index, pd.MultiIndex), key_fields, descending, na_column, carried,
                 composite.Layout(tuple(bits)))


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


def _decode(plan: _Plan, okeys: np.ndarray, records: np.ndarray, start: int) -> pd.DataFrame:
    """One output partition from its sorted composite keys and records; ``start``: its first row's number."""
    values: dict[int, np.ndarray] = {}
    at = 0
    for f in plan.carried:
        values[f.position] = records[:, at:at + f.storage.itemsize].copy().view(f.storage).reshape(len(records))
        at += f.storage.itemsize
    column = 0
    for f, d, na in zip(plan.keys, plan.descending, plan.na_column):
        column += na is not None
        if f.position >= 0 and f.position not in values:  # an index level's key travels when the index does
            values[f.position] = order.decode_column(plan.layout.unpack(okeys, column), f.storage, d, "tied")
        column += len(_key_widths(f, d))
    levels = [f.rebuild(values[f.position]) for f in plan.index]
    if not plan.index:
        index = pd.RangeIndex(start, start + len(records))
    elif plan.multi_index:
        index = pd.MultiIndex.from_arrays(levels, names=[f.label for f in plan.index])
    else:
        index = pd.Index(levels[0], name=plan.index[0].label)
    out = pd.DataFrame({i: f.rebuild(values[i]) for i, f in enumerate(plan.columns)}, index=index)
    out.columns = pd.Index([f.label for f in plan.columns])
    return out
