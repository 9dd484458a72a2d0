"""Latency summaries: median, p99 and max of a sample list, in microseconds."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

Summary = dict[str, float | int]


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    if not sorted_values:
        raise ValueError("percentile of no samples")
    rank = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values) + 0.5) - 1))
    return sorted_values[rank]


def summarize_ns(samples_ns: Sequence[int]) -> Summary:
    us = sorted(s / 1000 for s in samples_ns)
    return {
        "n": len(us),
        "median_us": round(statistics.median(us), 1),
        "p99_us": round(percentile(us, 0.99), 1),
        "max_us": round(us[-1], 1),
    }


def ratio(ours: float, theirs: float) -> float | None:
    return round(ours / theirs, 2) if theirs > 0 else None
