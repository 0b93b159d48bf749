import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gpusort.keys import corank


def strict_prefix_counts(runs, r):
    """Elements of each run among the first r in (key, run, position) order."""
    keys = np.concatenate(runs)
    run_of = np.repeat(np.arange(len(runs)), [len(x) for x in runs])
    return np.bincount(run_of[np.argsort(keys, kind="stable")[:r]], minlength=len(runs))


def extremes(dtype):
    """Sorted distinct keys of ``dtype`` that include both ends of its range (NaN for floats)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return np.array([-np.inf, -1.0, -0.0, 0.0, 0.5, 2.0, np.inf, np.nan], dtype)  # -0.0 ties 0.0
    if dtype.kind == "b":
        return np.array([False, True])
    info = np.iinfo(dtype)
    return np.unique(np.array([info.min, info.min + 1, 0, 1, info.max // 2, info.max - 1, info.max], dtype))


@st.composite
def sorted_runs(draw):
    """Sorted runs of one dtype, few distinct keys (ties across runs), the dtype's extremes among them."""
    table = extremes(draw(st.sampled_from([np.float64, np.int8, np.int64, np.uint64, np.bool_])))
    nruns = draw(st.integers(1, 40))
    distinct = draw(st.integers(1, len(table)))
    runs = []
    for _ in range(nruns):
        n = draw(st.integers(0, 40))
        picks = draw(st.lists(st.integers(0, distinct - 1), min_size=n, max_size=n))
        runs.append(table[np.sort(np.array(picks, dtype=np.int64))])
    return runs


@settings(max_examples=300, deadline=None)
@given(runs=sorted_runs(), g=st.integers(1, 7), data=st.data())
def test_windows_bracket_every_split_and_refine_is_exact(runs, g, data):
    lengths = [len(r) for r in runs]
    n = sum(lengths)
    ranks = np.array(sorted(set(data.draw(st.lists(st.integers(0, n), max_size=6)))), dtype=np.int64)
    lo, hi = corank.plan_windows([r[::g] for r in runs], lengths, ranks, g)
    want = np.array([strict_prefix_counts(runs, r) for r in ranks]).reshape(len(ranks), len(runs))
    assert (lo <= want).all() and (want <= hi).all()
    # The bound the sample stride is chosen by: (2P+1)·g keys per boundary.
    assert ((hi - lo).sum(axis=1) <= (2 * len(runs) + 1) * g).all()
    windows = [
        np.concatenate([run[a:b] for a, b in zip(lo[:, k], hi[:, k])] or [run[:0]])
        for k, run in enumerate(runs)
    ]
    np.testing.assert_array_equal(corank.refine_splits(ranks, lo, hi, windows), want)
    # The same splits in one step, from samples cut before (as a task per run cuts them).
    inner = ranks[(ranks > 0) & (ranks < n)]
    got = corank.exact_splits(runs, inner, g, [corank.samples(r, g) for r in runs])
    middle = [strict_prefix_counts(runs, r) for r in inner]
    np.testing.assert_array_equal(got, np.vstack([np.zeros(len(runs), np.int64), *middle, lengths]))


@pytest.mark.parametrize("dtype", [np.uint64, np.int64, np.int32, np.uint8, np.int8, np.bool_, np.float32])
def test_the_nth_sample_is_nth_of_their_sort(dtype):
    """Bisection over integer keys (and one sort of other keys) finds every order statistic of the runs together."""
    rng = np.random.default_rng(7)
    table = extremes(dtype)
    runs = [np.sort(table[rng.integers(0, len(table), rng.integers(0, 300))]) for _ in range(9)]
    runs += [np.full(50, table[0]), np.full(50, table[-1]), table[:0]]
    merged = np.sort(np.concatenate(runs))
    index = np.arange(len(merged))
    np.testing.assert_array_equal(corank._nth_keys(runs)(index).view(np.uint8), merged.view(np.uint8))


def test_samples_cut_before_need_their_stride():
    runs = [np.arange(10), np.arange(5, 15)]
    with pytest.raises(ValueError, match="stride g"):
        corank.exact_splits(runs, np.array([10]), None, [r[::2] for r in runs])


def test_output_ranks_are_exactly_balanced():
    np.testing.assert_array_equal(corank.output_ranks(10, 4), [0, 4, 8, 10])
    np.testing.assert_array_equal(corank.output_ranks(8, 4), [0, 4, 8])
    np.testing.assert_array_equal(corank.output_ranks(0, 4), [0, 0])


def test_sample_stride_keeps_splitting_a_small_fraction():
    n, p, j = 2**24, 16, 16
    g = corank.sample_stride(n, p, j - 1)
    cost = corank.split_cost([n // p] * p, j - 1, g)
    assert cost < 0.02 * n
    assert corank.sample_stride(100, 4, 0) == 100  # one output chunk: no windows
