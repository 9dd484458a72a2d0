"""Configuration and quantities as upstream's e2e framework hands them over."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from nri_resmgr.cpuset import CpuSet


def helm_merge(base: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` over ``base`` as helm merges a values file over the chart's: maps
    deeply, everything else (lists too) replaced."""
    out = copy.deepcopy(dict(base))
    for k, v in values.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = helm_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def milli(q: str) -> int:
    """A CPU quantity (``"1500m"``, ``"2"``) in mCPU."""
    return int(q[:-1]) if q.endswith("m") else int(float(q) * 1000)


def disjoint(*sets: CpuSet) -> bool:
    seen: set[int] = set()
    for s in sets:
        if seen & set(s):
            return False
        seen |= set(s)
    return True
