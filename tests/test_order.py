import numpy as np
import pytest

from gpusort.keys import order
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


def all_float16() -> np.ndarray:
    """Every float16 bit pattern: both zeros, both infinities, every NaN payload of either sign."""
    return np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(np.float16)


@pytest.mark.parametrize("scheme", order.SCHEMES)
@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dtype", KEY_DTYPES)
def test_encode_orders_like_numpy_and_decodes_bit_exactly(dtype, descending, scheme):
    x = adversarial(dtype)
    before = x.copy()
    okeys = order.encode(x, descending, scheme)
    assert okeys.dtype == order.order_dtype(x.dtype, scheme)
    if x.dtype.kind == "f" and scheme != "float":
        assert okeys.dtype.kind == "u"  # integer order keys: no backend compares floats
    want = ref_argsort(x, descending)
    got = np.argsort(okeys, kind="stable")
    if scheme == "exact":  # ties among zeros and among NaNs are free: compare as keys
        np.testing.assert_array_equal(x[got], x[want])
    else:
        np.testing.assert_array_equal(got, want)
    back = order.decode(okeys, x.dtype, descending, scheme)
    assert back.dtype == x.dtype
    if scheme != "tied":  # "tied" keeps no zero signs or NaN payloads, by design
        np.testing.assert_array_equal(back.view(np.uint8), x.view(np.uint8))
    np.testing.assert_array_equal(x.view(np.uint8), before.view(np.uint8))


@pytest.mark.parametrize("scheme", order.SCHEMES)
@pytest.mark.parametrize("descending", [False, True])
def test_every_float16_bit_pattern_orders_and_round_trips(descending, scheme):
    x = all_float16()
    okeys = order.encode(x, descending, scheme)
    if scheme == "exact":
        assert len(np.unique(okeys)) == 2**16  # a bijection
    back = order.decode(okeys, x.dtype, descending, scheme)
    if scheme != "tied":
        np.testing.assert_array_equal(back.view(np.uint16), x.view(np.uint16))
    want = ref_argsort(x, descending)
    got = np.argsort(okeys, kind="stable")
    if scheme == "exact":
        np.testing.assert_array_equal(x[got], x[want])
    else:
        np.testing.assert_array_equal(got, want)


def test_scheme_is_checked():
    with pytest.raises(ValueError, match="scheme='fast'"):
        order.encode(np.zeros(2), False, "fast")


@pytest.mark.parametrize(
    "dtype", ["O", "U3", "S3", "complex128", "longdouble", [("a", "i4")]]
)
def test_unsortable_key_dtypes_are_named(dtype):
    if np.dtype(dtype) == np.dtype(np.float64):  # longdouble is float64 on some platforms
        pytest.skip("longdouble is float64 here")
    with pytest.raises(TypeError, match=r"keys has dtype .*convert first"):
        order.check_key_dtype(dtype, "keys")
