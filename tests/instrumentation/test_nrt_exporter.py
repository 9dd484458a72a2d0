"""The NRT exporter's write discipline, with an in-memory API: rate-limited, change-only,
retried on API errors (the real apiserver test is tests/kube/test_nrt_apiserver.py)."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from nri_resmgr.backoff import Backoff
from nri_resmgr.instrumentation.exports import TopologyZone, ZoneResource
from nri_resmgr.instrumentation.metrics import ChangeSignal
from nri_resmgr.kube import KubeObject, NotFound, PatchType, Unavailable
from nri_resmgr.kube.resources import ApiResource
from nri_resmgr.observability.nrt import NrtExporter


class MemoryApi:
    def __init__(self) -> None:
        self.objects: dict[str, KubeObject] = {}
        self.writes = 0
        self.fail_next = 0
        self.applies: list[tuple[str | None, bool]] = []
        self.error: Exception | None = None

    async def patch(
        self, resource: ApiResource, name: str, patch: KubeObject, namespace: str | None = None,
        *, patch_type: PatchType = PatchType.MERGE, subresource: str | None = None,
        field_manager: str | None = None, force: bool = False,
    ) -> KubeObject:  # fmt: skip
        assert patch_type is PatchType.APPLY and name == patch["metadata"]["name"]
        self.applies.append((field_manager, force))
        if self.error is not None:
            raise self.error
        if self.fail_next:
            self.fail_next -= 1
            raise Unavailable(503, "ServiceUnavailable", "try later")
        self.writes += 1
        self.objects[name] = patch | {"metadata": {"name": name, "resourceVersion": "1"}}
        return patch


class Zones:
    def __init__(self) -> None:
        self.available = 4

    def zones(self) -> tuple[str, list[TopologyZone]]:
        cpu = ZoneResource("cpu", "4", "4", str(self.available))
        return "topology-aware", [TopologyZone("NUMA node #0", "numa node", resources=(cpu,))]

    def attributes(self) -> list[tuple[str, str]]:
        return []

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
    # Every try is one forced server-side apply by our field manager: no GET before it.
    assert api.applies == [("nri-resmgr", True)] * 4


async def test_a_report_wakes_the_exporter_and_is_written_once(
    autojump_clock: Any, nursery: trio.Nursery
) -> None:
    api, source, changes = MemoryApi(), Zones(), ChangeSignal()
    nrt = exporter(api, source, changes)
    await nursery.start(nrt.serve)
    await trio.sleep(5)
    assert api.writes == 1
    report = [("nri-resmgr.io/config-generation", "2"), ("nri-resmgr.io/config-status", "Success")]
    nrt.set_report(report)
    await trio.sleep(2.5)  # the rate limit's wait, then the write
    assert api.writes == 2  # without a change of the zones
    written = [(a["name"], a["value"]) for a in api.objects["n"]["attributes"]]
    assert written == [("TopologyPolicy", "topology-aware"), *report]
    nrt.set_report(list(report))  # the same report again: nothing to write
    await trio.sleep(5)
    assert api.writes == 2


async def test_it_takes_reports_only_while_exporting_with_zones_and_writes_going_through(
    autojump_clock: Any, nursery: trio.Nursery
) -> None:
    api, source, changes = MemoryApi(), Zones(), ChangeSignal()
    nrt = exporter(api, source, changes)
    api.fail_next = 1
    await nursery.start(nrt.serve)
    assert nrt.exporting()  # a busy server (503) will take the write: reports still wait for it
    api.error = NotFound(404, "NotFound", "the server could not find the requested resource")
    source.available = 1
    changes.notify()
    await trio.sleep(2.5)
    assert not nrt.exporting()  # no CRD: reports go elsewhere until a write goes through
    api.error = None
    await trio.sleep(5)
    assert nrt.exporting()
    source.zones = lambda: ("template", [])  # type: ignore[method-assign]
    assert not nrt.exporting()


def test_the_daemon_writes_its_nrt_at_most_once_per_its_nrt_interval() -> None:
    from nri_resmgr.app import build_services, make_manager
    from nri_resmgr.cli import Options
    from nri_resmgr.config.documents import load_document

    doc = load_document({"apiVersion": "config.nri/v1alpha1", "kind": "TemplatePolicy",
                         "metadata": {"name": "default"},
                         "spec": {"reservedResources": {"cpu": "750m"}}})  # fmt: skip
    options = Options(policy="template", node_name="n", nrt_interval=7.5)
    services = build_services(options, make_manager(options, doc), doc, kube=MemoryApi())  # type: ignore[arg-type]
    [nrt] = [s for s in services if isinstance(s, NrtExporter)]
    assert nrt.min_interval == 7.5
