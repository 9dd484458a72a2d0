"""A Burstable container's memory request, read back from the OOM score kubelet gave it.

The OCI spec NRI hands over carries a memory limit but no memory request. kubelet, though,
sets a Burstable container's ``oom_score_adj`` from its request (pkg/kubelet/qos/policy.go,
GetContainerOOMScoreAdjust): ``1000 - 1000 * request // capacity``, clamped to [3, 999], the
capacity being the node's total memory. nri-plugins inverts that (pkg/kubernetes
OomAdjToMemReq, used by pkg/resmgr/cache estimateResourceRequirements) to estimate the
request; so does this module, in closed form: the smallest request kubelet maps to the
score, which is at most ``capacity / 1000`` below the real one.
"""

from __future__ import annotations

__all__ = [
    "BESTEFFORT_OOM_SCORE_ADJ",
    "GUARANTEED_OOM_SCORE_ADJ",
    "burstable_oom_score_adj",
    "memory_request",
]

GUARANTEED_OOM_SCORE_ADJ = -997
BESTEFFORT_OOM_SCORE_ADJ = 1000
_MIN_BURSTABLE = 1000 + GUARANTEED_OOM_SCORE_ADJ  # 3
_MAX_BURSTABLE = BESTEFFORT_OOM_SCORE_ADJ - 1  # 999


def burstable_oom_score_adj(request: int, capacity: int) -> int:
    """kubelet's ``oom_score_adj`` for a Burstable container requesting ``request`` bytes of
    memory on a node with ``capacity`` bytes."""
    adj = 1000 - (1000 * request) // capacity
    if adj < _MIN_BURSTABLE:
        return _MIN_BURSTABLE
    if adj == BESTEFFORT_OOM_SCORE_ADJ:
        return _MAX_BURSTABLE
    return adj


def memory_request(oom_score_adj: int | None, limit: int, capacity: int) -> int:
    """Bytes: the estimated memory request of a Burstable container (``limit`` 0 when it has
    none), or 0 when there is none to estimate: no score, one outside kubelet's Burstable
    range, an unknown capacity, or an estimate not below the limit (nri-plugins' rule)."""
    if oom_score_adj is None or capacity <= 0:
        return 0
    if not _MIN_BURSTABLE <= oom_score_adj <= _MAX_BURSTABLE:
        return 0
    share = 1000 - oom_score_adj  # what kubelet's integer division gave, per mille
    estimate = -(-share * capacity // 1000)  # the smallest request with that share
    if limit and estimate >= limit:
        return 0
    return estimate
