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
    (lambda: pdf_with(), [], {}, ValueError, r"by is empty"),
    (lambda: pdf_with(j=[0, 1, 2]), ["k", "j"], {"ascending": [True]}, ValueError,
     r"ascending has 1 entries but by names 2 columns"),
    (lambda: pdf_with(), "k", {"ascending": "yes"}, TypeError, r"ascending must be True or False"),
    (lambda: pdf_with(), ["k"], {"ascending": [1]}, TypeError, r"ascending\[0\] must be True or False"),
    (lambda: pdf_with(), "k", {"npartitions": 0}, ValueError, r"npartitions must be a positive int"),
    (lambda: pdf_with(s=["a", "b", "c"]), "k", {}, TypeError, r"column 's' has dtype .*categorize\(columns=\['s'\]\)"),
    (lambda: pdf_with(s=["a", "b", "c"]), "s", {}, TypeError, r"column 's' has dtype .* cannot sort by"),
    (lambda: pdf_with(n=pd.array([1, None, 2], "Int64")), "k", {}, TypeError, r"column 'n' has dtype Int64"),
    (lambda: pdf_with(c=pd.Categorical(["a", "b", "a"])), "c", {}, TypeError, r"column 'c' has dtype category"),
    (lambda: pdf_with().set_index(pd.Index(["a", "b", "c"])), "k", {}, TypeError, r"df's index has dtype"),
])
def test_bad_arguments_are_named(make, by, kwargs, error, match):
    ddf = dd.from_pandas(make(), npartitions=2)
    with pytest.raises(error, match=match):
        gpusort.sort_values(ddf, by, **kwargs)


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
