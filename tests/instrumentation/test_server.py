"""The HTTP service in-process: probes, bad addresses, ports in use, rebinding on reconfigure,
scrapes during reconfigure, and stalled clients next to DRA calls."""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator

import attrs
import httpx
import pytest
import trio

from nri_resmgr.config.models import InstrumentationConfig, PolicySpec, TemplateSpec
from nri_resmgr.dra.kubeletplugin.claims import ClaimRef
from nri_resmgr.dra.kubeletplugin.node_service import ClaimService
from nri_resmgr.errors import ConfigError
from nri_resmgr.instrumentation.health import Readiness
from nri_resmgr.instrumentation.metrics import CONFIG_RELOADS, DRA_REQUESTS, REGISTRY
from nri_resmgr.observability.endpoint import parse_endpoint
from nri_resmgr.observability.server import HttpService
from nri_resmgr.policies import create_policy
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.policy import PolicyEnv
from tests.dra.fake_driver import DRIVER, AllocatedEverywhere, LockedDriver, uid


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spec(port: int, export: bool = True) -> PolicySpec:
    config = InstrumentationConfig(http_endpoint=f"127.0.0.1:{port}", prometheus_export=export)
    return TemplateSpec(instrumentation=config)


@attrs.frozen
class Running:
    manager: ResourceManager
    http: HttpService
    readiness: Readiness
    port: int


@pytest.fixture
async def running(nursery: trio.Nursery) -> AsyncIterator[Running]:
    port = free_port()
    manager = ResourceManager(create_policy("template"), spec(port), PolicyEnv())
    readiness = Readiness()
    http = HttpService(lambda: manager.spec, readiness)
    manager.reconfigure_hooks.append(http.prepare)
    await nursery.start(http.serve)
    yield Running(manager, http, readiness, port)
    await http.stop()


async def get(port: int, path: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.get(f"http://127.0.0.1:{port}{path}")


async def wait_bound(http: HttpService) -> None:
    with trio.fail_after(30):
        while http.bound is None:
            await trio.sleep(0.01)


async def test_probes_report_liveness_and_the_missing_readiness_conditions(
    running: Running,
) -> None:
    await wait_bound(running.http)
    running.readiness.require("nri")
    running.readiness.require("dra")
    assert (await get(running.port, "/healthz")).text == "ok\n"
    not_ready = await get(running.port, "/readyz")
    assert (not_ready.status_code, not_ready.text) == (503, "not ready: dra, nri\n")
    running.readiness.set("nri", True)
    running.readiness.set("dra", True)
    assert (await get(running.port, "/readyz")).status_code == 200
    assert (await get(running.port, "/nothing")).status_code == 404


async def test_metrics_are_served_only_with_prometheus_export(running: Running) -> None:
    await wait_bound(running.http)
    assert (await get(running.port, "/metrics")).status_code == 200
    await running.manager.reconfigure(spec(running.port, export=False))
    off = await get(running.port, "/metrics")
    assert off.status_code == 404 and "prometheusExport is off" in off.text


def test_an_unparsable_endpoint_is_a_config_error_naming_the_key() -> None:
    for bad in ("localhost", "localhost:http", ":70000"):
        with pytest.raises(ConfigError, match=r"spec.instrumentation.httpEndpoint: "):
            parse_endpoint(bad)
    assert parse_endpoint("") is None
    assert str(parse_endpoint(":8891")) == "0.0.0.0:8891"
    assert str(parse_endpoint("[::1]:8891")) == "[::1]:8891"


async def test_a_port_in_use_at_start_is_logged_and_nothing_else_stops(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        manager = ResourceManager(create_policy("template"), spec(port), PolicyEnv())
        http = HttpService(lambda: manager.spec, Readiness())
        with caplog.at_level(logging.ERROR):
            await nursery.start(http.serve)
            await trio.testing.wait_all_tasks_blocked()
        assert f"cannot listen on 127.0.0.1:{port}" in caplog.text
        assert http.bound is None
        # The manager (and so NRI and DRA) carries on: its lock is free, its devices answer.
        assert not manager.lock.locked()
        assert await manager.dra_devices() == []
        await http.stop()


async def test_reconfigure_rebinds_to_the_new_endpoint(running: Running) -> None:
    await wait_bound(running.http)
    new_port = free_port()
    await running.manager.reconfigure(spec(new_port))
    await wait_bound(running.http)
    assert running.http.bound == ("127.0.0.1", new_port)
    assert (await get(new_port, "/healthz")).status_code == 200
    with pytest.raises(httpx.ConnectError):
        await get(running.port, "/healthz")


async def test_a_port_in_use_refuses_the_reconfiguration_and_the_old_endpoint_stays(
    running: Running,
) -> None:
    await wait_bound(running.http)
    refused = CONFIG_RELOADS.labels("refused")._value.get()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"httpEndpoint: cannot listen on 127.0.0.1:{port}"):
            await running.manager.reconfigure(spec(port))
    assert running.manager.spec == spec(running.port)
    assert (await get(running.port, "/healthz")).status_code == 200
    assert CONFIG_RELOADS.labels("refused")._value.get() == refused + 1


async def test_scrapes_during_reconfigurations_all_get_an_answer(running: Running) -> None:
    await wait_bound(running.http)
    statuses: list[int] = []

    async def scrape() -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            for _ in range(30):
                reply = await client.get(f"http://127.0.0.1:{running.port}/metrics")
                statuses.append(reply.status_code)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(scrape)
        for n in range(30):
            await running.manager.reconfigure(spec(running.port, export=n % 2 == 0))
            await trio.sleep(0)
    assert len(statuses) == 30 and set(statuses) <= {200, 404}


async def test_stalled_http_clients_do_not_hold_up_dra_claims(running: Running) -> None:
    await wait_bound(running.http)
    stalled = []
    for _ in range(20):
        s = await trio.open_tcp_stream("127.0.0.1", running.port)
        await s.send_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # headers never end
        stalled.append(s)
    claims = ClaimService(LockedDriver(running.manager.lock), DRIVER, AllocatedEverywhere())  # type: ignore[arg-type]
    before = DRA_REQUESTS.labels("NodePrepareResources", "ok")._value.get()
    claim = uid("u1")
    with trio.fail_after(30):
        outcome = await claims.prepare([ClaimRef(claim, "default", f"claim-{claim}")])
        assert (await get(running.port, "/healthz")).status_code == 200
    assert outcome[claim].error == ""
    assert DRA_REQUESTS.labels("NodePrepareResources", "ok")._value.get() == before + 1
    assert b"nri_resmgr_dra_requests_total" in _exposition()
    for s in stalled:
        await s.aclose()


def _exposition() -> bytes:
    from prometheus_client import generate_latest

    return generate_latest(REGISTRY)
