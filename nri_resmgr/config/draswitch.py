"""Whether DRA runs: ``dra.enabled`` and the policy keys that ask for devices.

``dra.enabled`` is an optional bool so that a policy configuration which clearly asks to
publish devices turns DRA on by itself, while an explicit ``false`` still keeps it off:

=========  ==================  =====================================================
enabled    the policy asks     DRA
=========  ==================  =====================================================
true       either              on
false      yes                 off; each asking key said once as not applied
false      no                  off
unset      yes                 on, said once with the key that did it
unset      no                  off
=========  ==================  =====================================================

Keys that ask (``device_keys``): topology-aware's ``dra.cpuDeviceMode: grouped`` and a
balloon type's ``dra.publish: true``. Not asking: ``cpuDeviceMode: individual`` (the
default's own value: a chart or tool that writes the default must not turn DRA on),
``dra.groupBy`` and ``dra.groupedCPUs`` (parameters of grouped mode, refused at load without
it, so ``cpuDeviceMode`` is always the key that asked), and a balloon type's ``dra.groupBy``
(refused at load without ``publish``, likewise).

Pure functions of the spec, except ``say_not_applied`` (one log line per key and process).
The effective value is fixed at start: the kubelet plugin, its asyncio loop and grouped
mode's CPUs are set up once, so ``switch_refusal`` refuses a reconfiguration that changes it.
"""

from __future__ import annotations

import attrs

from nri_resmgr.config.models import BalloonsSpec, PolicySpec
from nri_resmgr.config.notapplied import say_once

ENABLED = "spec.dra.enabled"

__all__ = ["ENABLED", "DraSwitch", "device_keys", "dra_switch", "say_not_applied", "switch_refusal"]


def device_keys(spec: PolicySpec) -> tuple[str, ...]:
    """The configuration paths in ``spec`` that ask for DRA devices, in document order."""
    keys = []
    if spec.dra.cpu_device_mode == "grouped":
        keys.append("spec.dra.cpuDeviceMode")
    if isinstance(spec, BalloonsSpec):
        keys += [
            f"spec.balloonTypes[{i}].dra.publish"
            for i, bt in enumerate(spec.balloon_types)
            if bt.dra is not None and bt.dra.publish
        ]
    return tuple(keys)


@attrs.frozen
class DraSwitch:
    """The effective ``dra.enabled`` of a spec and why."""

    on: bool
    explicit: bool | None
    """``dra.enabled`` as written (None: unset)."""
    asked_by: str | None
    """The first key that asks for devices, whatever ``explicit`` says (None: none)."""

    @property
    def by_policy(self) -> bool:
        """On because a policy key asked, ``dra.enabled`` being unset."""
        return self.on and self.explicit is None

    @property
    def cause(self) -> str:
        """The key that decided, for log lines: ``spec.dra.enabled`` unless it was unset."""
        if self.explicit is not None or self.asked_by is None:
            return ENABLED
        return self.asked_by


def dra_switch(spec: PolicySpec) -> DraSwitch:
    keys = device_keys(spec)
    asked_by = keys[0] if keys else None
    explicit = spec.dra.enabled
    on = explicit if explicit is not None else asked_by is not None
    return DraSwitch(on=on, explicit=explicit, asked_by=asked_by)


def switch_refusal(old: PolicySpec, new: PolicySpec) -> str | None:
    """Why ``new`` cannot replace ``old`` on a running daemon (None: it can): it would turn
    DRA on or off. Names ``spec.dra.enabled`` when that changed, else the policy key whose
    appearance or removal did it."""
    was, now = dra_switch(old), dra_switch(new)
    if was.on == now.on:
        return None
    verb = "enable" if now.on else "disable"
    if was.explicit != now.explicit:
        key, why = ENABLED, ""
    else:  # both unset: a key asking for devices came or went
        key = now.asked_by or was.asked_by or ENABLED
        asks = "asks" if now.on else "no longer asks"
        why = f" ({key} {asks} for devices and {ENABLED} is unset)"
    return (
        f"{key}: cannot {verb} DRA on a running daemon{why}; "
        "restart nri-resmgr to apply this change"
    )


def say_not_applied(spec: PolicySpec) -> list[str]:
    """With ``dra.enabled: false``, say once per key and process that each key asking for
    devices is accepted but not applied; return those keys."""
    if spec.dra.enabled is not False:
        return []
    keys = device_keys(spec)
    for key in keys:
        say_once(key, because=f"{ENABLED} is false")
    return list(keys)
