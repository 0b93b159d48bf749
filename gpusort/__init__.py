"""gpusort: exact, balanced sorting of Dask arrays larger than GPU memory."""

from gpusort.api import argsort, sort, sort_by_key

__version__ = "0.1.0"
__all__ = ["argsort", "sort", "sort_by_key", "sort_zarr", "__version__"]


def __getattr__(name: str):
    # Zarr I/O and the single-GPU API load on first use: `import gpusort`
    # stays light and never needs CuPy.
    if name == "sort_zarr":
        from gpusort.zarr_io import sort_zarr

        return sort_zarr
    if name == "gpu":
        from gpusort import gpu

        return gpu
    raise AttributeError(f"module 'gpusort' has no attribute {name!r}")
