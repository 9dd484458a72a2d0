"""The DRA kubelet plugin: node infrastructure owned by the resource manager.

It knows nothing of CPUs or memory: which devices exist and what preparing a claim means is
the policy's business, reached through ``ResourceManager.dra_devices/prepare_claims/
unprepare_claims``.
"""

from nri_resmgr.dra.plugin import KubeletPlugin, driver_name_for
from nri_resmgr.dra.publisher import SlicePublisher

__all__ = ["KubeletPlugin", "SlicePublisher", "driver_name_for"]
