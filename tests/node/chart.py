"""The topology-aware chart installed on the guest's cluster (``cluster.py``) as users
install it: the project's image, built with buildah from the Dockerfile
(``tests.runtime.image``), imported into the guest's containerd; the real helm
(``tests.helm.helmbuild``) run in the guest against the guest's API server.

The guest has no pod network (no CNI but ``loopback``, the networking rule of
docs/development.md, "The real node"), so the chart is installed with ``hostNetwork=true``:
the pod reaches the API server through the ``kubernetes`` Service (127.0.0.1:443) and
kubelet probes it on 127.0.0.1. DRA is on (``config.dra.enabled=true``): the kubelet plugin
registers with the guest's kubelet and publishes the node's CPUs as a ResourceSlice.
"""

from __future__ import annotations

import tarfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs

from tests.helm.helmbuild import ensure_helm
from tests.node.cluster import BIN, Cluster
from tests.node.guest import GuestError
from tests.runtime.image import IMAGE, ensure_image

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "nri-resmgr-topology-aware"
RELEASE = "nri-resmgr"
NAMESPACE = "kube-system"
DAEMONSET = "nri-resmgr-topology-aware"
SELECTOR = f"app.kubernetes.io/name={DAEMONSET}"
DRIVER = "topology-aware.nri.io"
API_TIMEOUT = "request did not complete within requested timeout"
CR_KIND = "topologyawarepolicies.config.nri"
# As users set them; no other value differs from the chart's defaults.
VALUES = ("hostNetwork=true", "config.dra.enabled=true", "image.pullPolicy=Never")


@attrs.frozen
class Release:
    """One of the project's charts installed as release ``name`` in ``NAMESPACE``."""

    policy: str
    name: str

    @property
    def chart(self) -> Path:
        return ROOT / "helm" / f"nri-resmgr-{self.policy}"

    @property
    def daemonset(self) -> str:
        return f"nri-resmgr-{self.policy}"

    @property
    def selector(self) -> str:
        return f"app.kubernetes.io/name={self.daemonset}"

    @property
    def driver(self) -> str:
        return f"{self.policy}.nri.io"


TOPOLOGY_AWARE = Release("topology-aware", RELEASE)
BALLOONS = Release("balloons", "nri-resmgr-balloons")


def chart_tarball(workdir: Path, chart: Path) -> Path:
    out = workdir / f"{chart.name}.tar"
    with tarfile.open(out, "w") as tar:
        tar.add(chart, chart.name)
    return out


def install_chart(
    cluster: Cluster,
    workdir: Path,
    release: Release = TOPOLOGY_AWARE,
    values: tuple[str, ...] = VALUES,
    values_file: str = "",
) -> None:
    """The image imported, the chart installed with ``values`` (``--set``) and, when given,
    the guest's ``values_file`` (``-f``)."""
    started = time.monotonic()
    archive = ensure_image()
    helm = ensure_helm()
    cluster.timings["image and helm (host)"] = time.monotonic() - started
    guest = cluster.guest
    started = time.monotonic()
    guest.run("/usr/local/bin/ctr", "-n", "k8s.io", "images", "import", "--platform",
              "linux/amd64", guest.shared(archive), timeout=900)  # fmt: skip
    cluster.timings["chart image import"] = time.monotonic() - started
    guest.copy_in(helm, f"{BIN}/helm", mode=0o755)
    guest.unpack(chart_tarball(workdir, release.chart), "/opt/charts")
    name, tag = IMAGE.rsplit(":", 1)
    started = time.monotonic()
    sets = [arg for value in (f"image.name={name}", f"image.tag={tag}", *values)
            for arg in ("--set", value)]  # fmt: skip
    files = ("-f", values_file) if values_file else ()
    command = (release.name, f"/opt/charts/{release.chart.name}", "--namespace", NAMESPACE,
               *files, *sets, "--timeout=10m")  # fmt: skip
    try:
        cluster.helm("install", *command)
    except GuestError as e:
        if API_TIMEOUT not in str(e):
            raise
        # The guest's API server, under TCG on a loaded host, timed out an apply (seen for
        # the ValidatingAdmissionPolicies at load 20): the same install once more, as a
        # user would, over the failed release.
        print(f"helm install: the API server timed out, installing again:\n{e}")
        cluster.timings["helm install retried after an API timeout"] = time.monotonic() - started
        cluster.helm("upgrade", "--install", *command)
    cluster.timings["helm install"] = time.monotonic() - started


def daemonset_ready(cluster: Cluster, release: Release = TOPOLOGY_AWARE) -> bool:
    """Every scheduled pod of the template updated and Ready (its probes passed)."""
    ds = cluster.try_get("daemonset", release.daemonset, namespace=NAMESPACE)
    if ds is None:
        return False
    status = ds.get("status", {})
    want = status.get("desiredNumberScheduled", 0)
    return bool(
        want
        and status.get("observedGeneration") == ds["metadata"]["generation"]
        and status.get("updatedNumberScheduled") == want
        and status.get("numberReady") == want
    )


def explain(cluster: Cluster, release: Release = TOPOLOGY_AWARE) -> str:
    """The DaemonSet's pods, their events and the daemon's log, for a failure's message."""
    pods = cluster.describe("pods", "-n", NAMESPACE, "-l", release.selector)
    log = cluster.kubectl("logs", "-n", NAMESPACE, "-l", release.selector, "--tail=40",
                          check=False)  # fmt: skip
    return f"{pods}\n--- the daemon's log\n{log}"


def probe_report(cluster: Cluster, pod: dict[str, Any]) -> dict[str, Any]:
    """The daemon pod's start as the API server recorded it: restarts, the seconds from its
    container's start to the pod's Ready condition, and the probe failures kubelet reported
    (``Unhealthy`` events, by probe)."""
    status = pod["status"]["containerStatuses"][0]
    started = _time(status["state"]["running"]["startedAt"])
    (ready,) = [c for c in pod["status"]["conditions"] if c["type"] == "Ready"]
    events = cluster.get("events", namespace=NAMESPACE)["items"]
    failures: dict[str, int] = {}
    for event in events:
        if (event["involvedObject"].get("name") == pod["metadata"]["name"]
                and event.get("reason") == "Unhealthy"):  # fmt: skip
            probe = event.get("message", "").split(" probe", 1)[0]  # "Startup probe failed: …"
            failures[probe] = failures.get(probe, 0) + int(event.get("count") or 1)
    return {
        "restartCount": status["restartCount"],
        "container start to Ready (s)": (_time(ready["lastTransitionTime"]) - started),
        "probe failures": failures,
    }


def _time(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
