"""Dask's own ``sort_values`` tests, with ``dask.dataframe``'s ``sort_values`` replaced by gpusort's.

Runs the tests of the installed Dask's ``dataframe/tests`` whose function
calls ``sort_values`` (of a Dask DataFrame or of pandas' results) with
``dask.dataframe.DataFrame.sort_values`` (and ``Series.sort_values``, where
Dask has one) replaced for the session by :func:`gpusort_in_place_of_dask`:
Dask's signature, gpusort's sort.

Run ``python -m tests.dask_conformance [pytest options]``; its exit status
is pytest's.
"""

from __future__ import annotations

import glob
import inspect
import os
import sys
from typing import Any, Callable

import dask.dataframe as dd

import gpusort


def gpusort_in_place_of_dask(frame: Any, by: Any, npartitions: Any = None, ascending: Any = True,
                             na_position: str = "last", partition_size: float = 128e6,
                             sort_function: Callable | None = None, sort_function_kwargs: dict | None = None,
                             upsample: float = 1.0, ignore_index: bool | None = False,
                             shuffle_method: str | None = None, **options: Any) -> Any:
    """``dask.dataframe.DataFrame.sort_values``'s signature, sorted by :func:`gpusort.sort_values`.

    ``partition_size``, ``upsample``, ``shuffle_method`` and ``options``
    tune Dask's own shuffle, which gpusort does not use; ``sort_function``
    (with its kwargs) is Dask's sort of each partition, which gpusort's
    sort replaces: they are dropped.  The rest go to gpusort as they are
    (``ignore_index=None`` is Dask's ``False``).
    """
    return gpusort.sort_values(frame, by, ascending=ascending, npartitions=npartitions, na_position=na_position,
                               ignore_index=bool(ignore_index))


class _Plugin:
    """Replaces Dask's ``sort_values`` for the pytest session, and puts it back after."""

    def __init__(self) -> None:
        self.saved = {cls: cls.__dict__["sort_values"] for cls in (dd.DataFrame, dd.Series)
                      if "sort_values" in cls.__dict__}

    def pytest_collection_modifyitems(self, config: Any, items: list) -> None:
        """Keep the tests whose function calls ``sort_values`` (a test may sort pandas' results too)."""
        keep = [item for item in items if "sort_values(" in _source(item)]
        config.hook.pytest_deselected(items=[item for item in items if item not in keep])
        items[:] = keep

    def pytest_sessionstart(self, session: Any) -> None:
        for cls in self.saved:
            cls.sort_values = gpusort_in_place_of_dask

    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        for cls, method in self.saved.items():
            cls.sort_values = method


def _source(item: Any) -> str:
    """The source of a collected test's function ("" where it has none)."""
    try:
        return inspect.getsource(item.function)
    except (AttributeError, OSError, TypeError):
        return ""


def test_files() -> list[str]:
    """Dask's DataFrame test files that call ``sort_values``."""
    folder = os.path.join(os.path.dirname(dd.__file__), "tests")
    return sorted(p for p in glob.glob(os.path.join(folder, "test_*.py"))
                  if "sort_values" in open(p, encoding="utf-8").read())


def run(args: list[str] | None = None) -> int:
    """Run Dask's ``sort_values`` tests with gpusort's in place; pytest's exit status.

    Parameters
    ----------
    args : list of str, optional
        More pytest options (e.g. ``["-rf"]`` for the failures' summary).
    """
    import pytest

    root = os.path.dirname(os.path.dirname(dd.__file__))
    # Dask's files, Dask's conftests, none of this project's options (parallel workers, warnings as errors).
    argv = [*test_files(), "-p", "no:cacheprovider", "-p", "no:xdist", "-c", os.devnull,
            "--rootdir", root, "-W", "ignore::pytest.PytestUnknownMarkWarning", *(args or [])]
    return int(pytest.main(argv, plugins=[_Plugin()]))


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
