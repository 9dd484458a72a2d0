"""The policies, by name and by configuration kind."""

from __future__ import annotations

from nri_resmgr.resmgr.policies.balloons import BalloonsPolicy
from nri_resmgr.resmgr.policies.template import TemplatePolicy
from nri_resmgr.resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.policy import Policy

POLICIES: dict[str, type[Policy]] = {
    TemplatePolicy.name: TemplatePolicy,
    TopologyAwarePolicy.name: TopologyAwarePolicy,
    BalloonsPolicy.name: BalloonsPolicy,
}


def create_policy(name: str) -> Policy:
    try:
        return POLICIES[name]()
    except KeyError:
        known = ", ".join(sorted(POLICIES))
        raise ValueError(f"unknown policy {name!r} (known: {known})") from None
