"""The balloons gauge as nri-plugins exports it: ``nri_policy_balloons_cores``, one sample
per balloon (its CPU count) with upstream's labels, for the metrics endpoint to serve."""

from __future__ import annotations

import attrs

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.balloons.balloon import Balloon
from nri_resmgr.policies.balloons.state import Balloons

METRIC = "nri_policy_balloons_cores"
HELP = "CPUs"


@attrs.frozen
class Sample:
    name: str
    labels: dict[str, str]
    value: int

    def line(self) -> str:
        """The Prometheus text-format line (labels sorted, as client libraries write them)."""
        inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(self.labels.items()))
        return f"{self.name}{{{inner}}} {self.value}"


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def balloon_samples(state: Balloons) -> list[Sample]:
    idle = state.free()
    return [_sample(state, b, idle) for b in state.balloons]


def _sample(state: Balloons, b: Balloon, idle: CpuSet) -> Sample:
    s = state.system
    shared = state.idle_shared(b, idle)
    allowed = b.cpus | shared
    packages = sorted({f"p{s.cpus[c].package}" for c in b.cpus})
    dies = sorted({f"p{s.cpus[c].package}d{s.cpus[c].die}" for c in b.cpus})
    numas = sorted({f"p{s.cpus[c].package}d{s.cpus[c].die}n{s.cpus[c].node}" for c in b.cpus})
    members = [state.members.get(cid) for cid in b.members]
    names = sorted(a.name for a in members if a is not None)
    mems = s.closest_memory(b.cpus) if b.cpus else CpuSet()
    labels = {
        "balloon_type": b.type.name,
        "cpu_class": b.type.cpu_class,
        "cpus_min": str(b.type.min_cpus),
        "cpus_max": str(b.type.max_cpus),
        "balloon": b.name,
        "groups": ",".join(sorted(set(b.groups.values()))),
        "cpus": str(b.cpus),
        "cpus_count": str(len(b.cpus)),
        "numas": ",".join(numas),
        "numas_count": str(len(numas)),
        "dies": ",".join(dies),
        "dies_count": str(len(dies)),
        "packages": ",".join(packages),
        "packages_count": str(len(packages)),
        "sharedidlecpus": str(shared),
        "sharedidlecpus_count": str(len(shared)),
        "cpus_allowed": str(allowed),
        "cpus_allowed_count": str(len(allowed)),
        "mems": ",".join(str(n) for n in mems),
        "containers": ",".join(names),
        "tot_req_millicpu": str(b.requested),
    }
    return Sample(METRIC, labels, len(b.cpus))


def prometheus_text(state: Balloons) -> str:
    lines = [f"# HELP {METRIC} {HELP}", f"# TYPE {METRIC} gauge"]
    lines += [x.line() for x in balloon_samples(state)]
    return "\n".join(lines) + "\n"
