"""GPU memory budgets, planned and carried out with a NumPy stand-in for the GPU (no GPU needed).

:mod:`gpusort.memory.plan` sizes every GPU step of the out-of-core path and runs
sorts and merges in pieces that fit.  Here the "device" is NumPy that checks
each step's footprint against the budget, so the piecewise algorithms are
proved exact (stable, ties in piece order) on any machine.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpusort.backends import BackendSpec, backend_spec, get_backend
from gpusort.memory import plan


class NumpySteps:
    """A :class:`gpusort.memory.plan.Device` on the CPU that records and checks every step."""

    def __init__(self, budget: int):
        self.budget = budget
        self.sorts: list[int] = []
        self.merges: list[int] = []

    def empty(self, n, dtype):
        return np.empty(n, dtype)

    def _fits(self, cost, n, keys, values):
        vb = 0 if values is None else values.dtype.itemsize
        assert cost(n, keys.dtype.itemsize, vb) <= self.budget, (n, self.budget)

    def sort(self, keys, values, out):
        self._fits(plan.sort_bytes, len(keys), keys, values)
        self.sorts.append(len(keys))
        order = np.argsort(keys, kind="stable")
        out[0][:] = keys[order]
        if values is not None:
            out[1][:] = values[order]

    def merge(self, pieces, out):
        keys = np.concatenate([k for k, _ in pieces])
        self._fits(plan.merge_bytes, len(keys), keys, pieces[0][1])
        self.merges.append(len(keys))
        order = np.argsort(keys, kind="stable")  # ties: piece order, then position
        out[0][:] = keys[order]
        if pieces[0][1] is not None:
            out[1][:] = np.concatenate([v for _, v in pieces])[order]


def budget_for(n_elements: int, key_bytes: int = 8, value_bytes: int = 0) -> int:
    """A budget whose merges hold about ``n_elements``."""
    return plan.merge_bytes(n_elements, key_bytes, value_bytes)


@pytest.mark.parametrize("text, expected", [("2GiB", 2 * 2**30), ("64 MiB", 64 * 2**20), (10**9, 10**9),
                                            (None, None)])
def test_parse_budget(text, expected):
    assert plan.parse_budget(text) == expected


@pytest.mark.parametrize("bad, error", [("lots", ValueError), (1024, ValueError), (True, TypeError),
                                        (2.5e9, TypeError), (-5, ValueError)])
def test_parse_budget_errors_name_the_argument(bad, error):
    with pytest.raises(error, match="gpu_memory_budget"):
        plan.parse_budget(bad)


def test_largest_fit_is_the_boundary():
    for budget in (2**23, 10**7 + 3, 2**31):
        for kb, vb in ((8, 0), (4, 8), (1, 1)):
            most = plan.largest_fit(lambda n: plan.sort_bytes(n, kb, vb), budget)
            assert plan.sort_bytes(most, kb, vb) <= budget < plan.sort_bytes(most + 1, kb, vb)
    assert plan.largest_fit(lambda n: plan.sort_bytes(n, 8), plan.FIXED_BYTES) == 0


def test_footprint_is_two_copies():
    n = 2**26
    # Keys only: two copies and the bucket pass's byte a key.
    assert 2 * n * 8 + n <= plan.sort_bytes(n, 8) <= 2.16 * n * 8 + plan.FIXED_BYTES
    assert 2 * n * 16 <= plan.sort_bytes(n, 8, 8) <= 2.02 * n * 16 + plan.FIXED_BYTES
    assert 2 * n * 16 <= plan.merge_bytes(n, 8, 8) <= 2.02 * n * 16 + plan.FIXED_BYTES


@pytest.mark.parametrize("n, most", [(0, 5), (1, 1), (10, 3), (10, 10), (10, 100), (2**31, 2**26 + 1)])
def test_piece_bounds_cover_evenly(n, most):
    bounds = plan.piece_bounds(n, most)
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(b1 == a2 for (_, b1), (a2, _) in zip(bounds, bounds[1:]))
    sizes = [b - a for a, b in bounds]
    assert max(sizes) <= max(most, 0) or n == 0
    assert max(sizes) - min(sizes) <= 1
    assert len(bounds) == max(1, -(-n // most))


@pytest.mark.parametrize("kind", ["random", "few", "equal", "nan"])
@pytest.mark.parametrize("step", [1, 7, 1000, 5000])
def test_range_splits_are_exact(kind, step):
    rng = np.random.default_rng(step)
    pieces = []
    for size in (0, 1, 997, 2000, 3):
        x = {"random": rng.standard_normal(size), "few": rng.integers(0, 3, size).astype(float),
             "equal": np.zeros(size), "nan": np.where(rng.random(size) < 0.3, np.nan, rng.random(size))}[kind]
        pieces.append(np.sort(x))
    splits = plan.range_splits(pieces, step)
    keys = np.concatenate(pieces)
    piece = np.repeat(np.arange(len(pieces)), [len(p) for p in pieces])
    order = np.argsort(keys, kind="stable")  # the strict order (key, piece, position)
    n = len(keys)
    ranks = list(range(0, n, step)) + [n]
    assert splits.shape == (len(ranks), len(pieces))
    for i, r in enumerate(ranks):
        expected = np.bincount(piece[order[:r]], minlength=len(pieces))
        np.testing.assert_array_equal(splits[i], expected)


@pytest.mark.parametrize("n, elements", [(50_000, 4_000), (50_000, 49_999), (50_000, 60_000), (1, 10), (7, 2)])
@pytest.mark.parametrize("values", [False, True])
def test_sort_within_matches_stable_sort_and_fits(n, elements, values):
    rng = np.random.default_rng(n + elements)
    keys = rng.integers(0, 50, n).astype(np.int64)  # many duplicates: stability shows
    vals = np.arange(n, dtype=np.int64) if values else None
    budget = max(budget_for(elements, 8, 8 if values else 0), plan.sort_bytes(1, 8, 8))
    steps = NumpySteps(budget)
    k, v = plan.sort_within(keys, vals, budget, steps)
    order = np.argsort(keys, kind="stable")
    np.testing.assert_array_equal(k, keys[order])
    if values:
        np.testing.assert_array_equal(v, order)
    else:
        assert v is None
    assert sum(steps.sorts) == n
    if len(steps.sorts) > 1:  # the chunk did not fit: sub-runs, then merges in ranges
        assert sum(steps.merges) == n and len(steps.merges) >= 1


def test_data_many_times_the_budget_takes_many_small_steps(monkeypatch):
    monkeypatch.setattr(plan, "FIXED_BYTES", 4096)  # a toy budget, of a toy fixed cost
    rng = np.random.default_rng(3)
    keys = rng.standard_normal(200_000)
    keys[rng.random(keys.size) < 0.05] = np.nan
    budget = budget_for(10_000)
    assert keys.nbytes > 3 * budget
    steps = NumpySteps(budget)
    k, _ = plan.sort_within(keys, None, budget, steps)
    np.testing.assert_array_equal(k, np.sort(keys))
    assert len(steps.sorts) >= 20 and len(steps.merges) >= 20
    assert max(steps.merges) <= plan.largest_fit(lambda m: plan.merge_bytes(m, 8), budget)


@pytest.mark.parametrize("elements", [500, 3_000, 10**6])
def test_merge_within_keeps_ties_in_piece_order(elements):
    rng = np.random.default_rng(elements)
    pieces = []
    for p, size in enumerate((1000, 0, 2500, 1, 1700)):
        k = np.sort(rng.integers(0, 20, size)).astype(np.uint16)
        pieces.append((k, np.full(size, p, np.uint8)))
    budget = budget_for(elements, 2, 1)
    steps = NumpySteps(budget)
    k, v = plan.merge_within(pieces, budget, steps)
    keys = np.concatenate([k for k, _ in pieces])
    order = np.argsort(keys, kind="stable")
    np.testing.assert_array_equal(k, keys[order])
    np.testing.assert_array_equal(v, np.concatenate([v for _, v in pieces])[order])
    assert sum(steps.merges) == len(keys)


def test_budget_too_small_for_one_element_says_so():
    with pytest.raises(ValueError, match="gpu_memory_budget"):
        plan.sort_within(np.arange(5), None, plan.FIXED_BYTES, NumpySteps(plan.FIXED_BYTES))


def test_backend_spec_is_carried_and_checked():
    import pickle

    from dask.base import tokenize

    spec = BackendSpec("cupy", 2**30)
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert tokenize(spec) == tokenize(BackendSpec("cupy", 2**30)) != tokenize(BackendSpec("cupy", 2**31))
    assert backend_spec("numpy") == "numpy" and backend_spec("cupy", 5) == BackendSpec("cupy", 5)
    assert get_backend(BackendSpec("numpy")) is get_backend("numpy")
    with pytest.raises(ValueError, match="backend='cupy'"):
        BackendSpec("numpy", 2**30)
    with pytest.raises(ValueError, match="not known"):
        BackendSpec("jax")


def test_public_functions_reject_a_budget_for_the_numpy_backend():
    import dask.array as da

    import gpusort

    x = da.arange(10, chunks=5)
    for call in (lambda: gpusort.sort(x, gpu_memory_budget="1GiB"),
                 lambda: gpusort.argsort(x, backend="numpy", gpu_memory_budget=2**30),
                 lambda: gpusort.sort_by_key(x, x, gpu_memory_budget="1GiB")):
        with pytest.raises(ValueError, match="gpu_memory_budget"):
            call()
    with pytest.raises(ValueError, match="gpu_memory_budget"):
        gpusort.sort(x, gpu_memory_budget="plenty")
