"""A container's resource request and QoS class, read back from the Linux resources kubelet set.

kubelet writes requests as cpu.shares and limits as CFS quota/period; these are the inverse
conversions (shares of 2 mean "no request", as in nri-plugins).
"""

from __future__ import annotations

import enum

import attrs

from nri_resmgr.resmgr.model import Container, Pod, Resources

MIN_SHARES = 2
MAX_SHARES = 262144
SHARES_PER_CPU = 1024
MILLI_PER_CPU = 1000


class QoS(enum.Enum):
    GUARANTEED = "guaranteed"
    BURSTABLE = "burstable"
    BESTEFFORT = "besteffort"


@attrs.frozen
class Request:
    cpu_request: int
    """mCPU."""
    cpu_limit: int | None
    """mCPU; None is unlimited."""
    memory_limit: int | None
    qos: QoS

    @property
    def full_cpus(self) -> int:
        return self.cpu_request // MILLI_PER_CPU

    @property
    def fraction(self) -> int:
        return self.cpu_request % MILLI_PER_CPU


def shares_to_milli_cpu(shares: int) -> int:
    # kubelet's inverse (ceil) undoes its own floor in milli_cpu_to_shares exactly, where
    # rounding would read 1200m back as 1199m; 2 shares is kubelet's "no request".
    if shares <= MIN_SHARES:
        return 0
    return -(-shares * MILLI_PER_CPU // SHARES_PER_CPU)


def milli_cpu_to_shares(milli: int) -> int:
    if milli <= 0:
        return MIN_SHARES
    return max(MIN_SHARES, min(MAX_SHARES, milli * SHARES_PER_CPU // MILLI_PER_CPU))


def quota_to_milli_cpu(quota: int | None, period: int | None) -> int | None:
    if not quota or not period or quota < 0 or period < 0:
        return None
    return int(quota * MILLI_PER_CPU / period + 0.5)


_NO_RESOURCES = Resources()
_last: tuple[Pod, Container, Request] | None = None


def container_request(pod: Pod, container: Container) -> Request:
    """The container's request. The last answer is kept by identity: a create asks for the
    same (frozen) pod and container twice, once for the CPU and once for the memory want."""
    global _last
    last = _last
    if last is not None and last[0] is pod and last[1] is container:
        return last[2]
    answer = _request(pod, container)
    _last = (pod, container, answer)
    return answer


def _request(pod: Pod, container: Container) -> Request:
    res = container.resources or _NO_RESOURCES
    request = shares_to_milli_cpu(res.cpu_shares or 0)
    limit = quota_to_milli_cpu(res.cpu_quota, res.cpu_period)
    memory = res.memory_limit if res.memory_limit and res.memory_limit > 0 else None
    return Request(request, limit, memory, pod_qos(pod, request, limit))


def pod_qos(pod: Pod, request: int, limit: int | None) -> QoS:
    """The QoS class from the pod's cgroup parent; from the container's numbers if unknown."""
    parent = pod.cgroup_parent.lower()
    if "besteffort" in parent:
        return QoS.BESTEFFORT
    if "burstable" in parent:
        return QoS.BURSTABLE
    if "kubepods" in parent:
        return QoS.GUARANTEED
    if request == 0 and limit is None:
        return QoS.BESTEFFORT
    if limit is not None and limit == request:
        return QoS.GUARANTEED
    return QoS.BURSTABLE
