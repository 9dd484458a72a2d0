"""Errors of CPU placement: a request for more CPUs than there are, and a container that
cannot be given any CPU it may run on."""

from __future__ import annotations

from nri_resmgr.errors import ResmgrError


class AllocationError(ResmgrError, RuntimeError):
    """Not enough CPUs to satisfy a request."""


class PlacementError(AllocationError):
    """A container cannot be given any CPU it may run on. Its creation fails with this message
    (naming the container and the shortage) rather than the container running unpinned."""


__all__ = ["AllocationError", "PlacementError"]
