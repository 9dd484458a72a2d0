from __future__ import annotations

import pytest

from nri_resmgr.policies.requests import (
    QoS,
    container_request,
    milli_cpu_to_shares,
    quota_to_milli_cpu,
    shares_to_milli_cpu,
)
from nri_resmgr.resmgr.model import Container, Pod, Resources


@pytest.mark.parametrize(
    ("milli", "shares"), [(0, 2), (1, 2), (250, 256), (1000, 1024), (1500, 1536), (300000, 262144)]
)
def test_milli_cpu_to_shares(milli: int, shares: int) -> None:
    assert milli_cpu_to_shares(milli) == shares


@pytest.mark.parametrize(
    ("shares", "milli"), [(0, 0), (2, 0), (3, 3), (256, 250), (1024, 1000), (1536, 1500)]
)
def test_shares_to_milli_cpu(shares: int, milli: int) -> None:
    assert shares_to_milli_cpu(shares) == milli


@pytest.mark.parametrize("milli", [100, 250, 750, 1000, 1200, 2500, 4000, 64000])
def test_request_round_trips_through_shares(milli: int) -> None:
    assert shares_to_milli_cpu(milli_cpu_to_shares(milli)) == milli


@pytest.mark.parametrize(
    ("quota", "period", "milli"),
    [
        (None, None, None),
        (-1, 100000, None),
        (0, 100000, None),
        (150000, 100000, 1500),
        (50000, 100000, 500),
        (1000, 100000, 10),
    ],
)
def test_quota(quota: int | None, period: int | None, milli: int | None) -> None:
    assert quota_to_milli_cpu(quota, period) == milli


@pytest.mark.parametrize(
    ("parent", "res", "qos", "milli", "limit"),
    [
        ("kubepods-besteffort-podx.slice", Resources(cpu_shares=2), QoS.BESTEFFORT, 0, None),
        ("/kubepods/burstable/podx", Resources(cpu_shares=512), QoS.BURSTABLE, 500, None),
        (
            "kubepods-podx.slice",
            Resources(cpu_shares=2048, cpu_quota=200000, cpu_period=100000),
            QoS.GUARANTEED,
            2000,
            2000,
        ),
        # No cgroup parent: classified from the numbers.
        (
            "",
            Resources(cpu_shares=1024, cpu_quota=100000, cpu_period=100000),
            QoS.GUARANTEED,
            1000,
            1000,
        ),
        ("", Resources(cpu_shares=1024), QoS.BURSTABLE, 1000, None),
        ("", None, QoS.BESTEFFORT, 0, None),
    ],
)
def test_container_request(
    parent: str, res: Resources | None, qos: QoS, milli: int, limit: int | None
) -> None:
    pod = Pod(id="p", name="p", namespace="ns", cgroup_parent=parent)
    req = container_request(pod, Container(id="c", pod_id="p", name="c", resources=res))
    assert (req.qos, req.cpu_request, req.cpu_limit) == (qos, milli, limit)
