"""The balloons policy (compatible with nri-plugins' ``balloons``)."""

from nri_resmgr.policies.balloons.policy import BalloonsPolicy

__all__ = ["BalloonsPolicy"]
