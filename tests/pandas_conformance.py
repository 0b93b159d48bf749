"""pandas' own ``DataFrame.sort_values`` tests, routed through ``gpusort.sort_values``.

Runs ``pandas/tests/frame/methods/test_sort_values.py`` of the installed
pandas with ``pandas.DataFrame.sort_values`` wrapped: every call the test
file makes (with ``axis=0``, not ``inplace``) also goes through
:func:`gpusort.sort_values` -- the frame cut into a Dask DataFrame of a few
partitions, the same arguments, computed -- and the outcome is compared
with what pandas itself returned (or raised).  pandas' tests run on with
pandas' own results, so one outcome never hides the next.

Every call is one of:

``match``
    gpusort returned exactly pandas' frame (of ``kind="stable"``, whatever
    the call's ``kind``: gpusort sorts stably) (``assert_frame_equal``, exact
    values, dtypes, index and columns), or raised pandas' exception type
    where pandas refused the call.
``refused``
    pandas sorted, and gpusort raised an error of its own (raised in
    gpusort's code, not deep in a library it calls) that names what it does
    not support; these messages are listed for review.
``mismatch``
    a result other than pandas'.
``freq``
    gpusort returned exactly pandas' frame but for its index's ``freq``
    (a ``DatetimeIndex``'s regular step), which pandas keeps where the sort
    leaves every row in place or takes them at a regular step, and gpusort
    does not: it rebuilds the index from its values, partition by
    partition.
``unclear``
    an error raised outside gpusort's own checks (NumPy, pandas, Dask,
    PyArrow), or a refusal of a call pandas sorts that is not one of
    gpusort's errors.
``unrepresentable``
    Dask itself cannot hold the input frame (``from_delayed`` fails), so no
    call reaches gpusort.

Run ``python -m tests.pandas_conformance`` for the counts and every call
that did not match; :func:`run` gives the records to tests.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import inspect
import json
import os
import sys
import traceback
from dataclasses import asdict, dataclass
from typing import Any

import dask
import dask.dataframe as dd
import pandas as pd

import gpusort

TEST_FILE = os.path.join("tests", "frame", "methods", "test_sort_values.py")
"""pandas' test file, relative to the installed pandas package."""

KINDS = ("match", "refused", "freq", "mismatch", "unclear", "unrepresentable")
"""Every outcome's kind, in the order of the counts."""

PARTITIONS = 3
"""Partitions of every frame routed through gpusort (fewer when it has fewer rows)."""


@dataclass
class Outcome:
    """One ``sort_values`` call of pandas' tests, routed through gpusort."""

    test: str
    """The pandas test (its node id) that made the call."""
    call: str
    """The call's arguments, as a short text."""
    kind: str
    """``match``, ``refused``, ``mismatch``, ``freq``
    gpusort returned exactly pandas' frame but for its index's ``freq``
    (a ``DatetimeIndex``'s regular step), which pandas keeps where the sort
    leaves every row in place or takes them at a regular step, and gpusort
    does not: it rebuilds the index from its values, partition by
    partition.
``unclear`` or ``unrepresentable``."""
    detail: str = ""
    """The error message, or the first line of the difference, where it did not match."""


def pandas_test_file() -> str | None:
    """Path of pandas' ``test_sort_values.py`` in the installed pandas, or None where pandas ships no tests."""
    path = os.path.join(os.path.dirname(pd.__file__), TEST_FILE)
    return path if os.path.exists(path) else None


def _raised_by_gpusort(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by gpusort's own code: its innermost frame is in the gpusort package."""
    frames = traceback.extract_tb(exc.__traceback__)
    root = os.path.dirname(gpusort.__file__)
    return bool(frames) and os.path.abspath(frames[-1].filename).startswith(root + os.sep)


def _describe(bound: inspect.BoundArguments) -> str:
    """The call's arguments but the frame itself, briefly."""
    args = {k: v for k, v in bound.arguments.items() if k != "self"}
    return ", ".join(f"{k}={v!r}"[:80] for k, v in args.items())


class _Recorder:
    """Wraps ``DataFrame.sort_values`` for the run, records an :class:`Outcome` per call of the test file."""

    def __init__(self, test_file: str) -> None:
        self.test_file = os.path.abspath(test_file)
        self.original = pd.DataFrame.sort_values
        self.signature = inspect.signature(self.original)
        self.outcomes: list[Outcome] = []
        self.test = ""
        self.busy = False

    def wrapper(self) -> Any:
        recorder = self

        def sort_values(frame: pd.DataFrame, *args: Any, **kwargs: Any) -> Any:
            caller = os.path.abspath(sys._getframe(1).f_code.co_filename)
            if recorder.busy or caller != recorder.test_file:  # pandas' own and gpusort's calls go straight through
                return recorder.original(frame, *args, **kwargs)
            try:
                expected = recorder.original(frame, *args, **kwargs)
            except Exception as exc:
                recorder.compare(frame, args, kwargs, None, exc)
                raise
            recorder.compare(frame, args, kwargs, expected, None)
            return expected

        return sort_values

    def compare(self, frame: pd.DataFrame, args: tuple, kwargs: dict, expected: Any, error: Exception | None) -> None:
        try:
            bound = self.signature.bind(frame, *args, **kwargs)
        except TypeError:  # a call pandas refused for its arguments: nothing to route
            return
        options = {k: v for k, v in bound.arguments.items() if k != "self"}
        if options.get("axis", 0) not in (0, "index") or options.get("inplace", False):
            return
        self.busy = True
        try:
            if error is None and options.get("kind", "quicksort") not in ("stable", "mergesort"):
                # pandas' quicksort and heapsort leave ties in an order of their own (its tests call it
                # platform-dependent); gpusort sorts stably, so pandas' stable sort is the reference.
                expected = self.original(frame, **{**options, "kind": "stable"})
            self.outcomes.append(Outcome(self.test, _describe(bound), *self.judge(frame, options, expected, error)))
        finally:
            self.busy = False

    def judge(self, frame: pd.DataFrame, options: dict, expected: Any, error: Exception | None) -> tuple[str, str]:
        """The outcome's kind and detail for one call."""
        try:
            ddf = _partitioned(frame)
        except Exception as exc:
            return "unrepresentable", f"dask.dataframe.from_delayed: {type(exc).__name__}: {exc}"
        try:
            got = gpusort.sort_values(ddf, **options)
            got = got.compute() if hasattr(got, "compute") else got
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}"
            if error is not None:
                return ("match", "") if isinstance(exc, type(error)) else \
                    ("mismatch", f"pandas raised {type(error).__name__}: {error}; gpusort {message}")
            return ("refused" if _raised_by_gpusort(exc) else "unclear"), message
        if error is not None:
            return "mismatch", f"pandas raised {type(error).__name__}: {error}; gpusort returned a frame"
        try:
            pd.testing.assert_frame_equal(got, expected, check_exact=True)
        except AssertionError as exc:
            difference = " ".join(str(exc).split())[:300]
            try:
                pd.testing.assert_frame_equal(got, expected, check_exact=True, check_freq=False)
            except AssertionError:
                return "mismatch", difference
            return "freq", difference
        return "match", ""


def _partitioned(frame: pd.DataFrame) -> dd.DataFrame:
    """``frame`` cut into a Dask DataFrame of :data:`PARTITIONS` partitions, in order, as it is.

    From delayed pieces rather than ``from_pandas``, which sorts the index
    (or needs it sortable) and holds no MultiIndex.
    """
    cuts = sorted({len(frame) * j // PARTITIONS for j in range(PARTITIONS + 1)})
    pieces = [dask.delayed(frame.iloc[a:b]) for a, b in zip(cuts[:-1], cuts[1:])] or [dask.delayed(frame)]
    return dd.from_delayed(pieces, meta=frame.iloc[:0], verify_meta=False)


class _Plugin:
    """The pytest plugin that wraps ``sort_values`` for the session and names the test making each call."""

    def __init__(self, recorder: _Recorder) -> None:
        self.recorder = recorder

    def pytest_sessionstart(self, session: Any) -> None:
        pd.DataFrame.sort_values = self.recorder.wrapper()

    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        pd.DataFrame.sort_values = self.recorder.original

    def pytest_runtest_setup(self, item: Any) -> None:
        self.recorder.test = item.nodeid


def run(test_file: str | None = None) -> list[Outcome]:
    """Run pandas' ``test_sort_values.py`` with every call also routed through gpusort; one outcome per call.

    Parameters
    ----------
    test_file : str, optional
        The test file; by default the installed pandas' own.

    Returns
    -------
    list of Outcome
        In the order of the calls.

    Raises
    ------
    FileNotFoundError
        Where pandas was installed without its tests and no ``test_file`` is given.
    """
    import pytest

    test_file = test_file or pandas_test_file()
    if test_file is None:
        raise FileNotFoundError(f"pandas {pd.__version__} was installed without its tests ({TEST_FILE}); "
                                "pass test_file= or install a pandas that ships them")
    recorder = _Recorder(test_file)
    root = os.path.dirname(os.path.dirname(pd.__file__))
    # pandas' file, pandas' conftests, none of this project's options (parallel workers, warnings as errors).
    argv = [test_file, "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly",
            "-c", os.devnull, "--rootdir", root, "-W", "ignore"]
    # The synchronous scheduler: hundreds of tiny graphs, each faster in one thread; object columns stay object.
    with dask.config.set(scheduler="synchronous", **{"dataframe.convert-string": False}), \
            contextlib.redirect_stdout(open(os.devnull, "w")):
        pytest.main(argv, plugins=[_Plugin(recorder)])
    return recorder.outcomes


def main(argv: list[str] | None = None) -> int:
    """Print the counts and every call that did not match; ``--json`` prints the outcomes."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print every outcome as JSON")
    parser.add_argument("--test-file", help="pandas' test file (default: the installed pandas')")
    options = parser.parse_args(argv)
    outcomes = run(options.test_file)
    if options.json:
        print(json.dumps([asdict(o) for o in outcomes], indent=1))
        return 0
    counts = collections.Counter(o.kind for o in outcomes)
    print(f"{len(outcomes)} calls: " + ", ".join(f"{k} {counts[k]}" for k in
                                                  KINDS))
    for o in outcomes:
        if o.kind != "match":
            print(f"{o.kind:9} {o.test.split('::', 1)[-1]}\n          {o.call}\n          {o.detail}")
    return 0 if not counts["mismatch"] + counts["unclear"] else 1


if __name__ == "__main__":
    sys.exit(main())
