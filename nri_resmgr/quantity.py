"""Kubernetes resource quantities ("250m", "1.5", "128Mi", "1e3"), read as the API server does.

kubelet uses ``MilliValue()`` for CPU and ``Value()`` for memory; both round *up* to the
next integer, so "0.0001" CPU is 1m and "1.5" bytes is 2. The arithmetic is exact (fractions),
so "0.1" is 100m and not 100.00000000000001m.

This module is the one quantity grammar: the config loader checks a quantity against
``PATTERN`` and the CRDs carry it (``tools/crdschema.py``); workloads and configs are parsed by
``Quantity.parse``.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

import attrs

from nri_resmgr.errors import InvalidValue

__all__ = ["PATTERN", "Quantity", "QuantityError", "cpu_milli", "memory_bytes"]

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
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_EXPONENT = r"[eE][+-]?\d+"
_UNIT = "|".join(sorted((k for k in _SUFFIX if k), key=lambda k: (-len(k), k)))
BODY = rf"\+?{_NUMBER}(?:{_EXPONENT}|{_UNIT})?"
"""A non-negative quantity, unanchored: a number, then an exponent or a unit of ``_SUFFIX``.
Written so that Python's ``re`` and RE2 (the API server's CRD patterns) read it alike."""
PATTERN = rf"^{BODY}$"
_QUANTITY = re.compile(rf"([+-]?{_NUMBER})({_EXPONENT}|{_UNIT}|)")
_NUMBER_AND_WORD = re.compile(rf"[+-]?{_NUMBER}([a-zA-Z]+)")


class QuantityError(InvalidValue):
    """Not a Kubernetes quantity, or a negative one."""


@attrs.frozen
class Quantity:
    """A quantity as written and its exact amount."""

    text: str
    """Stripped; an integer from YAML as its digits."""
    amount: Fraction

    @classmethod
    def parse(cls, value: object) -> Quantity:
        """YAML may hand us an int or a float, as kubectl takes them; a negative quantity, or
        anything else than one, is a QuantityError naming the problem."""
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise QuantityError(f"expected a quantity such as 500m or 1Gi, got {value!r}")
        text = str(value).strip()
        match = _QUANTITY.fullmatch(text)
        if not match:
            raise QuantityError(_problem(text))
        number, suffix = match.groups()
        if suffix[:1] in ("e", "E") and suffix[1:]:
            scale = Fraction(10) ** int(suffix[1:])
        else:
            scale = _SUFFIX[suffix]
        amount = Fraction(number) * scale
        if amount < 0:
            raise QuantityError(f"{text!r}: a resource quantity cannot be negative")
        return cls(text, amount)

    @property
    def milli(self) -> int:
        """In thousandths, rounded up as ``Quantity.MilliValue`` (mCPU)."""
        return math.ceil(self.amount * 1000)

    @property
    def value(self) -> int:
        """Rounded up as ``Quantity.Value`` (bytes)."""
        return math.ceil(self.amount)


def _problem(text: str) -> str:
    word = _NUMBER_AND_WORD.fullmatch(text)
    if word is not None:
        return f"{text!r}: unknown suffix {word.group(1)!r}"
    return f"{text!r} is not a quantity (examples: 500m, 2, 1.5, 128Mi, 1G)"


def cpu_milli(value: object) -> int:
    """mCPU, rounded up as ``Quantity.MilliValue``."""
    return Quantity.parse(value).milli


def memory_bytes(value: object) -> int:
    """Bytes, rounded up as ``Quantity.Value``."""
    return Quantity.parse(value).value
