"""Order keys: one ascending, NaN-last order for every key dtype and direction.

The pipeline sorts *order keys* instead of user keys.  ``encode`` maps a key
array to an array whose stable ascending sort (NaN last, as NumPy sorts) is
the order the user asked for; ``decode`` is its exact inverse, bit for bit
(NaN payloads and the sign of zero survive; a keys-only sort on the NumPy
backend still returns whatever ``np.sort`` makes of float16 NaN payloads and
of zeros' signs, equal keys all).  So the splitters, the merges and
every backend only ever need one comparison: ascending, NaN last, and
``-0.0 == 0.0`` ties keep their input order, as ``np.argsort(kind="stable")``.

=================  ===============  ========================================
key dtype          order dtype      descending
=================  ===============  ========================================
int*, uint*        same             ``~x`` (reverses two's complement order)
float16/32/64      same             ``-x`` (NaN stays NaN, so stays last)
bool               uint8            ``~x``
datetime64, NaT    int64            ``~x``; ascending ``x - 1`` moves NaT
timedelta64                         (int64 min) to the top, as NumPy does
=================  ===============  ========================================

All operations are elementwise methods, so NumPy and CuPy arrays both work.
Order keys are always in native byte order: ``encode`` swaps big-endian keys
once, and ``decode`` swaps them back to the user's dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def check_key_dtype(dtype: Any, argname: str = "x") -> np.dtype:
    """The key dtype, or a ``TypeError`` that names ``argname`` and the fix."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iub" or dtype.newbyteorder("=") in _FLOATS or dtype.kind in "mM":
        return dtype
    what = {
        "O": "object",
        "U": "string",
        "S": "bytes",
        "V": "structured/void",
        "c": "complex",
        "f": "extended-precision float",
    }.get(dtype.kind, dtype.kind)
    raise TypeError(
        f"{argname} has dtype {dtype} ({what}), which gpusort cannot sort as keys; "
        "supported key dtypes are bool, int8-64, uint8-64, float16/32/64, datetime64 "
        f"and timedelta64 (convert first, e.g. {argname}.astype('float64'))"
    )


def order_dtype(dtype: Any) -> np.dtype:
    """The dtype of the order keys that ``encode`` makes from ``dtype`` keys."""
    dtype = np.dtype(dtype).newbyteorder("=")
    if dtype.kind == "b":
        return np.dtype(np.uint8)
    if dtype.kind in "mM":
        return np.dtype(np.int64)
    return dtype


def encode(keys: Any, descending: bool) -> Any:
    """Order keys for ``keys``; a view (no copy) where nothing changes."""
    if not keys.dtype.isnative:
        # Merges concatenate runs, and concatenation yields native byte order:
        # swapping once here keeps the order keys' dtype what order_dtype says.
        keys = keys.astype(keys.dtype.newbyteorder("="))
    kind = keys.dtype.kind
    if kind == "b":
        keys = keys.view(np.uint8)
    elif kind in "mM":
        keys = keys.view(np.int64)
        return ~keys if descending else keys - 1
    if not descending:
        return keys
    return -keys if kind == "f" else ~keys


def decode(okeys: Any, dtype: Any, descending: bool) -> Any:
    """User keys of ``dtype`` back from order keys: the inverse of ``encode``."""
    dtype = np.dtype(dtype)
    native = dtype.newbyteorder("=")
    if native.kind in "mM":
        keys = (~okeys if descending else okeys + 1).view(native)
    else:
        if descending:
            okeys = -okeys if native.kind == "f" else ~okeys
        keys = okeys.view(native) if okeys.dtype != native else okeys
    return keys if native == dtype else keys.astype(dtype)
