"""The CPU driver under the kubelet-plugin layer: the policy's CPUs as devices; Prepare and
Unprepare as claimed CPUs, CDI specs and claim records."""

from nri_resmgr.dra.cpu.driver import CpuDriver, driver_name_for

__all__ = ["CpuDriver", "driver_name_for"]
