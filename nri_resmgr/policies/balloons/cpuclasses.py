"""Which CPU class each CPU is in: a balloon's CPUs are in its type's ``cpuClass``, the
allowed CPUs outside every balloon in ``idleCPUClass``. Classes are the frequency settings
of ``control.cpu.classes`` (upstream's ``pkg/resmgr/control/cpu``), written by
``control.cpufreq`` as a step of its own after each decision."""

from __future__ import annotations

import logging

from nri_resmgr.config.models import BalloonsSpec
from nri_resmgr.control import FreqClass
from nri_resmgr.policies.balloons.balloon import Balloon
from nri_resmgr.policies.balloons.state import Balloons

log = logging.getLogger(__name__)


def freq_classes(spec: BalloonsSpec) -> dict[str, FreqClass]:
    """The classes of ``control.cpu.classes``; a class named by a balloon type or by
    ``idleCPUClass`` that is only in ``cpuClasses`` (symbolic frequencies, SST: not
    applied) or nowhere is logged at every load."""
    classes = _defined(spec)
    named = _named(spec)
    only_new = {c.name for c in spec.cpu_classes}
    for name in sorted(named - {""} - set(classes)):
        if name in only_new:
            log.warning("cpu class %r is defined only in cpuClasses: not applied", name)
        else:
            log.warning("cpu class %r is not defined in control.cpu.classes", name)
    return classes


def used(spec: BalloonsSpec) -> list[FreqClass]:
    """The defined classes a balloon type or ``idleCPUClass`` names: the ones written."""
    named = _named(spec)
    return [c for name, c in sorted(_defined(spec).items()) if name in named]


def _defined(spec: BalloonsSpec) -> dict[str, FreqClass]:
    return {
        name: FreqClass(
            name, c.min_freq, c.max_freq, c.freq_governor, c.uncore_min_freq, c.uncore_max_freq
        )
        for name, c in spec.control.cpu.classes.items()
    }


def _named(spec: BalloonsSpec) -> set[str]:
    return {t.cpu_class for t in spec.balloon_types} | {spec.idle_cpu_class}


def assignments(
    state: Balloons, classes: dict[str, FreqClass]
) -> tuple[dict[int, FreqClass], dict[int, str]]:
    """CPU -> its class, and CPU -> what put it there (for the control step's log)."""
    per_cpu: dict[int, FreqClass] = {}
    why: dict[int, str] = {}
    idle = classes.get(state.spec.idle_cpu_class)
    if idle is not None:
        for cpu in state.free():
            per_cpu[cpu], why[cpu] = idle, "idle CPU"
    for b in state.balloons:
        for part in _leaves(b):
            c = classes.get(part.type.cpu_class)
            if c is None:
                continue
            for cpu in part.cpus:
                per_cpu[cpu], why[cpu] = c, f"balloon {part.name}"
    return per_cpu, why


def _leaves(b: Balloon) -> list[Balloon]:
    """A composite balloon's components carry their own classes."""
    return [leaf for c in b.components for leaf in _leaves(c)] if b.components else [b]


__all__ = ["assignments", "freq_classes", "used"]
