"""Test-wide markers: ``gpu`` tests skip, with the reason, where no GPU is usable."""

from __future__ import annotations

import pytest

from gpusort import runtime


def pytest_collection_modifyitems(config, items):
    names, why = runtime.gpus()
    for item in items:
        if "multi_gpu" in item.keywords and len(names) < 2:
            item.add_marker(pytest.mark.skip(reason=f"needs 2 GPUs, found {len(names)} {why}".strip()))
        elif "gpu" in item.keywords and not names:
            item.add_marker(pytest.mark.skip(reason=why))
