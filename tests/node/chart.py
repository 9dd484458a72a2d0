"""The topology-aware chart installed on the guest's cluster (``cluster.py``) as users
install it: the project's image, built with buildah from the Dockerfile
(``tests.runtime.image``), imported into the guest's containerd; the real helm
(``tests.helm.helmbuild``) run in the guest against the guest's API server.

One deviation, for the networking rule (docs/development.md, "The real node"): the guest has
no pod network (no CNI but ``loopback``), and the chart's pod is not a hostNetwork pod, so
its sandbox could not be made. Right after ``helm install`` the DaemonSet's pod template is
patched to ``hostNetwork: true``; the pod then reaches the API server through the
``kubernetes`` Service (127.0.0.1:443) and kubelet probes it on 127.0.0.1.
"""

from __future__ import annotations

import tarfile
import time
from pathlib import Path

from tests.helm.helmbuild import ensure_helm
from tests.node.cluster import BIN, Cluster
from tests.runtime.image import IMAGE, ensure_image

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "nri-resmgr-topology-aware"
RELEASE = "nri-resmgr"
NAMESPACE = "kube-system"
DAEMONSET = "nri-resmgr-topology-aware"
SELECTOR = f"app.kubernetes.io/name={DAEMONSET}"
HOST_NETWORK = '[{"op": "add", "path": "/spec/template/spec/hostNetwork", "value": true}]'


def chart_tarball(workdir: Path) -> Path:
    out = workdir / "chart.tar"
    with tarfile.open(out, "w") as tar:
        tar.add(CHART, CHART.name)
    return out


def install_chart(cluster: Cluster, workdir: Path) -> None:
    """The image imported, the chart installed, its DaemonSet patched to hostNetwork."""
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
    guest.unpack(chart_tarball(workdir), "/opt/charts")
    name, tag = IMAGE.rsplit(":", 1)
    started = time.monotonic()
    cluster.helm("install", RELEASE, f"/opt/charts/{CHART.name}", "--namespace", NAMESPACE,
                 "--set", f"image.name={name}", "--set", f"image.tag={tag}",
                 "--set", "image.pullPolicy=Never", "--timeout=10m")  # fmt: skip
    cluster.kubectl("-n", NAMESPACE, "patch", "daemonset", DAEMONSET, "--type=json",
                    "-p", HOST_NETWORK)  # fmt: skip
    cluster.timings["helm install"] = time.monotonic() - started


def daemonset_ready(cluster: Cluster) -> bool:
    """Every scheduled pod of the patched template updated and Ready (its probes passed)."""
    ds = cluster.try_get("daemonset", DAEMONSET, namespace=NAMESPACE)
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


def explain(cluster: Cluster) -> str:
    """The DaemonSet's pods, their events and the daemon's log, for a failure's message."""
    pods = cluster.describe("pods", "-n", NAMESPACE, "-l", SELECTOR)
    log = cluster.kubectl("logs", "-n", NAMESPACE, "-l", SELECTOR, "--tail=40", check=False)
    return f"{pods}\n--- the daemon's log\n{log}"
