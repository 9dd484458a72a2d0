"""DRA on when the policy asks (issue 38 item 3), as the daemon assembles itself and takes
new configurations: ``dra.enabled`` unset / true / false x the policy asks for devices or
not, for topology-aware (``dra.cpuDeviceMode: grouped``) and balloons
(``balloonTypes[].dra.publish``). Asserts whether the kubelet plugin is built, the log lines
(each once), and which reconfigurations a running daemon refuses, keeping its configuration."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from nri_resmgr.agent.filewatch import ConfigFileWatcher
from nri_resmgr.app import build_services, make_manager
from nri_resmgr.cli import Options
from nri_resmgr.config import PolicyDocument, load_document, notapplied
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.daemon import Service
from nri_resmgr.dra.kubeletplugin import KubeletPlugin
from nri_resmgr.errors import ConfigError
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.manager import ResourceManager
from tests.dra.conftest import NODE
from tests.dra.fake_kube import FakeKube
from tests.sysfs.fakesys import N4C16, write_sysfs

KIND = {"topology-aware": "TopologyAwarePolicy", "balloons": "BalloonsPolicy"}
KEY = {"topology-aware": "spec.dra.cpuDeviceMode", "balloons": "spec.balloonTypes[0].dra.publish"}
POLICIES = tuple(KIND)
ENABLED = (None, True, False)
GROUPED = CpuSet.parse("8-15")


@pytest.fixture(autouse=True)
def fresh_notes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the once-per-process "not applied" lines as a new process would."""
    monkeypatch.setattr(notapplied, "_reported", set())


def body(policy: str, enabled: bool | None, asks: bool) -> dict[str, Any]:
    """A spec asking for devices or not; the non-asking one still sets device-mode keys to
    values that do not ask (``individual``, a balloon type without ``publish``)."""
    dra: dict[str, Any] = {} if enabled is None else {"enabled": enabled}
    spec: dict[str, Any] = {"reservedResources": {"cpu": "1"}}
    if policy == "topology-aware":
        mode = {"cpuDeviceMode": "grouped", "groupedCPUs": "8-15"} if asks else {}
        dra |= mode or {"cpuDeviceMode": "individual"}
    else:
        spec["balloonTypes"] = [{"name": "claimed", "maxCPUs": 4, "dra": {"publish": asks}}]
    return {**spec, **({"dra": dra} if dra else {})}


def document(policy: str, enabled: bool | None, asks: bool, **extra: Any) -> PolicyDocument:
    return load_document(
        {
            "apiVersion": "config.nri/v1alpha1",
            "kind": KIND[policy],
            "metadata": {"name": "default"},
            "spec": body(policy, enabled, asks) | extra,
        }
    )


def options(root: Path, policy: str, config_file: Path | None = None) -> Options:
    if not (root / "sys").exists():
        write_sysfs(root, N4C16)
    return Options(
        policy=policy, node_name=NODE, host_root=str(root),
        config_file=None if config_file is None else str(config_file),
        kubelet_plugins_dir=str(root / "plugins"), kubelet_registry_dir=str(root / "registry"),
        cdi_dir=str(root / "cdi"), dra_state_dir=str(root / "state"),
    )  # fmt: skip


def assemble(
    root: Path, doc: PolicyDocument, config_file: Path | None = None
) -> tuple[ResourceManager, list[Service]]:
    """The daemon's own start-up path (``app.make_manager``, ``app.build_services``)."""
    opts = options(root, doc.policy_name, config_file)
    manager = make_manager(opts, doc)
    kube = None if config_file is not None else FakeKube({NODE: "uid-1"})
    return manager, build_services(opts, manager, doc, kube=kube)  # type: ignore[arg-type]


def plugin_built(services: list[Service]) -> bool:
    return any(isinstance(s, KubeletPlugin) for s in services)


def grouped_cpus(manager: ResourceManager) -> CpuSet | None:
    """topology-aware: the CPUs set apart for grouped claims; None for balloons."""
    policy = manager.policy
    return policy.claims.grouped if isinstance(policy, TopologyAwarePolicy) else None


def said(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(text in r.getMessage() for r in caplog.records)


DISABLED = "DRA support is disabled"
NOT_APPLIED = ": accepted, not applied: spec.dra.enabled is false"


def by_policy(key: str) -> str:
    return f"DRA support is enabled: {key} asks for devices and dra.enabled is unset"


# -- at load -----------------------------------------------------------------------------

CELLS = list(itertools.product(POLICIES, ENABLED, (True, False)))


@pytest.mark.parametrize(("policy", "enabled", "asks"), CELLS)
def test_load_matrix(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, policy: str, enabled: bool | None, asks: bool
) -> None:
    on = enabled if enabled is not None else asks
    with caplog.at_level(logging.INFO):
        manager, services = assemble(tmp_path, document(policy, enabled, asks))
    key = KEY[policy]
    assert plugin_built(services) is on
    assert said(caplog, DISABLED) == (0 if on else 1)
    assert said(caplog, by_policy(key)) == (1 if on and enabled is None else 0)
    assert said(caplog, key + NOT_APPLIED) == (1 if asks and enabled is False else 0)
    assert said(caplog, "DRA stays off") == 0
    if policy == "topology-aware":  # grouped mode applied exactly when DRA is on
        assert grouped_cpus(manager) == (GROUPED if asks and on else CpuSet())


@pytest.mark.parametrize(("policy", "enabled", "asks"), CELLS)
def test_load_matrix_without_cluster_access(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, policy: str, enabled: bool | None, asks: bool
) -> None:
    """From a local file: DRA stays off; where the configuration turns it on, one warning
    naming what did (the policy key when ``dra.enabled`` is unset)."""
    doc = document(policy, enabled, asks)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "config.nri/v1alpha1", "kind": doc.kind,
                                    "spec": body(policy, enabled, asks)}))  # fmt: skip
    with caplog.at_level(logging.INFO):
        manager, services = assemble(tmp_path, doc, config_file=path)
    on = enabled if enabled is not None else asks
    assert not plugin_built(services)
    cause = "dra.enabled is true" if enabled else f"{KEY[policy]} asks for devices"
    warned = [r for r in caplog.records if "DRA stays off" in r.getMessage()]
    assert [r.levelno for r in warned] == ([logging.WARNING] if on else [])
    assert all(r.getMessage().startswith(cause) for r in warned)
    assert said(caplog, DISABLED) == (0 if on else 1)
    if policy == "topology-aware":  # set apart as on a node with DRA (docs/dra.md)
        assert grouped_cpus(manager) == (GROUPED if asks and on else CpuSet())


# -- at runtime --------------------------------------------------------------------------

RESTART = "restart nri-resmgr to apply this change"


async def reconfigure(manager: ResourceManager, doc: PolicyDocument) -> str | None:
    """The refusal's text, or None when applied; a refusal leaves the spec in force."""
    before = manager.spec
    try:
        await manager.reconfigure(doc.spec)
    except ConfigError as e:
        assert manager.spec is before
        return str(e)
    assert manager.spec is doc.spec
    return None


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("asks", [True, False])
async def test_unset_adding_or_removing_the_asking_key_is_refused(
    tmp_path: Path, policy: str, asks: bool
) -> None:
    manager, _ = assemble(tmp_path, document(policy, None, asks))
    refusal = await reconfigure(manager, document(policy, None, not asks))
    verb = "disable" if asks else "enable"
    assert refusal is not None and refusal.startswith(f"{KEY[policy]}: cannot {verb} DRA")
    assert refusal.endswith(RESTART)
    # Still serving its configuration: a change that keeps the effective value applies.
    assert await reconfigure(manager, document(policy, None, asks, availableResources={})) is None


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("asks", [True, False])
async def test_explicit_false_accepts_the_keys_and_says_them_not_applied_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, policy: str, asks: bool
) -> None:
    with caplog.at_level(logging.WARNING):
        manager, _ = assemble(tmp_path, document(policy, False, asks))
        at_load = said(caplog, KEY[policy] + NOT_APPLIED)
        assert await reconfigure(manager, document(policy, False, not asks)) is None
        assert await reconfigure(manager, document(policy, False, True)) is None
    # Said at load when the first configuration asked, else at the first one that did.
    assert (at_load, said(caplog, KEY[policy] + NOT_APPLIED)) == (1 if asks else 0, 1)
    assert grouped_cpus(manager) in (None, CpuSet())


async def test_explicit_true_lets_balloon_types_opt_in_and_out(tmp_path: Path) -> None:
    manager, _ = assemble(tmp_path, document("balloons", True, False))
    assert await reconfigure(manager, document("balloons", True, True)) is None
    assert await reconfigure(manager, document("balloons", True, False)) is None


async def test_explicit_true_grouped_mode_still_needs_a_restart(tmp_path: Path) -> None:
    """topology-aware's own rule (grouped CPUs are set apart once), not the switch's."""
    manager, _ = assemble(tmp_path, document("topology-aware", True, True))
    refusal = await reconfigure(manager, document("topology-aware", True, False))
    assert refusal is not None and refusal.startswith("spec.dra: cpuDeviceMode")


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(
    ("old", "new", "refusal"),
    [
        # dra.enabled written or removed while the policy asks
        (None, True, None),
        (True, None, None),
        (None, False, "spec.dra.enabled: cannot disable DRA"),
        (False, None, "spec.dra.enabled: cannot enable DRA"),
        (True, False, "spec.dra.enabled: cannot disable DRA"),
        (False, True, "spec.dra.enabled: cannot enable DRA"),
    ],
)
async def test_toggling_enabled_while_the_policy_asks(
    tmp_path: Path, policy: str, old: bool | None, new: bool | None, refusal: str | None
) -> None:
    manager, _ = assemble(tmp_path, document(policy, old, True))
    said_now = await reconfigure(manager, document(policy, new, True))
    if refusal is None:
        assert said_now is None
    else:
        assert said_now is not None and said_now.startswith(refusal)
        assert said_now.endswith(RESTART)


async def test_the_file_watcher_keeps_the_last_good_configuration(tmp_path: Path) -> None:
    """A local file adding ``dra.publish`` while ``dra.enabled`` is unset: refused, the old
    configuration stays, and a later good edit applies."""
    path = tmp_path / "config.yaml"

    def write(asks: bool, **extra: Any) -> PolicyDocument:
        spec = body("balloons", None, asks) | extra
        path.write_text(yaml.safe_dump({"apiVersion": "config.nri/v1alpha1",
                                        "kind": "BalloonsPolicy", "spec": spec}))  # fmt: skip
        return document("balloons", None, asks, **extra)

    doc = write(False)
    manager, services = assemble(tmp_path, doc, config_file=path)
    [watcher] = [s for s in services if isinstance(s, ConfigFileWatcher)]
    before = manager.spec
    write(True)
    await watcher.check()
    assert manager.spec is before and watcher.rejected == 1
    assert watcher.last_error is not None
    assert watcher.last_error.startswith("spec.balloonTypes[0].dra.publish: cannot enable DRA")
    assert watcher.last_error.endswith(RESTART)
    write(False, availableResources={"cpu": "cpuset:0-7"})
    await watcher.check()
    assert watcher.applied == 1
    edited = document("balloons", None, False, availableResources={"cpu": "cpuset:0-7"})
    assert manager.spec == edited.spec
