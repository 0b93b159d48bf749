"""The host's tables of a bucket pass's CTA spans (gpusort.cuda.buckets), against plain loops and the C struct's layout; no GPU."""

import struct

import numpy as np
import pytest

from gpusort.cuda.buckets import cut_spans, span_rows


@pytest.mark.parametrize("span", [1, 3, 4, 1000])
def test_cut_spans_cover_every_range_in_order(span, rng):
    sizes = rng.integers(0, 12, 40)
    sizes[[0, 7, 8, 39]] = 0  # empty ranges, first, in a row and last
    starts = rng.integers(0, 5, 40).cumsum() + np.concatenate(([0], sizes.cumsum()[:-1]))  # gaps between ranges
    ends = starts + sizes
    owner, begins, stops, first = cut_spans(starts, ends, span)
    expected = [(r, b, min(b + span, e)) for r, (s, e) in enumerate(zip(starts, ends)) for b in range(s, e, span)]
    assert list(zip(owner.tolist(), begins.tolist(), stops.tolist())) == expected
    counts = np.bincount(owner, minlength=sizes.size) if owner.size else np.zeros(sizes.size, int)
    assert first.tolist() == [0] + np.cumsum(counts).tolist()


def test_span_rows_match_the_bucket_span_struct():
    # kernels/block_buckets.cuh: struct bucket_span {unsigned long long base; i64 begin, end; int segment, first;}
    base = 2**64 - 8  # an address less a first index wraps modulo 2**64
    rows = span_rows(np.array([base, 16], np.uint64), np.array([3, 9]), np.array([9, 11]), np.array([255, 0]),
                     np.array([1023, 0]))
    assert rows.dtype == np.int64 and rows.shape == (2, 4)
    assert struct.unpack("<QqqiiQqqii", rows.tobytes()) == (base, 3, 9, 255, 1023, 16, 9, 11, 0, 0)
    one = span_rows(np.uint64(64), np.array([0]), np.array([5]))  # one array, one segment
    assert struct.unpack("<Qqqii", one.tobytes()) == (64, 0, 5, 0, 0)
