"""The README's examples run as pasted: every ```python block, and the command-line section's ```bash blocks.

Each Python block runs on its own in a new empty folder, as a reader would
paste it, and then again in the same folder, as a reader would paste it
twice; those that need no GPU run with only what a plain ``pip install .``
installs (the packages of extras cannot be imported).  The ``## Command
line`` section's shell blocks run in order in one
folder (the later ones use what the first one made).  Blocks whose first line
is :data:`GPU_ONLY` need CuPy, dask-cuda and a CUDA GPU, and skip elsewhere
with the reason.  The Quick start's block installs the package and runs the
test suite: it is not run here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from gpusort import runtime

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
GPU_ONLY = "# GPU machines only"


def blocks(language: str, text: str = README) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", text, re.S | re.M)


def section(heading: str) -> str:
    """The text under ``## heading``, up to the next heading of that level."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", README, re.S | re.M)
    assert match, f"README has no section {heading!r}"
    return match[1]


def needs_gpu(block: str) -> bool:
    return block.startswith(GPU_ONLY)


def run(command: list[str], cwd: Path, first: Path | None = None) -> None:
    """``command`` in ``cwd``; ``first``: a folder on ``PYTHONPATH`` before all else."""
    # This checkout's gpusort, and this Python's `python` and `gpusort` commands.
    path = [str(first)] * (first is not None) + [str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = os.environ | {"PYTHONPATH": os.pathsep.join(path),
                        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{command[-1]}\nexit status {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def run_lines(shell_blocks: list[str], cwd: Path) -> None:
    """Every command line in turn, each its own shell: one that fails fails the test, even in an ``&&`` list."""
    for block in shell_blocks:
        for line in block.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                run(["bash", "-c", line], cwd)


PYTHON = blocks("python")
SHELL = blocks("bash", section("Command line"))


def test_the_readme_has_its_examples():
    assert len(PYTHON) >= 3 and SHELL and any(needs_gpu(b) for b in PYTHON) and not needs_gpu(SHELL[0])
    # The blocks the other tests run are all the README's blocks but the Quick start's.
    assert len(blocks("bash")) == len(SHELL) + len(blocks("bash", section("Quick start")))


def not_in_a_plain_install() -> list[str]:
    """Top-level modules installed here that ``pip install .`` (no extras) does not bring: the extras' own.

    gpusort's dependencies in ``pyproject.toml``, with those of each, the
    extras they ask for included, as installed here.
    """
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    wanted = [Requirement(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]]
    extras: dict[str, set[str]] = {"gpusort": set()}  # distribution -> the extras asked of it
    while wanted:
        req = wanted.pop()
        name = canonicalize_name(req.name)
        if name in extras and set(req.extras) <= extras[name]:
            continue
        extras[name] = extras.get(name, set()) | set(req.extras)
        for line in metadata.requires(req.name) or []:
            dep = Requirement(line)
            if dep.marker is None or any(dep.marker.evaluate({"extra": e}) for e in ["", *extras[name]]):
                wanted.append(dep)
    # Private names (an editable install's import hooks, say) stay: .pth files import them as Python starts.
    return sorted(module for module, dists in metadata.packages_distributions().items()
                  if module.isidentifier() and not module.startswith("_")
                  and not {canonicalize_name(d) for d in dists} & extras.keys())


def test_a_plain_install_lacks_the_extras_packages():
    """The check below hides something: what only the test and bench extras install."""
    lacks = not_in_a_plain_install()
    assert {"pytest", "hypothesis", "matplotlib"} <= set(lacks)
    assert not {"numpy", "dask", "distributed", "zarr", "gpusort"} & set(lacks)


@pytest.mark.parametrize("block", PYTHON, ids=[f"python-{i + 1}" for i in range(len(PYTHON))])
def test_python_block_runs_as_pasted_twice(block, tmp_path, not_installed):
    if needs_gpu(block):
        if runtime.cuda_cluster_missing():
            pytest.skip(runtime.cuda_cluster_missing())
        first = None  # the GPU extra's packages are needed
    else:
        first = not_installed(*not_in_a_plain_install())
    for _ in range(2):  # the second run finds what the first one wrote
        run([sys.executable, "-c", block], tmp_path, first)


def test_command_line_blocks_run_in_order_on_a_cpu(tmp_path):
    run_lines([b for b in SHELL if not needs_gpu(b)], tmp_path)


@pytest.mark.skipif(bool(runtime.cuda_cluster_missing()), reason=str(runtime.cuda_cluster_missing()))
def test_command_line_blocks_run_in_order_on_a_gpu_machine(tmp_path):
    run_lines(SHELL, tmp_path)
