"""The policies, by name and by configuration kind.

Each policy's modules are imported only when it is created: a daemon runs one policy, and
importing the others was a tenth of its start-up (``python -X importtime``).
"""

from __future__ import annotations

from collections.abc import Callable

from nri_resmgr.resmgr.policy import Policy


def _template() -> Policy:
    from nri_resmgr.policies.template import TemplatePolicy

    return TemplatePolicy()


def _topology_aware() -> Policy:
    from nri_resmgr.policies.topology_aware import TopologyAwarePolicy

    return TopologyAwarePolicy()


def _balloons() -> Policy:
    from nri_resmgr.policies.balloons import BalloonsPolicy

    return BalloonsPolicy()


POLICIES: dict[str, Callable[[], Policy]] = {
    "template": _template,
    "topology-aware": _topology_aware,
    "balloons": _balloons,
}
"""Policy name (its class's ``name``) → a new instance."""


def create_policy(name: str) -> Policy:
    make = POLICIES.get(name)
    if make is None:
        known = ", ".join(sorted(POLICIES))
        raise ValueError(f"unknown policy {name!r} (known: {known})")
    return make()
