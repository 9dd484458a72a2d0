"""--config-file mode: edits are applied live; bad edits are refused and the old config stays."""

from __future__ import annotations

from pathlib import Path

import trio

from nri_resmgr.agent.filewatch import ConfigFileWatcher
from nri_resmgr.config import load_file
from nri_resmgr.policies.template import TemplatePolicy
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.policy import PolicyEnv

HEADER = "apiVersion: config.nri/v1alpha1\nkind: TemplatePolicy\nspec:\n"


def write(path: Path, body: str) -> None:
    path.write_text(HEADER + body)


def setup(tmp_path: Path) -> tuple[Path, ResourceManager, ConfigFileWatcher]:
    path = tmp_path / "config.yaml"
    write(path, "  reservedResources: {cpu: 750m}\n")
    doc = load_file(path)
    manager = ResourceManager(TemplatePolicy(), doc.spec, PolicyEnv())
    return path, manager, ConfigFileWatcher(manager, path, doc, interval=0.01)


async def test_an_edit_is_applied(tmp_path: Path) -> None:
    path, manager, watcher = setup(tmp_path)
    write(path, "  reservedResources: {cpu: '2'}\n")
    await watcher.check()
    assert manager.spec.reserved_resources.cpu.text == "2"
    assert watcher.applied == 1


async def test_an_unchanged_file_is_not_reapplied(tmp_path: Path) -> None:
    path, _manager, watcher = setup(tmp_path)
    path.touch()
    await watcher.check()
    assert watcher.applied == 0


async def test_a_bad_edit_is_rejected_and_the_old_config_stays(tmp_path: Path) -> None:
    path, manager, watcher = setup(tmp_path)
    before = manager.spec
    write(path, "  reservedResources: {cpu: 750m}\n  dra: {enabled: yes}\n")
    await watcher.check()
    assert manager.spec is before
    assert watcher.rejected == 1
    assert watcher.last_error == "spec.dra.enabled: expected a boolean, got 'yes'"
    # Fixing the file applies it.
    write(path, "  reservedResources: {cpu: 500m}\n")
    await watcher.check()
    assert manager.spec.reserved_resources.cpu.text == "500m"


async def test_turning_dra_on_in_the_file_asks_for_a_restart(tmp_path: Path) -> None:
    path, manager, watcher = setup(tmp_path)
    write(path, "  reservedResources: {cpu: 750m}\n  dra: {enabled: true}\n")
    await watcher.check()
    assert manager.spec.dra.enabled is None
    assert watcher.last_error is not None and "restart nri-resmgr" in watcher.last_error


async def test_changing_the_kind_is_refused(tmp_path: Path) -> None:
    path, _manager, watcher = setup(tmp_path)
    path.write_text(
        HEADER.replace("TemplatePolicy", "BalloonsPolicy") + "  reservedResources: {cpu: 1}\n"
    )
    await watcher.check()
    assert watcher.last_error is not None and "restart nri-resmgr" in watcher.last_error


async def test_the_service_polls_until_stopped(tmp_path: Path) -> None:
    path, manager, watcher = setup(tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(watcher.serve)
        write(path, "  reservedResources: {cpu: '3'}\n")
        with trio.fail_after(5):
            while manager.spec.reserved_resources.cpu.text != "3":
                await trio.sleep(0.01)
        await watcher.stop()
    assert watcher.applied == 1


async def test_a_reload_nested_3000_deep_is_rejected_and_the_old_config_stays(
    tmp_path: Path,
) -> None:
    path, manager, watcher = setup(tmp_path)
    before = manager.spec
    write(path, "  reservedResources: {cpu: 750m}\n  x: " + "[" * 3000 + "]" * 3000 + "\n")
    await watcher.check()
    assert manager.spec is before
    assert watcher.rejected == 1
    assert watcher.last_error == (
        f"{path}: invalid YAML at line 5, column 67: nested deeper than 64 levels"
    )
    write(path, "  reservedResources: {cpu: 500m}\n")
    await watcher.check()
    assert manager.spec.reserved_resources.cpu.text == "500m"
