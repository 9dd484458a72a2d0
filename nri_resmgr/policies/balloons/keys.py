"""Which BalloonsPolicy keys this policy applies and which it only accepts.

Every key of the balloons models is in exactly one of the two tables (a test walks the
models). Accepted keys are reported once at load (``config.notapplied``).
"""

from __future__ import annotations

_BT = "spec.balloonTypes[]"

APPLIED = frozenset(
    {
        "spec.pinCPU",
        "spec.pinMemory",
        "spec.reservedPoolNamespaces",
        "spec.allocatorTopologyBalancing",
        "spec.preferSpreadOnPhysicalCores",
        "spec.loadClasses[].name",
        "spec.loadClasses[].level",
        "spec.loadClasses[].overloadsLevelInBalloon",
        f"{_BT}.loads",
        "spec.preserve.matchExpressions[].key",
        "spec.preserve.matchExpressions[].operator",
        "spec.preserve.matchExpressions[].values",
        f"{_BT}.name",
        f"{_BT}.namespaces",
        f"{_BT}.matchExpressions[].key",
        f"{_BT}.matchExpressions[].operator",
        f"{_BT}.matchExpressions[].values",
        f"{_BT}.groupBy",
        f"{_BT}.components[].balloonType",
        f"{_BT}.componentCreation",
        f"{_BT}.minCPUs",
        f"{_BT}.maxCPUs",
        f"{_BT}.minBalloons",
        f"{_BT}.maxBalloons",
        f"{_BT}.allocatorPriority",
        f"{_BT}.pinMemory",
        f"{_BT}.memoryTypes",
        f"{_BT}.hideHyperthreads",
        f"{_BT}.preferSpreadOnPhysicalCores",
        f"{_BT}.allocatorTopologyBalancing",
        f"{_BT}.preferCloseToDevices",
        f"{_BT}.shareIdleCPUsInSame",
        f"{_BT}.preferIsolCpus",
        f"{_BT}.preferSpreadingPods",
        f"{_BT}.preferPerNamespaceBalloon",
        f"{_BT}.preferNewBalloons",
        "spec.showContainersInNrt",
        f"{_BT}.showContainersInNrt",
        "spec.idleCPUClass",
        f"{_BT}.cpuClass",
        f"{_BT}.dra.publish",
        f"{_BT}.dra.groupBy",
    }
)

NOT_APPLIED = (
    "spec.turboDomain",
    "spec.controllableInterrupts",
    f"{_BT}.preferCoreType",
    f"{_BT}.schedulingClass",
    f"{_BT}.irqClaim",
    f"{_BT}.irqMode",
    *(
        f"spec.schedulingClasses[].{k}"
        for k in (
            "name",
            "policy",
            "nice",
            "priority",
            "flags",
            "runtime",
            "deadline",
            "period",
            "ioClass",
            "ioPriority",
        )
    ),
    *(
        f"spec.cpuClasses[].{k}"
        for k in (
            "name",
            "minFreq",
            "maxFreq",
            "energyPerformancePreference",
            "uncoreMinFreq",
            "uncoreMaxFreq",
            "freqGovernor",
            "disabledCstates",
            "turboPriority",
            "pctMinFreq",
            "pctMaxFreq",
            "pctPriority",
            "sstClosID",
            "publishExtendedResource",
        )
    ),
)

NOT_APPLIED_CONSTRAINTS = ("spec.reservedResources.memory", "spec.availableResources.memory")
"""Common keys balloons accepts and does not act on: like upstream's, the policy reads only the
``cpu`` entry of both constraints. (Kept apart from ``NOT_APPLIED``, which lists only the
balloons model's own keys.)"""

CLASS_NOT_APPLIED = ("energyPerformancePreference", "disabledCstates")
"""Keys of a ``control.cpu.classes`` entry that balloons' CPU control does not write (it
writes frequencies and governors); said at load as ``spec.control.cpu.classes.<name>.KEY``."""
