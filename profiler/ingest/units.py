"""ncu units -> base units (byte, ns, cycle, %, Hz, byte/second, ...).

ncu prints base units on a stdout `--page raw` capture but scaled ones (`Mbyte`, `us`, `Ghz`,
`Tbyte/s`) when a report is re-imported or on the details page, so every value is scaled to one
base per dimension before it is stored: the same counter then compares across captures.
"""
from __future__ import annotations

import re

_SI = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}
# time in ns
_TIME_NS = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6,
            "s": 1e9, "second": 1e9}
_BYTE = re.compile(r"^([kmgtp]?)(?:byte|b)$", re.IGNORECASE)
_HZ = re.compile(r"^([kmgtp]?)hz$", re.IGNORECASE)


def _byte_scale(unit: str) -> float | None:
    match = _BYTE.match(unit)
    return _SI[match.group(1).lower()] if match else None


def to_base(unit: str | None) -> tuple[str, float]:
    """The base unit and the factor that takes a value in `unit` to it.

    Units that are already base, or that smlens does not know, keep their name and factor 1:
    a value is never guessed at.
    """
    unit = (unit or "").strip()
    if not unit:
        return "", 1.0
    if unit in _TIME_NS:
        return "ns", _TIME_NS[unit]
    scale = _byte_scale(unit)
    if scale is not None:
        return "byte", scale
    match = _HZ.match(unit)
    if match:
        return "hz", _SI[match.group(1).lower()]
    if "/" in unit:
        return _ratio_to_base(*unit.split("/", 1))
    return unit, 1.0


# counted things ncu may print with an SI prefix (Kbyte/cycle, Msector/s, Kinst/cycle)
_COUNTED = re.compile(r"^([KMGTP]?)(byte|b|sector|inst|cycle|warp|thread|request|wavefront)$", re.IGNORECASE)


def _ratio_to_base(numerator: str, denominator: str) -> tuple[str, float]:
    """A rate: its numerator's prefix scaled away (a peak of 1.5 Kbyte/cycle is 1,500 byte/cycle)
    and a time denominator made seconds (cycle/nsecond is Hz)."""
    match = _COUNTED.match(numerator)
    if not match:
        return f"{numerator}/{denominator}", 1.0
    thing = "byte" if match.group(2).lower() in ("byte", "b") else match.group(2).lower()
    factor = _SI[match.group(1).lower()]
    if denominator in _TIME_NS:
        factor *= 1e9 / _TIME_NS[denominator]
        return ("hz" if thing == "cycle" else f"{thing}/second"), factor
    return f"{thing}/{denominator}", factor
