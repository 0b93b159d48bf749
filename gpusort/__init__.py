"""gpusort: exact, balanced sorting of Dask arrays larger than GPU memory."""

import importlib

from gpusort.front.api import argsort, lexsort, searchsorted, sort, sort_by_key, topk, unique
from gpusort.front.sorted_merge import merge, merge_by_key

__version__ = "0.1.0"
__all__ = ["argsort", "lexsort", "merge", "merge_by_key", "searchsorted", "sort", "sort_by_key", "sort_values",
           "sort_zarr", "topk", "unique", "verify", "__version__"]


def __getattr__(name: str):
    # Zarr I/O, verify and the single-GPU API load on first use: `import gpusort`
    # stays light (no Zarr, no distributed) and never needs CuPy.
    if name == "sort_values":  # pandas is needed for DataFrames only
        return importlib.import_module("gpusort.front.dataframe").sort_values
    if name == "sort_zarr":
        return importlib.import_module("gpusort.zarr_io").sort_zarr
    if name == "verify":
        return importlib.import_module("gpusort.verification").verify
    if name == "gpu":
        return importlib.import_module("gpusort.gpu")
    raise AttributeError(f"module 'gpusort' has no attribute {name!r}")
