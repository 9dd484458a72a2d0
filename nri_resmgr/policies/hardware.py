"""What every policy that places containers on the hardware shares: the discovered system
and reading the cpusets the runtime reports.

A policy keeps no pod/container maps: the runtime is the one record of what runs (told in
Synchronize and by each event), and each allocation carries the pod and container it was made
for (what a reconfiguration re-derives placement from)."""

from __future__ import annotations

import functools
import logging

from nri_resmgr.config.models import PolicySpec
from nri_resmgr.cpuset import CpuSet, CpuSetError
from nri_resmgr.resmgr.model import Container
from nri_resmgr.resmgr.policy import PolicyBase, PolicyEnv
from nri_resmgr.sysfs import System, discover

log = logging.getLogger(__name__)


class HardwarePolicy(PolicyBase):
    def __init__(self, system: System | None = None) -> None:
        super().__init__()
        self._system = system

    @property
    def system(self) -> System:
        if self._system is None:
            raise RuntimeError(f"{self.name}: used before setup()")
        return self._system

    def setup(self, spec: PolicySpec, env: PolicyEnv) -> None:
        super().setup(spec, env)
        if self._system is None:
            self._system = discover(env.host_root)


def reported_cpuset(text: str | None, c: Container) -> CpuSet | None:
    """A cpuset as the runtime reports it; unparsable ones are logged and treated as unset."""
    if not text:
        return None
    try:
        return _parse(text)
    except CpuSetError as e:
        log.warning("container %s: ignoring unparsable cpuset %r: %s", c.id, text, e)
        return None


@functools.lru_cache(maxsize=256)
def _parse(text: str) -> CpuSet:
    # A Synchronize reads thousands of cpusets but few distinct ones (the containers of a
    # pool share one): each text is parsed once. A CpuSet is immutable, so sharing is safe;
    # errors are not cached, so every bad one is still logged for its container.
    return CpuSet.parse(text)
