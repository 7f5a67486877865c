"""ncu's units to base units (profiler/ingest/units.py): a report re-imported without
`--print-units base`, and the details page, print scaled units; each value must land in one base
per dimension, or a peak of 1.5 Kbyte/cycle reads as 1.5 byte/cycle and a roofline 1000x off."""
from __future__ import annotations

import pytest

from profiler.ingest.units import to_base


@pytest.mark.parametrize("unit, base, factor", [
    ("ns", "ns", 1.0), ("usecond", "ns", 1e3), ("msecond", "ns", 1e6),
    ("Kbyte", "byte", 1e3), ("Mbyte", "byte", 1e6), ("Gbyte", "byte", 1e9),
    ("Ghz", "hz", 1e9), ("Mhz", "hz", 1e6),
    # rates: the numerator's prefix and a time denominator, whatever is counted
    ("byte/s", "byte/second", 1.0), ("Tbyte/second", "byte/second", 1e12), ("Gbyte/s", "byte/second", 1e9),
    ("Kbyte/cycle", "byte/cycle", 1e3), ("byte/cycle", "byte/cycle", 1.0), ("Kbyte/block", "byte/block", 1e3),
    ("Msector/s", "sector/second", 1e6), ("sector/cycle", "sector/cycle", 1.0),
    ("cycle/nsecond", "hz", 1e9), ("cycle/usecond", "hz", 1e6),
    ("Kinst/cycle", "inst/cycle", 1e3), ("inst/cycle", "inst/cycle", 1.0),
    # what smlens does not know keeps its name and factor 1: a value is never guessed at
    ("register/thread", "register/thread", 1.0), ("%/byte", "%/byte", 1.0), ("widget", "widget", 1.0),
    ("", "", 1.0),
])
def test_units_to_base(unit, base, factor):
    assert to_base(unit) == (base, factor)
