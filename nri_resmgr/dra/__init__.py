"""The DRA kubelet plugin: node infrastructure owned by the resource manager.

Two layers, as dra-driver-cpu sits on ``k8s.io/dynamic-resource-allocation/kubeletplugin``:
``kubeletplugin`` (registration, the DRA gRPC service, the ResourceSlice publisher, device
metadata; knows nothing of CPUs) under ``cpu`` (the driver: which devices exist and which
CPUs a claim stands for, asked of the policy through the resource manager). ``setup`` wires
them from the configuration.
"""

from nri_resmgr.dra.cpu import CpuDriver, driver_name_for
from nri_resmgr.dra.kubeletplugin import KubeletPlugin, SlicePublisher

__all__ = ["CpuDriver", "KubeletPlugin", "SlicePublisher", "driver_name_for"]
