"""The template policy: accepts every container and changes nothing.

It is the smallest complete policy, the starting point for writing a new one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from nri_resmgr.resmgr.model import Adjustment, Container, Pod, Update
from nri_resmgr.resmgr.policy import PolicyBase

log = logging.getLogger(__name__)


class TemplatePolicy(PolicyBase):
    name = "template"

    def synchronize(self, pods: Sequence[Pod], containers: Sequence[Container]) -> list[Update]:
        log.info("synchronized %d pods, %d containers", len(pods), len(containers))
        return []

    def create_container(self, pod: Pod, container: Container) -> tuple[Adjustment, list[Update]]:
        log.debug("create container %s/%s/%s", pod.namespace, pod.name, container.name)
        return Adjustment(), []
