"""What every policy that places containers on the hardware shares: the discovered system,
the pods and containers it was told about (a reconfiguration rebuilds placement from them),
and reading the cpusets the runtime reports."""

from __future__ import annotations

import logging

from nri_resmgr.config.models import PolicySpec
from nri_resmgr.resmgr.cpuset import CpuSet, CpuSetError
from nri_resmgr.resmgr.model import Container, Pod
from nri_resmgr.resmgr.policy import PolicyBase, PolicyEnv
from nri_resmgr.sysfs import System, discover

log = logging.getLogger(__name__)


class HardwarePolicy(PolicyBase):
    def __init__(self, system: System | None = None) -> None:
        super().__init__()
        self._system = system
        self.pods: dict[str, Pod] = {}
        self.containers: dict[str, Container] = {}

    @property
    def system(self) -> System:
        if self._system is None:
            raise RuntimeError(f"{self.name}: used before setup()")
        return self._system

    def setup(self, spec: PolicySpec, env: PolicyEnv) -> None:
        super().setup(spec, env)
        if self._system is None:
            self._system = discover(env.host_root)

    def run_pod_sandbox(self, pod: Pod) -> None:
        self.pods[pod.id] = pod

    def update_pod_sandbox(self, pod: Pod) -> None:
        self.pods[pod.id] = pod

    def remove_pod_sandbox(self, pod: Pod) -> None:
        self.pods.pop(pod.id, None)


def reported_cpuset(text: str | None, c: Container) -> CpuSet | None:
    """A cpuset as the runtime reports it; unparsable ones are logged and treated as unset."""
    if not text:
        return None
    try:
        return CpuSet.parse(text)
    except CpuSetError as e:
        log.warning("container %s: ignoring unparsable cpuset %r: %s", c.id, text, e)
        return None
