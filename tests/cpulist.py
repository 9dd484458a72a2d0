"""CPU lists as the kernel writes them, read by the tests without the product's parser."""

from __future__ import annotations


def cpu_list(text: str) -> set[int]:
    """The CPUs of a Linux cpu list ("1-3,12"), every CPU inside each range included.

    Written here rather than taken from the product's CpuSet, so a check does not share a
    parser with the code under test.
    """
    cpus: set[int] = set()
    for part in text.split(","):
        if not part.strip():
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus
