"""Kubernetes resource quantities ("250m", "1.5", "128Mi", "1e3"), read as the API server does.

kubelet uses ``MilliValue()`` for CPU and ``Value()`` for memory; both round *up* to the
next integer, so "0.0001" CPU is 1m and "1.5" bytes is 2. The arithmetic is exact (fractions),
so "0.1" is 100m and not 100.00000000000001m.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

__all__ = ["QuantityError", "cpu_milli", "memory_bytes"]

_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))([a-zA-Z]*|[eE][+-]?\d+)$")
_SUFFIX = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(1 << 10),
    "Mi": Fraction(1 << 20),
    "Gi": Fraction(1 << 30),
    "Ti": Fraction(1 << 40),
    "Pi": Fraction(1 << 50),
    "Ei": Fraction(1 << 60),
}


class QuantityError(ValueError):
    """Not a Kubernetes quantity, or a negative one."""


def parse(value: object) -> Fraction:
    """A quantity as an exact number (YAML may hand us an int or a float, as kubectl does)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise QuantityError(f"expected a quantity such as 500m or 1Gi, got {value!r}")
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if not match:
        raise QuantityError(f"{text!r} is not a quantity (examples: 500m, 2, 1.5, 128Mi, 1G)")
    number, suffix = match.groups()
    if suffix[:1] in ("e", "E") and suffix[1:].lstrip("+-").isdigit():
        scale = Fraction(10) ** int(suffix[1:])
    elif suffix in _SUFFIX:
        scale = _SUFFIX[suffix]
    else:
        raise QuantityError(f"{text!r}: unknown suffix {suffix!r}")
    amount = Fraction(number) * scale
    if amount < 0:
        raise QuantityError(f"{text!r}: a resource quantity cannot be negative")
    return amount


def cpu_milli(value: object) -> int:
    """mCPU, rounded up as ``Quantity.MilliValue``."""
    return math.ceil(parse(value) * 1000)


def memory_bytes(value: object) -> int:
    """Bytes, rounded up as ``Quantity.Value``."""
    return math.ceil(parse(value))
