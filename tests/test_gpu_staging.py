"""Host <-> GPU copies through the pinned slots, on one GPU.

Every copy is checked byte for byte against the NumPy arrays it came from:
parts of odd sizes and addresses that straddle slots and stripes, pinned
and pageable ends, from one lane to one per core.
"""

from __future__ import annotations

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")
cupyx = pytest.importorskip("cupyx")

from gpusort.memory import staging  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]

#: Part sizes in bytes: empty, tiny, a page and around it, past one slot, past several.
SIZES = [0, 1, 7, 4095, 4096, 2**20 + 3, 3 * staging.SLOT_BYTES + 11, 2 * staging.SLOT_BYTES]


def odd_parts(seed: int) -> list[np.ndarray]:
    """Parts of :data:`SIZES`, twice, each a view that starts at an odd address inside a bigger array."""
    rng = np.random.default_rng(seed)
    parts = []
    for n in SIZES * 2:
        backing = rng.integers(0, 256, n + 5, dtype=np.uint8)
        parts.append(backing[3:3 + n])
    return parts


@pytest.mark.parametrize("lanes", [1, 3, staging.LANES_UP, staging.LANES_ALONE])
def test_parts_go_up_and_come_down_byte_for_byte(lanes):
    parts = odd_parts(lanes)
    want = np.concatenate(parts)
    dev = cupy.empty(want.size, np.uint8)
    staging.to_device(parts, dev, lanes)
    staging.streams().work.synchronize()
    np.testing.assert_array_equal(cupy.asnumpy(dev), want)

    backing = np.zeros(want.size + 9, np.uint8)  # pageable, at an odd address
    staging.to_host(dev, backing[5:5 + want.size], lanes)
    np.testing.assert_array_equal(backing[5:5 + want.size], want)
    assert not backing[:5].any() and not backing[5 + want.size:].any()  # nothing written around it


def test_pinned_ends_move_by_dma_and_keep_their_bytes():
    want = np.random.default_rng(1).integers(-2**63, 2**63 - 1, 3 * 2**20 + 5, dtype=np.int64)
    pinned = cupyx.empty_pinned(want.shape, want.dtype)
    pinned[...] = want
    assert staging.is_pinned(pinned) and not staging.is_pinned(want)
    dev = cupy.empty(want.shape, want.dtype)
    staging.to_device(pinned, dev)
    staging.streams().work.synchronize()
    out = cupyx.empty_pinned(want.shape, want.dtype)
    staging.to_host(dev, out)
    np.testing.assert_array_equal(out, want)


def test_a_copy_of_mismatched_sizes_is_refused():
    with pytest.raises(ValueError, match="bytes of parts into"):
        staging.to_device([np.ones(3, np.uint8)], cupy.empty(4, np.uint8))
