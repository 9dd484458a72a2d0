"""The image built from the Dockerfile, run inside the real containerd the way the chart's
pod runs it, registers and places containers as the host-run daemon does.

As in helm/common/templates/daemonset.yaml: host ``/sys`` read-only at ``/host/sys`` (and
``/proc`` at ``/host/proc``), the NRI socket directory read-only at ``/var/run/nri``,
``--host-root /host``, not privileged, every capability dropped, no privilege escalation and
a read-only root filesystem. The configuration comes from a mounted file instead of the
cluster (there is no apiserver here).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runtime.build import PeerUnavailable
from tests.runtime.conftest import TOPOLOGY_AWARE, unavailable
from tests.runtime.containerd import Containerd, wait_for
from tests.runtime.cri import BESTEFFORT, BURSTABLE_250M, Container, Cri, placement
from tests.runtime.daemon import PLUGIN, registered_pids, registrations
from tests.runtime.image import IMAGE, ensure_image


@pytest.fixture(scope="module")
def image(containerd: Containerd) -> str:
    try:
        archive = ensure_image()
        containerd.import_image(archive)
    except (PeerUnavailable, RuntimeError) as exc:
        unavailable(f"the image could not be built or imported: {exc}")
    return IMAGE


def _status(pid: int, field: str) -> str:
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(rf"^{field}:\s*(\S+)", text, re.M)
    assert match, field
    return match.group(1)


@pytest.fixture
def agent(containerd: Containerd, cri: Cri, image: str, tmp_path: Path) -> Iterator[Container]:
    """The daemon's pod, as the chart describes it, registered with containerd."""
    confdir = tmp_path / "conf"
    confdir.mkdir()
    (confdir / "config.yaml").write_text(TOPOLOGY_AWARE % "0")
    nri_dir = str(Path(containerd.nri_socket).parent)
    mounts = [
        {"container_path": "/host/sys", "host_path": "/sys", "readonly": True},
        {"container_path": "/host/proc", "host_path": "/proc", "readonly": True},
        {"container_path": "/var/run/nri", "host_path": nri_dir, "readonly": True},
        {"container_path": "/etc/nri-resmgr", "host_path": str(confdir), "readonly": True},
    ]
    security = {
        "privileged": False,
        "readonly_rootfs": True,
        "no_new_privs": True,
        "capabilities": {"drop_capabilities": ["ALL"]},
        "namespace_options": {"network": 2},
    }
    pod_id, pod_config = cri.pod("nri-resmgr", BURSTABLE_250M.qos, namespace="kube-system")
    before = registrations(containerd)
    extra = {
        "image": {"image": image},
        "args": ["--config-file", "/etc/nri-resmgr/config.yaml", "--host-root", "/host",
                 "--nri-socket", "/var/run/nri/nri.sock", "--log-level", "info"],
        "mounts": mounts,
        "linux": {"resources": BURSTABLE_250M.linux(), "security_context": security},
    }  # fmt: skip
    agent = cri.container(pod_id, pod_config, "nri-resmgr", BURSTABLE_250M, extra, command=None)

    def registered() -> bool:
        state = json.loads(containerd.crictl("inspect", agent.id))["status"]["state"]
        if state != "CONTAINER_RUNNING":
            logs = containerd.crictl("logs", agent.id)
            raise AssertionError(f"the agent container is {state}:\n{logs}")
        return registrations(containerd) > before

    wait_for("the containerized daemon to register", registered)
    yield agent
    cri.remove_pod(pod_id)


def test_the_image_has_no_pip_and_runs_without_capabilities_on_a_read_only_root(
    containerd: Containerd, agent: Container
) -> None:
    assert _status(agent.pid, "CapEff") == "0000000000000000"
    assert _status(agent.pid, "CapBnd") == "0000000000000000"
    assert _status(agent.pid, "NoNewPrivs") == "1"
    probe = "import importlib.util as u; print(u.find_spec('pip'), u.find_spec('setuptools'))"
    assert containerd.crictl("exec", agent.id, "python", "-c", probe).split() == ["None", "None"]
    assert containerd.crictl("exec", agent.id, "python3", "-c", probe).split() == ["None", "None"]
    denied = containerd.crictl("exec", agent.id, "sh", "-c", "touch /x 2>&1 || true")
    assert "Read-only file system" in denied


def test_the_image_registers_and_places_like_the_host_run_daemon(
    containerd: Containerd, cri: Cri, agent: Container
) -> None:
    assert agent.pid in registered_pids(containerd), f"{PLUGIN} registered from the container"
    system = cri.run("kube-proxy", BESTEFFORT, namespace="kube-system")
    besteffort = cri.run("be", BESTEFFORT)
    burstable = cri.run("bu", BURSTABLE_250M)
    ks, be, bu = placement(system), placement(besteffort), placement(burstable)
    assert (ks.cpus, ks.allowed, ks.mems) == ("0", "0", "0")
    assert (be.cpus, be.allowed) == ("1", "1")
    assert (bu.cpus, bu.allowed, bu.shares) == ("1", "1", 256)
    # The agent's own pod is kube-system: synchronized onto the reserved CPU.
    wait_for("the agent itself on reserved", lambda: placement(agent).cpus == "0")
