"""The generic kubelet-plugin layer: registration, the DRA gRPC service, the ResourceSlice
publisher and device metadata, under a ``Driver`` that knows what its devices are.

Nothing here knows about CPUs (``tests/dra/test_layers.py`` holds it to that); the CPU
driver is ``nri_resmgr.dra.cpu``.
"""

from nri_resmgr.dra.kubeletplugin.claims import AllocatedClaim, AllocationResult, ClaimRef
from nri_resmgr.dra.kubeletplugin.devices import Capacity, Device, RequestPolicy
from nri_resmgr.dra.kubeletplugin.driver import Driver, PreparedDevice, PrepareResult
from nri_resmgr.dra.kubeletplugin.plugin import (
    CDI_DIR,
    KUBELET_PLUGINS_DIR,
    KUBELET_REGISTRY_DIR,
    KubeletPlugin,
)
from nri_resmgr.dra.kubeletplugin.publisher import SlicePublisher

__all__ = [
    "CDI_DIR",
    "KUBELET_PLUGINS_DIR",
    "KUBELET_REGISTRY_DIR",
    "AllocatedClaim",
    "AllocationResult",
    "Capacity",
    "ClaimRef",
    "Device",
    "Driver",
    "KubeletPlugin",
    "PrepareResult",
    "PreparedDevice",
    "RequestPolicy",
    "SlicePublisher",
]
