"""The topology-aware policy (compatible with nri-plugins' ``topology-aware``)."""

from nri_resmgr.policies.topology_aware.policy import TopologyAwarePolicy

__all__ = ["TopologyAwarePolicy"]
