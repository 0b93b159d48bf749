import numpy as np
import pytest

from gpusort import order
from reference import KEY_DTYPES, ref_argsort


def adversarial(dtype: str) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return np.array([True, False, True, True, False])
    if dt.kind in "mM":
        raw = np.array([5, np.iinfo(np.int64).min, -3, np.iinfo(np.int64).max, 5, 0])
        return raw.view(dt)
    if dt.kind == "f":
        info = np.finfo(dt)
        return np.array([np.nan, 0.0, -0.0, info.max, info.min, -np.inf, np.inf, 1.5, -np.nan, 0.0], dtype=dt)
    info = np.iinfo(dt)
    return np.array([info.max, info.min, 0, 1, info.max, info.min + 1, 0], dtype=dt)


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dtype", KEY_DTYPES)
def test_encode_orders_like_numpy_and_decodes_bit_exactly(dtype, descending):
    x = adversarial(dtype)
    before = x.copy()
    okeys = order.encode(x, descending)
    assert okeys.dtype == order.order_dtype(x.dtype)
    np.testing.assert_array_equal(np.argsort(okeys, kind="stable"), ref_argsort(x, descending))
    back = order.decode(okeys, x.dtype, descending)
    assert back.dtype == x.dtype
    np.testing.assert_array_equal(back.view(np.uint8), x.view(np.uint8))  # NaN payloads, -0.0
    np.testing.assert_array_equal(x.view(np.uint8), before.view(np.uint8))


@pytest.mark.parametrize(
    "dtype", ["O", "U3", "S3", "complex128", "longdouble", [("a", "i4")]]
)
def test_unsortable_key_dtypes_are_named(dtype):
    if np.dtype(dtype) == np.dtype(np.float64):  # longdouble is float64 on some platforms
        pytest.skip("longdouble is float64 here")
    with pytest.raises(TypeError, match=r"keys has dtype .*convert first"):
        order.check_key_dtype(dtype, "keys")
