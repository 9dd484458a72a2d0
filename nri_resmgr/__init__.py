"""nri-resmgr: a node resource manager for Kubernetes (NRI plugin and DRA driver)."""

__version__ = "0.1.0"
