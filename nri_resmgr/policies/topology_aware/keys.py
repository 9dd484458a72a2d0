"""Pod annotations upstream's topology-aware policy reads that nri-resmgr accepts but does
not act on: each is said once per process when a pod carrying it is created
(``annotations.report_unread``), so that none is silently ignored."""

from __future__ import annotations

from nri_resmgr.policies.annotations import DOMAIN

_IN_DOMAIN = (
    "cold-start",
    "scheduling-class",
    "cpu-class",
    "irq-affinity",
    "rdtclass",
    "blockioclass",
)
# The topology hint annotations are applied (``hint_sources.py``), which says itself what of them is
# not: test hints without ENABLE_TEST_APIS, hints from mounts and pod resources, and the
# memory zone of pick-resources-by-hints.

NOT_APPLIED_ANNOTATIONS = frozenset(
    {f"{name}.{DOMAIN}" for name in _IN_DOMAIN} | {"noderesource.dev/resources"}
)

NOT_APPLIED = (
    "spec.reservedResources.memory",
    "spec.availableResources.memory",
    "spec.control.cpu.classes",
    "spec.schedulingClasses",
    "spec.namespaceSchedulingClasses",
    "spec.podQoSSchedulingClasses",
    "spec.cpuClasses",
    "spec.sharedPoolCPUClass",
    "spec.reservedPoolCPUClass",
    "spec.defaultExclusiveCPUClass",
    "spec.controllableInterrupts",
)
"""Config keys accepted but not applied. Scheduling classes: setting a task's scheduling
policy and I/O priority is a syscall per task, not a file under ``--host-root``. The
``cpuClasses`` list and the pool classes that name its entries: symbolic frequencies, SST
and PCT need platform data and hardware interfaces (as balloons). ``controllableInterrupts``:
IRQ affinity is not implemented. CPU classes: upstream's topology-aware policy uses
them only through the ``cpu-class`` annotation, not applied either. The memory
constraints, as in nri-plugins: its topology-aware policy reads
only the ``cpu`` entry of both (cmd/plugins/topology-aware/policy/topology-aware-policy.go,
checkConstraints: ``p.cfg.AvailableResources.Get(cfgapi.CPU)`` and
``p.cfg.ReservedResources.Get(cfgapi.CPU)``; nothing else there reads either), and its libmem
allocator gets every node's whole capacity. So do the memory zones here."""
