"""The DRA bench's floors answer the client as the daemon does, each row its own."""

from __future__ import annotations

from tests.bench_dra import FLOORS, bench_prepare_with_floors


async def test_the_daemon_and_each_floor_get_their_own_timed_calls() -> None:
    rows = await bench_prepare_with_floors(7)
    assert set(rows) == {"idle", *FLOORS}
    for row in rows.values():
        assert row["calls"] == 7
        assert row["server_cpu_us_per_call"] > 0
        assert row["client_cpu_us_per_call"] > 0
