"""Resource use: the daemon's memory stays flat over container create/remove cycles.

A short soak (3,000 cycles after 500 warm-up cycles) against the real daemon process; the
100,000-cycle soak is ``nox -s soak``. The bound is on memory growth, never on time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.soak import soak

CYCLES = 3_000
WARMUP = 500
MAX_GROWTH_KIB = 20 << 10  # 20 MiB: generous; a per-container leak of ~7 KiB would trip it


@pytest.mark.integration
async def test_rss_stays_flat_over_container_cycles(sock_dir: Path) -> None:
    result = await soak(sock_dir, CYCLES, WARMUP)
    print(result.report())
    assert result.growth_kib < MAX_GROWTH_KIB, result.report()
