"""The plugin with its publisher, and the configuration switch that decides whether it runs."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio

from nri_resmgr.dra.kubeletplugin.publisher import SlicePublisher
from nri_resmgr.dra.setup import build_dra_plugin
from tests.dra.conftest import NODE, make_manager, wait_until
from tests.dra.fake_kube import FakeKube
from tests.dra.kubelet_client import Kubelet

DRIVER = "template.nri.io"


async def test_registration_republishes_slices_kubelet_wiped(
    aio_loop: object, socket_dir: Path, kubelet: Kubelet
) -> None:
    kube = FakeKube({NODE: "uid-1"})
    plugin = build_dra_plugin(
        make_manager(), "template", enabled=True, node_name=NODE, kube=kube,
        plugins_dir=socket_dir / "plugins", registry_dir=socket_dir / "registry",
        state_dir=socket_dir / "state", cdi_dir=socket_dir / "cdi",
    )  # fmt: skip
    assert plugin is not None and plugin.driver_name == DRIVER
    async with trio.open_nursery() as nursery:
        await plugin.start(nursery)
        await wait_until(lambda: len(kube.by_driver(DRIVER)) == 1)

        kube.slices.clear()  # kubelet wipes the node's slices when it starts...
        await kubelet.notify(plugin.registration_socket, registered=True)  # ...then registers us
        await wait_until(lambda: len(kube.by_driver(DRIVER)) == 1)
        await plugin.stop()
    # Slices are left for kubelet to wipe (or for a quick restart to adopt).
    assert len(kube.by_driver(DRIVER)) == 1


def test_dra_off_unless_enabled() -> None:
    plugin = build_dra_plugin(
        make_manager(), "template", enabled=False, node_name=NODE, kube=FakeKube({})
    )
    assert plugin is None


@pytest.mark.parametrize(("node", "with_kube"), [("", True), (NODE, False), ("", False)])
def test_enabled_without_cluster_access_warns_and_stays_off(
    caplog: pytest.LogCaptureFixture, node: str, with_kube: bool
) -> None:
    with caplog.at_level(logging.WARNING):
        plugin = build_dra_plugin(
            make_manager(), "template", enabled=True, node_name=node,
            kube=FakeKube({}) if with_kube else None,
        )  # fmt: skip
    assert plugin is None
    assert "DRA stays off" in caplog.text


def test_enabled_with_cluster_access_builds_plugin_and_publisher() -> None:
    plugin = build_dra_plugin(
        make_manager(), "topology-aware", enabled=True, node_name=NODE, kube=FakeKube({})
    )
    assert plugin is not None
    assert plugin.driver_name == "topology-aware.nri.io"
    assert plugin.dra_socket == Path("/var/lib/kubelet/plugins/topology-aware.nri.io/dra.sock")
    assert plugin.registration_socket == Path(
        "/var/lib/kubelet/plugins_registry/topology-aware.nri.io-reg.sock"
    )
    assert isinstance(plugin.publisher, SlicePublisher)
    assert plugin.publisher.pool_name == NODE


def test_the_policy_announces_device_changes_to_the_publisher() -> None:
    """A policy whose devices follow what containers hold (balloons) asks for a sync."""
    manager = make_manager()
    plugin = build_dra_plugin(manager, "balloons", enabled=True, node_name=NODE, kube=FakeKube({}))
    assert plugin is not None and plugin.publisher is not None
    assert manager.policy.devices_changed == plugin.publisher.trigger
