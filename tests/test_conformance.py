"""pandas' and Dask's own ``sort_values`` tests, routed through ``gpusort.sort_values``.

Each runs in a process of its own (:mod:`tests.pandas_conformance`,
:mod:`tests.dask_conformance`): the other project's conftests, options and
warning filters stay out of this suite.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys

import pytest

from pandas_conformance import pandas_test_file

HERE = os.path.dirname(os.path.abspath(__file__))


def run_module(name: str, *args: str) -> subprocess.CompletedProcess:
    """``python -m tests.<name> args`` from the repository's root, this tree's gpusort first on the path."""
    root = os.path.dirname(HERE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", f"tests.{name}", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(pandas_test_file() is None, reason="pandas was installed without its tests "
                    "(pandas/tests/frame/methods/test_sort_values.py)")
def test_pandas_sort_values_tests_match_or_are_refused_by_name():
    """Every call either matches pandas exactly or is refused by an error of gpusort's own; none differs."""
    done = run_module("pandas_conformance", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    outcomes = json.loads(done.stdout)
    counts = collections.Counter(o["kind"] for o in outcomes)
    wrong = [o for o in outcomes if o["kind"] in ("mismatch", "unclear", "unrepresentable")]
    assert not wrong, f"{counts}: " + "\n".join(f"{o['test']} ({o['call']}): {o['detail']}" for o in wrong[:10])
    # What is refused: object columns of numbers and sparse columns, each named with its dtype.
    assert all("has dtype" in o["detail"] for o in outcomes if o["kind"] == "refused")
    assert counts["match"] >= 230, counts


def test_dask_sort_values_tests_pass():
    """Dask's tests that call sort_values pass with gpusort's in place, but one of Dask's own partitioning.

    ``test_compute_current_divisions_nan_partition`` asserts where Dask's
    sort cuts its partitions (divisions ``(4, 5, 8, 9)``); gpusort's are
    exactly balanced (``(4, 6, 8, 9)``), as documented.
    """
    done = run_module("dask_conformance", "-q", "-k", "not test_compute_current_divisions_nan_partition")
    assert done.returncode == 0, done.stdout[-5000:]
