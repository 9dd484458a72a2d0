"""The template policy: accepts every container and changes nothing.

It is the smallest complete policy, the starting point for writing a new one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from nri_resmgr.config.models import PolicySpec
from nri_resmgr.config.notapplied import report
from nri_resmgr.resmgr.model import Adjustment, Container, Pod, Update
from nri_resmgr.resmgr.policy import PolicyBase, PolicyEnv

log = logging.getLogger(__name__)

NOT_APPLIED = (
    "spec.reservedResources.cpu",
    "spec.reservedResources.memory",
    "spec.availableResources.cpu",
    "spec.availableResources.memory",
    "spec.control.cpu.classes",
)
"""The template places nothing, so the policy keys it accepts are said once at load."""


class TemplatePolicy(PolicyBase):
    name = "template"

    def setup(self, spec: PolicySpec, env: PolicyEnv) -> None:
        super().setup(spec, env)
        report(spec, NOT_APPLIED)

    def reconfigure(self, spec: PolicySpec) -> list[Update]:
        report(spec, NOT_APPLIED)
        return []

    def synchronize(self, pods: Sequence[Pod], containers: Sequence[Container]) -> list[Update]:
        log.info("synchronized %d pods, %d containers", len(pods), len(containers))
        return []

    def create_container(self, pod: Pod, container: Container) -> tuple[Adjustment, list[Update]]:
        log.debug("create container %s/%s/%s", pod.namespace, pod.name, container.name)
        return Adjustment(), []
