"""Typed configuration values, parsed once where a configuration is loaded: the policies
read their fields instead of parsing strings.

``reservedResources.cpu`` and ``availableResources.cpu`` hold one of three tagged values:

- ``CpuAmount``: a quantity of CPUs (``750m``, ``2``);
- ``CpuList``: ``cpuset:<list>``, these CPUs;
- ``CpusExcept``: ``exclude-cpuset:<list>``, every CPU but these.

``memory`` holds a ``Quantity``. Each value keeps its text as written (stripped): messages
quote it, and a document written back says it again. The grammars are those of
``quantity.PATTERN`` and ``cpuset.LIST_BODY``, which the CRDs carry too.
"""

from __future__ import annotations

import re

import attrs

from nri_resmgr.cpuset import LIST_BODY, CpuSet
from nri_resmgr.errors import InvalidValue
from nri_resmgr.quantity import PATTERN, Quantity
from nri_resmgr.shorten import short_repr

__all__ = [
    "MAX_CPU_VALUE",
    "VALUE_TYPES",
    "CpuAmount",
    "CpuConstraint",
    "CpuList",
    "CpusExcept",
    "parse_cpu",
    "parse_memory",
]

MAX_CPU_VALUE = 4096
"""A CPU value longer than this is refused before it is parsed (the CRD says the same)."""


@attrs.frozen
class CpuAmount:
    """A number of CPUs (``750m``, ``2``)."""

    text: str
    quantity: Quantity

    @property
    def milli(self) -> int:
        """mCPU, rounded up as kubelet does."""
        return self.quantity.milli


@attrs.frozen
class CpuList:
    """``cpuset:<list>``: these CPUs."""

    text: str
    cpus: CpuSet


@attrs.frozen
class CpusExcept:
    """``exclude-cpuset:<list>``: every CPU but these."""

    text: str
    cpus: CpuSet


CpuConstraint = CpuAmount | CpuList | CpusExcept

VALUE_TYPES: tuple[type, ...] = (Quantity, CpuAmount, CpuList, CpusExcept)
"""attrs classes that are one configuration value, not a section of keys."""

_SETS: dict[str, type[CpuList] | type[CpusExcept]] = {
    "cpuset:": CpuList,
    "exclude-cpuset:": CpusExcept,
}
_QUANTITY = re.compile(PATTERN)
_LIST = re.compile(LIST_BODY)


def parse_cpu(text: str) -> CpuConstraint:
    """``text`` as a CPU constraint; InvalidValue saying what is wrong (a CpuSetError for a
    list of the right syntax that names impossible CPUs)."""
    if len(text) > MAX_CPU_VALUE:
        raise InvalidValue(f"{len(text)} characters, longer than {MAX_CPU_VALUE}")
    for prefix, kind in _SETS.items():
        if text.startswith(prefix):
            cpus = text[len(prefix) :]
            if not _LIST.fullmatch(cpus):
                raise InvalidValue(f"invalid CPU list {short_repr(cpus)} in {short_repr(text)}")
            return kind(text.strip(), CpuSet.parse(cpus))
    if not _QUANTITY.fullmatch(text):
        raise InvalidValue(
            "expected a CPU quantity, cpuset:<list> or exclude-cpuset:<list>, "
            f"got {short_repr(text)}"
        )
    return CpuAmount(text, Quantity.parse(text))


def parse_memory(text: str) -> Quantity:
    if not _QUANTITY.fullmatch(text):
        raise InvalidValue(f"expected a memory quantity, got {short_repr(text)}")
    return Quantity.parse(text)
