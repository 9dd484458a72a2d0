"""nri-plugins' balloons e2e test02-prometheus-metrics: its metric-line expectations
checked against the gauge lines the project renders (``balloons/metrics.py``), with
upstream's own regular expressions. (Serving them over HTTP is the metrics endpoint's.)"""

from __future__ import annotations

import re
from pathlib import Path

from nri_resmgr.policies.balloons.metrics import prometheus_text
from tests.policies.balloons.scenario import Scenario

ANN = "balloon.balloons.resource-policy.nri.io"
NO_MEM = {"memreq": "", "memlim": ""}

METRICS_CFG = {
    "reservedResources": {"cpu": "1"},
    "balloonTypes": [
        {"name": "full-core", "minCPUs": 2, "maxCPUs": 2, "hideHyperthreads": True,
         "cpuClass": "normal"},
        {"name": "fast-dualcore", "minCPUs": 4, "maxCPUs": 4, "cpuClass": "turbo",
         "preferNewBalloons": True},
        {"name": "flex", "maxCPUs": 8, "cpuClass": "slow"},
    ],
    "instrumentation": {"httpEndpoint": ":8891", "prometheusExport": True},
    "log": {"debug": ["policy"], "klog": {"skip_headers": True}},
}  # fmt: skip


def has_line(s: Scenario, pattern: str) -> bool:
    text = prometheus_text(s.policy.state)
    return any(re.search(pattern, line) for line in text.splitlines())


def test02_prometheus_metrics(tmp_path: Path) -> None:
    s = Scenario(tmp_path, METRICS_CFG)
    assert has_line(s, r'balloon="default\[0\]"') and has_line(s, r'balloon="reserved\[0\]"')
    for absent in (r'balloon="full-core\[0\]"', 'balloon_type="full-core"',
                   'balloon_type="fast-dualcore"', 'balloon_type="flex"'):  # fmt: skip
        assert not has_line(s, absent)
    hide = "hide-hyperthreads.resource-policy.nri.io/container.pod0c1"
    s.create(contcount=2, annotations={ANN: "full-core", hide: "false"}, cpureq="100m",
             cpulim="100m", memreq="100M", memlim="100M")  # fmt: skip
    assert has_line(s, r'balloon="default\[0\]"') and has_line(s, r'balloon="reserved\[0\]"')
    assert has_line(
        s,
        r'nri_policy_balloons_cores\{balloon="full-core\[0\]",balloon_type="full-core",'
        r'containers="default/pod0/pod0c0,default/pod0/pod0c1",cpu_class="normal",cpus=".*",'
        r'cpus_allowed=".*",cpus_allowed_count="2",cpus_count="2",cpus_max="2",cpus_min="2",'
        r'dies="p[01]d[01]",dies_count="1",groups="",mems="[0-3]",numas="p[01]d[01]n[0-3]",'
        r'numas_count="1",packages="p[01]",packages_count="1",sharedidlecpus="",'
        r'sharedidlecpus_count="0",tot_req_millicpu="(199|200)"\} 2',
    )
    c = s.cpus
    assert len(c["pod0c0"]) == 1 and len(c["pod0c1"]) == 2 and c["pod0c0"].issubset(c["pod0c1"])
    s.create(annotations={ANN: "fast-dualcore"}, cpureq="200m", cpulim="200m", **NO_MEM)
    assert has_line(s, r'balloon="fast-dualcore\[0\]".*tot_req_millicpu="(199|200)".* 4')
    assert not has_line(s, r'balloon="fast-dualcore\[1\]"')
    s.create(annotations={ANN: "fast-dualcore"}, cpureq="500m", cpulim="500m", **NO_MEM)
    assert has_line(s, r'balloon="fast-dualcore\[0\]"')
    assert has_line(s, r'balloon="fast-dualcore\[1\]".*tot_req_millicpu="500".* 4')
    assert not has_line(s, 'balloon_type="flex"')
    s.create(annotations={ANN: "flex"}, cpureq="3500m", cpulim="3500m", **NO_MEM)
    assert has_line(s, 'balloon_type="flex".* 4')
    s.create(annotations={ANN: "flex"}, cpureq="1200m", cpulim="1200m", **NO_MEM)
    assert has_line(s, 'balloon_type="flex".* 5')
    s.delete("pod3")
    assert has_line(s, 'balloon_type="flex".* 2')
    s.delete("pod4")
    assert not has_line(s, 'balloon_type="flex"')
    s.delete("pod1")
    assert has_line(s, r'balloon="fast-dualcore\[1\]"')
    assert not has_line(s, r'balloon="fast-dualcore\[0\]"')
    s.create(annotations={ANN: "fast-dualcore"}, cpureq="4000m", cpulim="4000m", memreq="100M",
             memlim="100M")  # fmt: skip
    assert has_line(s, r'balloon="fast-dualcore\[1\]".*pod2c0.* 4')
    assert has_line(s, r'balloon="fast-dualcore\[0\]".*pod5c0.* 4')
