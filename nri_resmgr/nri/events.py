"""Event masks and runtime NRI versions: what we may subscribe to on a given runtime.

A runtime rejects a plugin whose Configure reply subscribes to an event it does not know, so
the mask is the events we handle, limited to those valid for the runtime's NRI version.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from nri_resmgr._gen.nri.pkg.api.v1alpha1 import Event

Version = tuple[int, int, int]

# Event e is bit e-1. Runtimes before NRI v0.10 stop at REMOVE_CONTAINER (LAST was 12).
VALID_EVENTS_BEFORE_V0_10 = 0x07FF
VALID_EVENTS_SINCE_V0_10 = 0x3FFF
V0_7: Version = (0, 7, 0)
V0_10: Version = (0, 10, 0)
V0_12: Version = (0, 12, 0)
# What we implement; sent in RegisterPluginRequest.NRI_version.
PLUGIN_NRI_VERSION = "v0.12.2"

# The events the resource manager acts on. The POST_* events and validation are not needed.
NEEDED_EVENTS: tuple[Event, ...] = (
    Event.RUN_POD_SANDBOX,
    Event.UPDATE_POD_SANDBOX,
    Event.STOP_POD_SANDBOX,
    Event.REMOVE_POD_SANDBOX,
    Event.CREATE_CONTAINER,
    Event.START_CONTAINER,
    Event.UPDATE_CONTAINER,
    Event.STOP_CONTAINER,
    Event.REMOVE_CONTAINER,
)

# Events that pre-v0.12 runtimes (and v0.12+ ones after an UNIMPLEMENTED) send as StateChange.
STATE_CHANGE_EVENTS = frozenset(
    {
        Event.RUN_POD_SANDBOX,
        Event.POST_UPDATE_POD_SANDBOX,
        Event.STOP_POD_SANDBOX,
        Event.REMOVE_POD_SANDBOX,
        Event.POST_CREATE_CONTAINER,
        Event.START_CONTAINER,
        Event.POST_START_CONTAINER,
        Event.POST_UPDATE_CONTAINER,
        Event.REMOVE_CONTAINER,
    }
)

_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")
_UNKNOWN_NRI_VERSIONS = {"", "(devel)", "0.0.0-unknown", "v0.0.0-unknown"}


def event_bit(event: Event) -> int:
    return 1 << (int(event) - 1)


def mask_of(events: Iterable[Event]) -> int:
    mask = 0
    for event in events:
        mask |= event_bit(event)
    return mask


def has_event(mask: int, event: Event) -> bool:
    return bool(mask & event_bit(event))


def parse_version(text: str) -> Version | None:
    match = _VERSION_RE.match(text.strip())
    if not match:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def valid_events(nri_version: Version) -> int:
    return VALID_EVENTS_SINCE_V0_10 if nri_version >= V0_10 else VALID_EVENTS_BEFORE_V0_10


def runtime_nri_version(nri_version: str, runtime_name: str, runtime_version: str) -> Version:
    """The runtime's NRI version: as it says (v0.12+), else inferred, else assumed old.

    Guessing too old only costs the UPDATE_POD_SANDBOX subscription; guessing too new gets
    the plugin rejected, so every doubt resolves to "before v0.10".
    """
    if nri_version.strip() not in _UNKNOWN_NRI_VERSIONS:
        parsed = parse_version(nri_version)
        if parsed is not None and parsed != (0, 0, 0):
            return parsed
    return _infer_from_runtime(runtime_name.lower(), parse_version(runtime_version))


def _infer_from_runtime(name: str, version: Version | None) -> Version:
    if version is None:
        return (0, 0, 0)
    if "containerd" in name and version >= (2, 2, 0):
        return V0_10
    if ("cri-o" in name or "crio" in name) and version >= (1, 34, 0):
        return V0_10
    return (0, 0, 0)


def subscription_mask(nri_version: Version, needed: Iterable[Event] = NEEDED_EVENTS) -> int:
    """Never 0: a zero mask would subscribe us to every event, validation included."""
    mask = mask_of(needed) & valid_events(nri_version)
    return mask or event_bit(Event.CREATE_CONTAINER)
