"""The NRT exporter's write discipline, with an in-memory API: rate-limited, change-only,
retried on API errors (the real apiserver test is tests/kube/test_nrt_apiserver.py)."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from nri_resmgr.backoff import Backoff
from nri_resmgr.instrumentation.exports import TopologyZone, ZoneResource
from nri_resmgr.instrumentation.metrics import ChangeSignal
from nri_resmgr.kube import KubeObject, NotFound, Unavailable
from nri_resmgr.kube.resources import ApiResource
from nri_resmgr.observability.nrt import NrtExporter


class MemoryApi:
    def __init__(self) -> None:
        self.objects: dict[str, KubeObject] = {}
        self.writes = 0
        self.fail_next = 0

    async def get(self, resource: ApiResource, name: str) -> KubeObject:
        if name not in self.objects:
            raise NotFound(404, "NotFound", name)
        return self.objects[name]

    async def create(self, resource: ApiResource, obj: KubeObject) -> KubeObject:
        return self._write(obj)

    async def replace(self, resource: ApiResource, obj: KubeObject) -> KubeObject:
        return self._write(obj)

    def _write(self, obj: KubeObject) -> KubeObject:
        if self.fail_next:
            self.fail_next -= 1
            raise Unavailable(503, "ServiceUnavailable", "try later")
        self.writes += 1
        self.objects[obj["metadata"]["name"]] = obj | {
            "metadata": {"name": "n", "resourceVersion": "1"}
        }
        return obj


class Zones:
    def __init__(self) -> None:
        self.available = 4

    def zones(self) -> tuple[str, list[TopologyZone]]:
        cpu = ZoneResource("cpu", "4", "4", str(self.available))
        return "topology-aware", [TopologyZone("NUMA node #0", "numa node", resources=(cpu,))]

    def enabled(self) -> bool:
        return True


def exporter(api: MemoryApi, source: Zones, changes: ChangeSignal) -> NrtExporter:
    return NrtExporter(api, "n", source, changes.wait, min_interval=2.0,
                       backoff=Backoff(initial=1.0, maximum=1.0, jitter=0))  # fmt: skip


async def test_a_burst_of_changes_is_one_write_after_the_rate_limit(
    autojump_clock: Any, nursery: trio.Nursery
) -> None:
    api, source, changes = MemoryApi(), Zones(), ChangeSignal()
    await nursery.start(exporter(api, source, changes).serve)
    await trio.testing.wait_all_tasks_blocked()
    assert api.writes == 1
    start = trio.current_time()
    for n in range(10):
        source.available = n % 4
        changes.notify()
        await trio.sleep(0.01)
    await trio.sleep(5)
    assert api.writes == 2  # ten changes inside the 2 s window: written once, with the last
    assert api.objects["n"]["zones"][0]["resources"][0]["available"] == "1"
    assert trio.current_time() - start >= 2.0
    changes.notify()  # nothing changed since: no write
    await trio.sleep(5)
    assert api.writes == 2


async def test_api_errors_are_retried_with_backoff(
    autojump_clock: Any, nursery: trio.Nursery
) -> None:
    api, source, changes = MemoryApi(), Zones(), ChangeSignal()
    api.fail_next = 3
    await nursery.start(exporter(api, source, changes).serve)
    await trio.sleep(10)
    assert api.writes == 1 and api.fail_next == 0
