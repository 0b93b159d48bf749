"""``gpusort.sort_values`` against pandas' ``sort_values(kind="stable", na_position="last")``.

Every result is compared whole (index, every column, dtypes) after
concatenating the partitions, float columns also by their bits, and the
partition lengths must be exactly balanced.
"""

from __future__ import annotations

import datetime

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from distributed import Client, LocalCluster
from hypothesis import given, settings, strategies as st

import gpusort

SPECIAL = [np.nan, -0.0, 0.0, 1.5, -np.inf, np.inf]


def frame(rng, n: int) -> pd.DataFrame:
    """Few distinct values per column (so later keys decide), NaN, NaT, both zeros, every dtype sort_values takes."""
    moments = pd.to_datetime(rng.integers(0, 4, n) * 10**9)
    pdf = pd.DataFrame({
        "i": rng.integers(-2, 2, n),
        "f": rng.choice(np.array(SPECIAL), n),
        "t": moments.where(rng.random(n) > 0.2),
        "u": rng.integers(0, 3, n).astype(np.uint16),
        "b": rng.random(n) > 0.5,
        # A fixed offset: a named zone needs a time-zone database, which some hosts lack.
        "tz": moments.tz_localize("UTC").tz_convert(datetime.timezone(datetime.timedelta(hours=-5))),
        "g": rng.choice(np.array([1.0, -0.0, 0.0, np.nan], np.float32), n),
        "d": pd.to_timedelta(rng.integers(0, 3, n), unit="s"),
        "c": pd.Categorical.from_codes(rng.integers(-1, 2, n), categories=["x", "y"]),  # code -1: NaN
        "x": rng.standard_normal(n),
    })
    pdf.index = pd.Index(rng.permutation(n) * 3, name="ix")
    return pdf


def pieces(pdf: pd.DataFrame, cuts) -> dd.DataFrame:
    """A Dask DataFrame whose partitions are ``pdf`` cut at ``cuts`` (empty partitions too), in this order."""
    bounds = [0, *cuts, len(pdf)]
    return dd.from_delayed([dask.delayed(pdf.iloc[a:b]) for a, b in zip(bounds[:-1], bounds[1:])],
                           meta=pdf.iloc[:0], verify_meta=False)


def check(got: dd.DataFrame, pdf: pd.DataFrame, by, ascending, npartitions: int) -> None:
    lengths = got.map_partitions(len).compute().tolist()
    per = max(1, -(-len(pdf) // npartitions))
    assert len(lengths) == npartitions and lengths == [min(per, max(len(pdf) - j * per, 0))
                                                       for j in range(npartitions)]
    out = got.compute()
    want = pdf.sort_values(by, ascending=ascending, kind="stable", na_position="last")
    pd.testing.assert_frame_equal(out, want)
    for name in out.columns[out.dtypes.map(lambda t: t.kind == "f")]:  # the zeros and NaNs keep their bits
        np.testing.assert_array_equal(out[name].to_numpy().view(np.uint8), want[name].to_numpy().view(np.uint8))


KEYS = ["i", "f", "t", "u", "b", "tz", "g", "d", "ix"]


@st.composite
def cases(draw):
    n = draw(st.integers(0, 200))
    pdf = frame(np.random.default_rng(draw(st.integers(0, 2**32))), n)
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=8)))
    by = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True))
    ascending = draw(st.one_of(st.booleans(), st.lists(st.booleans(), min_size=len(by), max_size=len(by))))
    return pdf, cuts, by, ascending, draw(st.integers(1, 9))


@settings(max_examples=60, deadline=None)
@given(cases())
def test_sort_values_matches_pandas(case):
    pdf, cuts, by, ascending, npartitions = case
    before = pdf.copy()
    got = gpusort.sort_values(pieces(pdf, cuts), by, ascending, npartitions=npartitions)
    check(got, pdf, by, ascending, npartitions)
    pd.testing.assert_frame_equal(pdf, before)


@pytest.mark.parametrize("by, ascending", [
    ("f", True), ("f", False), (["i", "f"], [False, True]), (["t", "b", "g"], [True, False, False]),
    (["d", "tz", "u", "ix"], [False, True, False, True]), (["g", "t"], False),
])
def test_keys_mixed_directions_nan_nat_and_duplicates(by, ascending):
    pdf = frame(np.random.default_rng(3), 3000)
    check(gpusort.sort_values(pieces(pdf, [500, 500, 1200, 2999]), by, ascending, npartitions=4),
          pdf, by, ascending, 4)


def test_default_partitions_extremes_and_few_rows():
    pdf = pd.DataFrame({"k": np.array([np.iinfo(np.int64).max, np.iinfo(np.int64).min, 0, -1, 1] * 3),
                        "v": np.arange(15, dtype=np.int8)})
    ddf = pieces(pdf, [4, 9])
    got = gpusort.sort_values(ddf, "k", ascending=False)
    assert got.npartitions == ddf.npartitions
    check(got, pdf, "k", False, 3)
    check(gpusort.sort_values(ddf, ["k"], npartitions=20), pdf, ["k"], True, 20)  # 15 rows: 5 empty at the end
    empty = pdf.iloc[:0]
    check(gpusort.sort_values(pieces(empty, []), "k", npartitions=2), empty, "k", True, 2)


def test_hundreds_of_partitions():
    pdf = frame(np.random.default_rng(8), 20_000)
    ddf = dd.from_pandas(pdf, npartitions=250, sort=False)
    check(gpusort.sort_values(ddf, ["i", "x"], [True, False], npartitions=300), pdf, ["i", "x"], [True, False], 300)


def test_building_computes_the_partition_lengths_only():
    calls = []

    def counted(part):
        calls.append(len(part))
        return part

    pdf = frame(np.random.default_rng(4), 100)
    ddf = dd.from_pandas(pdf, npartitions=4, sort=False).map_partitions(counted, meta=pdf.iloc[:0])
    with dask.config.set(scheduler="sync"):
        got = gpusort.sort_values(ddf, "i")
        assert len(calls) == 4  # one pass for the lengths
        assert got.npartitions == 4 and not got.known_divisions
        got.compute()
    assert len(calls) == 8


def pdf_with(**columns) -> pd.DataFrame:
    return pd.DataFrame({"k": [2, 1, 2], **columns})


@pytest.mark.parametrize("make, by, kwargs, error, match", [
    (lambda: pdf_with(), "nope", {}, KeyError, r"by names 'nope'.*columns: \['k'\]"),
    (lambda: pdf_with(), ["k", "zz"], {}, KeyError, r"'zz'"),
    (lambda: pdf_with(j=[0, 1, 2]), ["k", "j"], {"ascending": [True]}, ValueError,
     r"Length of ascending \(1\) != length of by \(2\)"),
    (lambda: pdf_with(), "k", {"ascending": "False"}, ValueError, r"ascending must be a bool .*got 'False'"),
    (lambda: pdf_with(), ["k"], {"ascending": [1.0]}, ValueError, r"ascending\[0\] must be a bool .* float"),
    (lambda: pdf_with(), "k", {"ascending": None}, ValueError, r"ascending must be a bool"),
    (lambda: pdf_with(), "k", {"na_position": "middle"}, ValueError, r"invalid na_position: 'middle'"),
    (lambda: pdf_with(), "k", {"key": "abs"}, TypeError, r"key must be a callable"),
    (lambda: pdf_with(), "k", {"key": lambda s: s * 1j}, TypeError, r"column 'k' after key= has dtype complex128"),
    (lambda: pdf_with(), "k", {"npartitions": 0}, ValueError, r"npartitions must be a positive int"),
    (lambda: pdf_with(), "k", {"key": lambda s: s[:1]}, ValueError, r"key.*must not change the shape.* 1 keys"),
    (lambda: pdf_with(), "k", {"axis": 1}, NotImplementedError, r"does not support axis=1"),
    (lambda: pdf_with(), "k", {"axis": "rows"}, ValueError, r"No axis named 'rows'"),
    (lambda: pdf_with(), "k", {"inplace": True}, NotImplementedError, r"does not support inplace=True.*assign"),
    (lambda: pdf_with(), "k", {"inplace": "no"}, ValueError, r'argument "inplace" expected type bool'),
    (lambda: pdf_with(), "k", {"kind": "bogo"}, ValueError, r"kind must be 'stable'.*got 'bogo'"),
    (lambda: pdf_with(s=[1 + 1j, 2j, 0j]), "s", {}, TypeError, r"column 's' has dtype complex128.* cannot sort by"),
    (lambda: pdf_with(n=pd.array([1, None, 2], "Int64")), "k", {}, TypeError, r"column 'n' has dtype Int64"),
])
def test_bad_arguments_are_named(make, by, kwargs, error, match):
    ddf = dd.from_pandas(make(), npartitions=2)
    with pytest.raises(error, match=match):
        gpusort.sort_values(ddf, by, **kwargs)


def test_an_object_column_of_other_than_str_is_named():
    with dask.config.set({"dataframe.convert-string": False}):
        ddf = dd.from_pandas(pdf_with(o=pd.Series([b"a", 1, None], dtype=object)), npartitions=2)
        with pytest.raises(TypeError, match=r"column 'o' has dtype object but holds something other than str"):
            gpusort.sort_values(ddf, "k")


def test_object_columns_of_ints_and_of_floats_sort_and_travel_as_objects():
    """pandas' transposed frames hold numbers as objects: they sort as numbers and come back as objects.

    Not in the index: pandas' concat of the partitions (``Index.append``)
    infers int64 from an object Index of ints, whoever sorted it.
    """
    rng = np.random.default_rng(10)
    pdf = pd.DataFrame({"i": pd.Series(rng.integers(-3, 3, 60).tolist(), dtype=object),
                        "f": pd.Series(rng.choice([np.nan, -1.5, 0.0, 2.0], 60).tolist(), dtype=object),
                        "s": pd.Series(rng.choice(["a", None, "b"], 60).tolist(), dtype=object)})
    with dask.config.set({"dataframe.convert-string": False}):
        for by, ascending in [("i", True), (["f", "i"], [False, True]), (["s", "i"], True)]:
            pandas_like(pdf, by, cuts=(0, 25, 25, 50), ascending=ascending)
        pandas_like(pdf, ["f", "i"], ascending=[True, False], na_position="first")


def test_an_object_column_of_numbers_in_some_partitions_and_strings_in_others_is_named():
    pdf = pd.DataFrame({"k": [2, 1, 2, 1], "o": pd.Series([1, 2, "a", "b"], dtype=object)})
    with dask.config.set({"dataframe.convert-string": False}), \
            pytest.raises(TypeError, match=r"column 'o' has dtype object and holds strings, ints or floats in some"):
        gpusort.sort_values(pieces(pdf, [2]), "k")


def test_what_is_not_a_dask_dataframe_is_refused():
    with pytest.raises(TypeError, match=r"df is a pandas DataFrame.*from_pandas"):
        gpusort.sort_values(pdf_with(), "k")
    with pytest.raises(TypeError, match=r"Dask DataFrame; got Series"):
        gpusort.sort_values(dd.from_pandas(pdf_with(), npartitions=1)["k"], "k")
    pdf = pdf_with(k2=[0, 0, 0])
    pdf.columns = ["k", "k"]
    with pytest.raises(ValueError, match=r"column 'k', which df has 2 times"):
        gpusort.sort_values(dd.from_pandas(pdf, npartitions=1), "k")
    unknown = dd.from_pandas(pdf_with(c=pd.Categorical(["a", "b", "a"])), npartitions=1).clear_divisions()
    unknown["c"] = unknown["c"].cat.as_unknown()
    with pytest.raises(TypeError, match=r"column 'c' is categorical with unknown categories.*categorize"):
        gpusort.sort_values(unknown, "k")


def pandas_like(pdf: pd.DataFrame, by, cuts=(3, 3, 9), ascending=True, **kwargs) -> None:
    """gpusort's sort_values of ``pdf`` in pieces against pandas', whole, with the same arguments.

    pandas' sort by one key, stably, from the last key to the first: with
    several keys and ``na_position="first"`` pandas 3.1 ties ``-inf`` with
    NaN, which its sort by one key does not.
    """
    got = gpusort.sort_values(pieces(pdf, list(cuts)), by, ascending=ascending, **kwargs).compute()
    by = by if isinstance(by, list) else [by]
    ascending = ascending if isinstance(ascending, list) else [ascending] * len(by)
    want = pdf
    for label, up in reversed(list(zip(by, ascending))):
        want = want.sort_values(label, ascending=up, kind="stable", **kwargs)
    pd.testing.assert_frame_equal(got, want)


@pytest.mark.parametrize("by, ascending", [(["i", "u"], [0, 1]), (["i", "u"], [1, 0]), ("i", 1), ("f", 0),
                                           (["u", "i"], [np.True_, False])])
def test_ascending_takes_ints_as_pandas_does(by, ascending):
    pandas_like(frame(np.random.default_rng(2), 40), by, ascending=ascending)


def test_a_key_whose_dtype_changes_with_the_rows_is_named():
    """pandas' ``dt.second`` is int32 without NaT and float64 with it: the plan's dtype cannot hold both."""
    pdf = frame(np.random.default_rng(8), 50)
    with pytest.raises(TypeError, match=r"key= returned dtype float64 for 't' in a partition, but int32"):
        gpusort.sort_values(pieces(pdf, [20]), "t", key=lambda s: s.dt.second).compute()


@pytest.mark.parametrize("by, npartitions", [(["i", "f"], 3), ("ix", 2), (["f", "x"], 5)])
def test_ignore_index_numbers_the_rows_in_every_partition(by, npartitions):
    pdf = frame(np.random.default_rng(9), 40)
    got = gpusort.sort_values(pieces(pdf, [7, 7, 30]), by, npartitions=npartitions, ignore_index=True,
                              kind="quicksort")
    assert isinstance(got._meta.index, pd.RangeIndex)
    starts = got.map_partitions(lambda part: pd.Series([part.index.min()])).compute().tolist()
    assert starts == list(range(0, 40, -(-40 // npartitions)))
    pd.testing.assert_frame_equal(got.compute(), pdf.sort_values(by, kind="stable", ignore_index=True))


def test_ignore_index_of_a_frame_whose_only_column_is_the_key():
    """Nothing but the key would travel: it travels as a record too, as a record is never empty."""
    pdf = pd.DataFrame({"k": [3, 1, 2, 1]}, index=pd.Index(["d", "c", "b", "a"], dtype=object))
    got = gpusort.sort_values(dd.from_pandas(pdf, npartitions=2, sort=False), "k", ignore_index=True)
    pd.testing.assert_frame_equal(got.compute(), pdf.sort_values("k", kind="stable", ignore_index=True))
    # pandas takes any truth value for ignore_index (it checks inplace's type alone)
    got = gpusort.sort_values(dd.from_pandas(pdf, npartitions=2, sort=False), "k", ignore_index=1)
    pd.testing.assert_frame_equal(got.compute(), pdf.sort_values("k", kind="stable", ignore_index=1))


def test_by_nothing_returns_the_frame():
    ddf = dd.from_pandas(frame(np.random.default_rng(3), 10), npartitions=2)
    assert gpusort.sort_values(ddf, []) is ddf


def test_a_column_labelled_none():
    """Dask holds the label None as NaN: by=None names it, as pandas' by=None names its column None."""
    pdf = pd.DataFrame({"k": [2, 1, 2, 0], None: [1.0, np.nan, -1.0, 1.0]})
    got = gpusort.sort_values(dd.from_pandas(pdf, npartitions=2), [None, "k"]).compute()
    want = pdf.sort_values([None, "k"], kind="stable")
    want.columns = got.columns
    pd.testing.assert_frame_equal(got, want)


@pytest.mark.parametrize("by, ascending", [(["f", "i"], True), (["t", "g", "d"], [False, True, False]),
                                           (["i", "f"], [True, False]), ("ix", False)])
def test_na_position_first(by, ascending):
    pdf = frame(np.random.default_rng(5), 300)
    pandas_like(pdf, by, cuts=(0, 100, 100, 250), ascending=ascending, na_position="first")


@pytest.mark.parametrize("key, by", [(lambda s: -s, ["i", "f"]), (lambda s: s.abs(), ["f", "x"]),
                                     (lambda s: s % 2 if s.name == "i" else s, ["i", "u"]),
                                     (lambda s: s.dt.second.astype("float64"), ["t"]), (lambda s: s.astype("float32"), ["ix"])])
def test_key_is_applied_to_every_key_before_the_sort(key, by):
    pdf = frame(np.random.default_rng(6), 200)
    pandas_like(pdf, by, key=key)
    pandas_like(pdf, by, key=key, ascending=False, na_position="first")


@pytest.mark.parametrize("by", ["i", "lv1", ["lv0", "i"], ["f", "lv1", "lv0"]])
def test_a_multiindex_is_carried_and_its_levels_sort(by):
    pdf = frame(np.random.default_rng(7), 150).reset_index(drop=True)
    pdf.index = pd.MultiIndex.from_arrays([pdf.pop("u"), pdf["t"].rename(None)], names=["lv0", "lv1"])
    pandas_like(pdf, by, cuts=(10, 10, 75))
    pandas_like(pdf, by, ascending=False, na_position="first")


TEXT = np.array(["", "a", "a\x00", "a\x00b", "ab", "B", "b", "é", "日本語", "a b", "zz" * 9], dtype=object)


def text_frame(rng, n: int, distinct: int = len(TEXT)) -> pd.DataFrame:
    """Strings of every kind (empty, NUL inside and at the end, non-ASCII, one of 18 bytes, missing), few distinct."""
    s = pd.Series(rng.choice(TEXT[:distinct], n), dtype=object)
    s[rng.random(n) < 0.15] = None
    pdf = pd.DataFrame({"s": s.astype("string"), "i": rng.integers(0, 3, n), "o": s.copy(),
                        "c": pd.Categorical.from_codes(rng.integers(-1, 3, n), categories=["z", "a", "m"],
                                                       ordered=bool(rng.integers(2))),
                        "f": rng.choice(np.array(SPECIAL), n)})
    pdf.index = pd.Index(rng.choice(TEXT, n), dtype="string", name="ix")
    return pdf


@pytest.mark.parametrize("by, ascending, na_position", [
    ("s", True, "last"), ("s", False, "first"), (["s", "i"], [False, True], "last"), (["i", "o"], [True, False], "first"),
    (["c", "s"], [True, False], "last"), ("c", False, "first"), (["f", "c", "o"], True, "first"), ("ix", True, "last"),
])
@pytest.mark.parametrize("distinct", [1, 3, len(TEXT)])
def test_strings_and_categoricals_sort_and_travel_as_pandas_sorts_them(by, ascending, na_position, distinct):
    """String keys in Python's order of code points, categoricals by category order; every column carried."""
    with dask.config.set({"dataframe.convert-string": False}):  # object columns stay object
        pandas_like(text_frame(np.random.default_rng(distinct), 120, distinct), by, cuts=(0, 7, 7, 100),
                    ascending=ascending, na_position=na_position)


def adversarial_strings(rng, n: int) -> pd.Series:
    """Strings that the first key word cannot tell apart: long shared prefixes, equal prefixes of other lengths,
    NUL inside and at the end, non-ASCII past byte 8, empty and missing."""
    stems = ["", "\x00", "a", "abcdefgh", "abcdefg\x00", "abcdefghi", "abcdefgh\x00", "abcdefgh\x00a",
             "abcdefghabcdefgh", "abcdefghabcdefgi", "abcdefghabcdefg", "abcdefghabcdefgh\x00", "abcdefgé",
             "abcdefghé", "abcdefgh日本", "prefix-shared-by-many-", "abcdefgi"]
    words = [stem + tail for stem in stems for tail in ("", "x", "y\x00z", "é", "xx" * 5)]
    s = pd.Series(np.array(words, dtype=object)[rng.integers(0, len(words), n)], dtype=object)
    s[rng.random(n) < 0.05] = None
    return s


@pytest.mark.parametrize("by, ascending, na_position", [
    ("s", True, "last"), ("s", False, "first"), (["i", "s"], [False, True], "first"), (["s", "i"], [False, True], "last"),
    (["o", "i"], [True, False], "last"),
])
def test_strings_that_tie_in_their_first_bytes_sort_exactly(by, ascending, na_position):
    """Keys decided past their first word, with many rows tied there: the ties' pass keeps pandas' stable order."""
    rng = np.random.default_rng(48)
    s = adversarial_strings(rng, 3000)
    pdf = pd.DataFrame({"s": s.astype("string"), "i": rng.integers(0, 3, len(s)), "o": s,
                        "x": rng.standard_normal(len(s))})
    with dask.config.set({"dataframe.convert-string": False}):
        pandas_like(pdf, by, cuts=(0, 700, 701, 2000), ascending=ascending, na_position=na_position)


def test_string_records_gather_narrow_and_scatter_wide_alike():
    """text.records' two ways (a blob per row for narrow columns, bytes scattered for wide ones) agree."""
    from gpusort.keys import text

    rng = np.random.default_rng(5)
    s = adversarial_strings(rng, 500).astype("string")
    lengths = s.map(lambda v: -1 if v is pd.NA else len(v.encode())).to_numpy()
    for values in (s, s.iloc[37:], s.iloc[:0], pd.Series([None, ""], dtype="string")):
        width = max(int(lengths.max()), 1)
        narrow, wide = text.records(values, width, "s"), text.records(values, 400, "s")  # 400: scattered
        want = [(-1, b"") if v is pd.NA else (len(v.encode()), v.encode()) for v in values]
        assert narrow["n"].tolist() == wide["n"].tolist() == [n for n, _ in want]
        for recs in (narrow, wide):
            assert [bytes(r).rstrip(b"\x00") for r in recs["b"]] == [b.rstrip(b"\x00") for _, b in want]
            assert not recs["b"][recs["n"] < 0].any()
            assert not (recs["b"] * (np.arange(recs["b"].shape[1]) >= recs["n"][:, None])).any()  # zero padded


def test_strings_in_balanced_partitions_on_dask_s_own_string_dtype():
    pdf = text_frame(np.random.default_rng(11), 500)
    ddf = dd.from_pandas(pdf, npartitions=7, sort=False)  # dask makes the object column string[pyarrow]
    got = gpusort.sort_values(ddf, ["o", "i"], [False, True], npartitions=4)
    assert got.map_partitions(len).compute().tolist() == [125] * 4
    pd.testing.assert_frame_equal(got.compute(), ddf.compute().sort_values("i", kind="stable")
                                  .sort_values("o", ascending=False, kind="stable"))


def test_a_multiindex_of_strings_and_a_key_that_returns_strings():
    pdf = text_frame(np.random.default_rng(12), 90)
    pdf.index = pd.MultiIndex.from_arrays([pdf.index, pdf.pop("i")], names=["ix", "lv"])
    with dask.config.set({"dataframe.convert-string": False}):
        pandas_like(pdf, ["lv", "ix"], ascending=[False, True])
        pandas_like(pdf, ["f", "s"], key=lambda s: s.astype(str).str.upper() if s.name == "s" else s)


@pytest.mark.gpu
def test_sort_values_on_the_gpu():
    pytest.importorskip("cupy")
    pdf = frame(np.random.default_rng(21), 5000)
    check(gpusort.sort_values(dd.from_pandas(pdf, npartitions=3, sort=False), ["f", "i"], [False, True],
                              backend="cupy"), pdf, ["f", "i"], [False, True], 3)


def test_sort_values_on_worker_processes():
    pdf = frame(np.random.default_rng(9), 50_000)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        with Client(cluster):
            ddf = dd.from_pandas(pdf, npartitions=6, sort=False).persist()
            for by, ascending in ((["i", "t", "f"], [True, False, True]), ("x", False)):
                check(gpusort.sort_values(ddf, by, ascending, npartitions=5), pdf, by, ascending, 5)
