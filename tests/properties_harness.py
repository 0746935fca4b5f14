"""What the property tests (test_properties_round_trip.py, test_properties_mutations.py and
test_properties_weights.py) share: the health checks they suppress for large examples, and a float32
from its bit pattern."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck

SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large]


def bits_f32(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]
