"""Pod annotation values reach the log bounded (issue 34 item 8): a pod may carry up to
256 KiB of annotations, and every create of each of its containers that logs a bad value
would write it again in full.

Every annotation the policies read, in every scope (``/container.NAME``, ``/pod``, bare),
is given a long value that is wrong for it, for topology-aware and balloons; each log line
the creation writes must stay short, and still say which value was refused."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from nri_resmgr.policies.balloons import BalloonsPolicy
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.policy import Policy
from tests.policies.topology_aware_e2e.keys_table import ANNOTATIONS
from tests.policies.workload import balloons_spec, guaranteed, start, topology_spec
from tests.sysfs.fakesys import N4C16

LONG = 64 << 10
LINE_LIMIT = 2000
DOMAIN = "resource-policy.nri.io"


def keys() -> list[str]:
    names = [*ANNOTATIONS, "balloon.balloons"]
    out: list[str] = []
    for name in names:
        if name in ("affinity", "anti-affinity"):
            base = f"{DOMAIN}/{name}"
        elif "/" in name:
            base = name
        else:
            base = f"{name}.{DOMAIN}"
        out += [base, f"{base}/pod", f"{base}/container.c0"]
    return out


def scoped(key: str) -> str:
    for suffix in ("/pod", "/container.c0"):
        if key.endswith(suffix):
            return suffix
    return ""


@pytest.mark.parametrize("scope", ["bare", "pod", "container"])
@pytest.mark.parametrize("policy", ["topology-aware", "balloons"])
def test_bad_annotation_values_are_logged_shortened(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, policy: str, scope: str
) -> None:
    p: Policy = TopologyAwarePolicy() if policy == "topology-aware" else BalloonsPolicy()
    spec = topology_spec() if policy == "topology-aware" else balloons_spec()
    start(p, tmp_path, N4C16, spec)
    suffix = {"bare": "", "pod": "/pod", "container": "/container.c0"}[scope]
    bad = "x{" * (LONG // 2)  # neither a boolean, a name, YAML nor a list of anything
    annotations = {k: bad for k in keys() if scoped(k) == suffix}
    assert len(annotations) == len(ANNOTATIONS) + 1
    with caplog.at_level(logging.DEBUG):
        try:
            p.create_container(*guaranteed("pod", 1000, annotations=annotations))
        except Exception as e:  # a refusal names the value too
            logging.getLogger("test").error("refused: %s", e)
    lines = [r.getMessage() for r in caplog.records]
    assert lines
    long = [line[:200] + "..." for line in lines if len(line) > LINE_LIMIT]
    assert long == []
    assert any(f"({LONG} characters)" in line for line in lines)
