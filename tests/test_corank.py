import numpy as np
from hypothesis import given, settings, strategies as st

from gpusort import corank


def strict_prefix_counts(runs, r):
    """Elements of each run among the first r in (key, run, position) order."""
    keys = np.concatenate(runs)
    run_of = np.repeat(np.arange(len(runs)), [len(x) for x in runs])
    return np.bincount(run_of[np.argsort(keys, kind="stable")[:r]], minlength=len(runs))


@st.composite
def sorted_runs(draw):
    nruns = draw(st.integers(1, 40))
    distinct = draw(st.integers(1, 6))
    runs = []
    for _ in range(nruns):
        n = draw(st.integers(0, 40))
        run = np.sort(np.array(draw(st.lists(st.integers(0, distinct), min_size=n, max_size=n)), float))
        nan = draw(st.integers(0, n))
        run[len(run) - nan:] = np.nan
        runs.append(run)
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
