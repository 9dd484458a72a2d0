"""Host controls a policy applies besides cpusets: CPU frequency limits (``cpufreq``)."""

from nri_resmgr.control.cpufreq import CpuFreqControl, FreqClass

__all__ = ["CpuFreqControl", "FreqClass"]
