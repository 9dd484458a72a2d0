"""The whole DRA chain, real peers only: kube-scheduler -> our slice -> kubelet -> NRI cpuset.

- kube-apiserver + etcd and kube-scheduler, no feature gates, at v1.35.4 and v1.37.2 (the
  session's two API servers; or the version a nox session names: ``tests/kube/versions.py``);
- our daemon as a process: topology-aware on a synthetic n4c16 machine (2 sockets x 2 NUMA
  nodes x 4 CPUs, CPU 0 reserved), DRA enabled, publishing one device per CPU;
- kubelet's own DRA manager (``kubelet-dra-peer``, of the same version) preparing the pod's
  claims, which it reads from the apiserver, through our registered plugin;
- the Go NRI runtime harness (NRI v0.12) playing containerd: the claim's container is created
  with the env the claim's CDI spec injects, as containerd applies CDI edits before NRI.

A claim for 4 CPUs on one NUMA node cannot be served by node 0 (CPU 0 is reserved, 3 left),
so the scheduler must take node 1 (CPUs 4-7): the constraint, not first fit, decides.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.dra.kubeletplugin.publisher import resource_slices
from nri_resmgr.kube import AlreadyExists, KubeClient, NotFound
from nri_resmgr.kube.resources import (
    CUSTOM_RESOURCE_DEFINITIONS,
    NODES,
    PODS,
    RESOURCE_CLAIMS,
    TOPOLOGY_AWARE_POLICIES,
)
from nri_resmgr.sim.synthetic import N4C16, write_sysfs
from tests.conformance import objects
from tests.conformance.build import HARNESS_V012, BuildError, ensure_binary
from tests.conformance.peer import Harness, open_harness
from tests.conformance.test_nri_conformance import cpus
from tests.dra import chain
from tests.dra.kubelet_peer import kubelet_peer, peer_binary
from tests.dra.scheduler import Scheduler, start_scheduler
from tests.kube.apiserver import ApiServer, session_apiserver
from tests.kube.versions import kube_versions
from tests.peers import missing_peer
from tools.crdschema import crd

pytestmark = pytest.mark.integration

DRIVER = "topology-aware.nri.io"
NUMA = f"{DRIVER}/numaNode"
SLICES = resource_slices("v1")
CLAIMED = 4  # CPUs the claim asks for: only NUMA nodes 1-3 have that many free
JSON = dict[str, Any]


@pytest.fixture(scope="module", params=kube_versions())
def version(request: pytest.FixtureRequest) -> str:
    """The Kubernetes version of the whole chain (API server, scheduler, kubelet)."""
    wanted: str = request.param
    return wanted


@pytest.fixture(scope="module")
def ta_crd(request: pytest.FixtureRequest, version: str) -> Iterator[ApiServer]:
    """The session's API server of ``version`` with the TopologyAwarePolicy CRD generated
    from the config models, established; removed again afterwards if this module created it,
    since the apiserver is the session's and other tests install a looser CRD of the same name
    (``tests/kube``)."""
    apiserver = session_apiserver(request, version)
    document = crd("TopologyAwarePolicy")
    name = document["metadata"]["name"]

    async def apply() -> bool:
        async with KubeClient(apiserver.config()) as client:
            created = True
            try:
                await client.create(CUSTOM_RESOURCE_DEFINITIONS, document)
            except AlreadyExists:
                created = False
            with trio.fail_after(60):
                while not await _established(client, name):
                    await trio.sleep(0.1)
            return created

    async def remove() -> None:
        async with KubeClient(apiserver.config()) as client:
            await client.delete(CUSTOM_RESOURCE_DEFINITIONS, name)
            with trio.fail_after(60):
                while True:
                    try:
                        await client.get(CUSTOM_RESOURCE_DEFINITIONS, name)
                    except NotFound:
                        return
                    await trio.sleep(0.1)

    created = trio.run(apply)
    yield apiserver
    if created:
        trio.run(remove)


async def _established(client: KubeClient, name: str) -> bool:
    got = await client.get(CUSTOM_RESOURCE_DEFINITIONS, name)
    conditions = (got.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


@pytest.fixture(scope="module")
def scheduler(
    ta_crd: ApiServer, version: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scheduler]:
    log = tmp_path_factory.mktemp(f"scheduler-{version}") / "scheduler.log"
    running = start_scheduler(ta_crd, log, version)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def harness_binary() -> Path:
    try:
        return ensure_binary(HARNESS_V012)
    except BuildError as exc:
        missing_peer(f"the Go NRI harness cannot be built here: {exc}")


@pytest.fixture(scope="module")
def kubelet_binary(version: str) -> Path:
    return peer_binary(version)


@pytest.fixture
def workdir() -> Iterator[Path]:
    # Unix socket paths must stay short; pytest's tmp_path may be too long.
    root = Path(tempfile.mkdtemp(prefix="chain-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@attrs.define
class Node:
    """One simulated node: its Kubernetes objects, its runtime (harness), its kubelet and our
    daemon, each restartable."""

    server: ApiServer
    client: KubeClient
    ns: str
    name: str
    dir: Path
    harness: Harness
    kubelet_binary: Path
    host_root: Path
    daemon: trio.Process | None = None

    @property
    def cdi_dir(self) -> Path:
        return self.dir / "cdi"

    @property
    def state_dir(self) -> Path:
        return self.dir / "state"

    @property
    def daemon_log(self) -> Path:
        return self.dir / "daemon.log"

    def kubelet_args(self) -> dict[str, Any]:
        return {"kubeconfig": self.server.kubeconfig, "node": self.name,
                "registry": self.dir / "registry", "state": self.dir / "kubelet-state",
                "log": self.dir / "kubelet.log"}  # fmt: skip

    async def start_daemon(self) -> None:
        d = self.dir
        argv = [sys.executable, "-m", "nri_resmgr", "--policy", "topology-aware",
                "--kubeconfig", str(self.server.kubeconfig), "--config-namespace", self.ns,
                "--nri-socket", str(self.harness.socket), "--host-root", str(self.host_root),
                "--kubelet-plugins-dir", str(d / "plugins"),
                "--kubelet-registry-dir", str(d / "registry"),
                "--cdi-dir", str(self.cdi_dir), "--dra-state-dir", str(self.state_dir),
                "--log-level", "debug"]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | {"NODE_NAME": self.name}
        with self.daemon_log.open("ab") as log:
            self.daemon = await trio.lowlevel.open_process(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env
            )

    async def stop_daemon(self) -> None:
        proc, self.daemon = self.daemon, None
        if proc is None:
            return
        if proc.returncode is None:
            proc.terminate()
            with trio.move_on_after(15):
                await proc.wait()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()

    def log_tail(self, lines: int = 60) -> str:
        text = self.daemon_log.read_text(errors="replace") if self.daemon_log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    async def slices(self) -> list[JSON]:
        found = await self.client.list(
            SLICES, field_selector=f"spec.nodeName={self.name},spec.driver={DRIVER}"
        )
        return list(found.items)

    async def published(self, not_named: str = "", limit: float = 30.0) -> JSON:
        """Our slice with devices (other than one named ``not_named``), once it is there."""
        with trio.fail_after(limit):
            while True:
                for s in await self.slices():
                    if s["metadata"]["name"] != not_named and s["spec"].get("devices"):
                        return s
                await trio.sleep(0.05)


def policy_cr() -> JSON:
    spec = {"reservedResources": {"cpu": "cpuset:0"}, "dra": {"enabled": True}}
    return {"apiVersion": "config.nri/v1alpha1", "kind": "TopologyAwarePolicy",
            "metadata": {"name": "default"}, "spec": spec}  # fmt: skip


@pytest.fixture
async def node(
    ta_crd: ApiServer, scheduler: Scheduler, harness_binary: Path, kubelet_binary: Path,
    workdir: Path,
) -> AsyncIterator[Node]:  # fmt: skip
    async with KubeClient(ta_crd.config()) as client:
        suffix = uuid.uuid4().hex[:6]
        ns, name = f"chain-{suffix}", f"chain-node-{suffix}"
        await chain.scaffold(client, ns, name, DRIVER)
        await client.create(TOPOLOGY_AWARE_POLICIES, policy_cr(), ns)
        (workdir / "registry").mkdir()
        host_root = write_sysfs(workdir / "host", N4C16)
        async with open_harness(harness_binary, workdir) as harness:
            n = Node(ta_crd, client, ns, name, workdir, harness, kubelet_binary, host_root)
            try:
                yield n
            finally:
                with trio.CancelScope(shield=True):
                    await n.stop_daemon()
                # pytest shows a failed test's output: the daemon's side of the story.
                print(f"daemon log tail:\n{n.log_tail()}")
        await client.delete(NODES, name)


def nri_pod(pod: JSON) -> JSON:
    """The NRI PodSandbox of an API pod (the uid is what ties the claim's reservedFor to it)."""
    meta = pod["metadata"]
    return {"id": f"{meta['name']}-sandbox", "name": meta["name"], "uid": meta["uid"],
            "namespace": meta["namespace"], "labels": {}, "annotations": {},
            "linux": {"cgroup_parent": f"/kubepods/pod{meta['uid']}"}}  # fmt: skip


def claim_env(cdi_dir: Path, cdi_ids: list[str]) -> list[str]:
    """The env edits containerd would apply for ``cdi_ids``, read from the specs on disk."""
    env: list[str] = []
    for spec_file in sorted(cdi_dir.glob("*.json")):
        spec = json.loads(spec_file.read_text())
        for device in spec["devices"]:
            if f"{spec['kind']}={device['name']}" in cdi_ids:
                env += device["containerEdits"].get("env", [])
    return env


async def schedule(
    node: Node, scheduler: Scheduler, claim_name: str, pod_name: str
) -> tuple[JSON, JSON]:
    """Claim + pod created; returns (claim, pod) once the scheduler allocated and bound."""
    await node.client.create(
        RESOURCE_CLAIMS, chain.claim(claim_name, DRIVER, CLAIMED, NUMA), node.ns
    )
    await node.client.create(PODS, chain.pod(pod_name, claim_name, CLAIMED), node.ns)
    try:
        allocated = await chain.allocated(node.client, node.ns, claim_name)
        with trio.fail_after(30):
            while not (pod := await node.client.get(PODS, pod_name, node.ns))["spec"].get(
                "nodeName"
            ):
                await trio.sleep(0.02)
    except trio.TooSlowError:
        pytest.fail(f"not scheduled; scheduler log:\n{scheduler.tail()}")
    return allocated, pod


def allocated_cpus(claim: JSON) -> set[int]:
    results = claim["status"]["allocation"]["devices"]["results"]
    assert {r["driver"] for r in results} == {DRIVER}
    return {int(r["device"].removeprefix("cpu")) for r in results}


async def test_scheduler_to_cpuset_with_restarts(node: Node, scheduler: Scheduler) -> None:
    h = node.harness
    # A shared container already runs when the daemon starts; it may use any CPU but 0.
    sandbox = objects.pod(1)
    # 9 CPUs: no socket has that many free, so it runs in the root pool, on all of 1-15.
    shared = objects.container(sandbox, 1, state="CONTAINER_RUNNING", milli_cpu=9000)
    await h.sync_state([sandbox], [shared])
    async with kubelet_peer(node.kubelet_binary, **node.kubelet_args()) as kubelet:
        await node.start_daemon()
        await h.wait_plugin(timeout=60)
        await kubelet.wait_plugin(DRIVER, timeout=60)
        published = await node.published()
        names = [d["name"] for d in published["spec"]["devices"]]
        assert sorted(names) == sorted(f"cpu{c}" for c in range(1, 16))

        claim, pod = await schedule(node, scheduler, "four", "app")
        claimed = allocated_cpus(claim)
        assert len(claimed) == CLAIMED
        numa = {int(c) // 4 for c in claimed}
        assert len(numa) == 1 and numa != {0}, claimed  # one NUMA node, not node 0
        assert claim["status"]["reservedFor"][0]["uid"] == pod["metadata"]["uid"]

        # kubelet prepares: our plugin reads the claim from the apiserver, claims its CPUs.
        prepared = await kubelet.prepare(pod)
        # One CDI id per allocated device, all naming the claim's one CDI device, and the
        # request's device-metadata mount once.
        ids = prepared["cdi_devices"]["app"]
        uid = claim["metadata"]["uid"]
        cdi_id = f"{DRIVER}/cpu=claim-{uid}"
        assert sorted(ids) == sorted([cdi_id] * CLAIMED + [f"{DRIVER}/metadata={uid}_cpus"])
        env = claim_env(node.cdi_dir, [cdi_id])
        variable = "NRI_DRA_CPUS_" + uid.replace("-", "_")
        key_variable = "NRI_DRA_KEY_" + uid.replace("-", "_")
        assert env[0] == f"{variable}={CpuSet(claimed)}"
        assert re.fullmatch(f"{key_variable}=[0-9a-f]{{32}}", env[1]) and len(env) == 2
        # The shared container, on every CPU but 0 until now, is moved off the claimed ones.
        rest = await moved(h, shared["id"], lambda got: not got & claimed)
        assert rest == set(range(1, 16)) - claimed

        # containerd applies the CDI env before NRI: the container is pinned to the claim.
        app_sandbox = nri_pod(pod)
        await h.relay("run-pod", pod=app_sandbox)
        app = objects.container(app_sandbox, 0, milli_cpu=CLAIMED * 1000)
        app = app | {"name": "app", "env": [*env, "PATH=/bin"]}
        reply = await h.relay("create-container", pod=app_sandbox, container=app)
        assert cpus(reply["adjust"]["linux"]["resources"]["cpu"]["cpus"]) == claimed

        # A new shared container never lands on the claimed CPUs.
        other = objects.container(sandbox, 2, milli_cpu=500)
        reply = await h.relay("create-container", pod=sandbox, container=other)
        assert not cpus(reply["adjust"]["linux"]["resources"]["cpu"]["cpus"]) & claimed

        # Daemon restart between prepare and unprepare: the claim survives (state file), and
        # after the runtime re-synchronizes, a forged env is still not trusted while the
        # prepared one is.
        await node.stop_daemon()
        # kubelet must have seen it go, or the wait below would see the old registration;
        # the runtime prunes closed plugins lazily, so its sign is the new Synchronize.
        await kubelet.wait_plugin(DRIVER, present=False, timeout=30)
        await h.syncs()  # drains the ones seen so far
        running = {**app, "state": "CONTAINER_RUNNING"}
        await h.sync_state(
            [sandbox, app_sandbox], [{**shared, "state": "CONTAINER_RUNNING"}, running]
        )
        await node.start_daemon()
        with trio.fail_after(60):
            while not (synced := await h.syncs()):
                await trio.sleep(0.05)
        assert [(x["pods"], x["containers"], x.get("error")) for x in synced] == [(2, 2, None)]
        await kubelet.wait_plugin(DRIVER, timeout=60)
        app_again = {**app, "id": "app-again", "name": "app-again"}
        again = await h.relay("create-container", pod=app_sandbox, container=app_again)
        assert cpus(again["adjust"]["linux"]["resources"]["cpu"]["cpus"]) == claimed
        # The env can also come from a pod spec: a value other than the prepared cpuset, or
        # the right cpuset without the claim's key, is not the claim's and gets none of its
        # CPUs; nor does a pod of another namespace with all of the claim's env.
        forged = {**app, "id": "forged", "name": "forged", "env": [f"{variable}=1-3"]}
        reply = await h.relay("create-container", pod=app_sandbox, container=forged)
        assert not cpus(reply["adjust"]["linux"]["resources"]["cpu"]["cpus"]) & claimed
        guessed_env = [f"{variable}={CpuSet(claimed)}"]
        guessed = {**app, "id": "guessed", "name": "guessed", "env": guessed_env}
        reply = await h.relay("create-container", pod=app_sandbox, container=guessed)
        assert not cpus(reply["adjust"]["linux"]["resources"]["cpu"]["cpus"]) & claimed
        elsewhere = {**app_sandbox, "id": "thief-sandbox", "namespace": "attacker",
                     "uid": "thief-uid"}  # fmt: skip
        await h.relay("run-pod", pod=elsewhere)
        thief = {**app, "id": "thief", "name": "thief", "pod_sandbox_id": elsewhere["id"]}
        reply = await h.relay("create-container", pod=elsewhere, container=thief)
        assert not cpus(reply["adjust"]["linux"]["resources"]["cpu"]["cpus"]) & claimed
        # A runtime that reports CDI devices (containerd >= 2.3, NRI Container.CDI_devices)
        # decides: the claim's device listed binds the container, another device does not,
        # whatever the env says.
        listed = {**app, "id": "listed", "name": "listed", "env": guessed_env,
                  "CDI_devices": [{"name": cdi_id}]}  # fmt: skip
        reply = await h.relay("create-container", pod=app_sandbox, container=listed)
        assert cpus(reply["adjust"]["linux"]["resources"]["cpu"]["cpus"]) == claimed
        unlisted = {**app, "id": "unlisted", "name": "unlisted",
                    "CDI_devices": [{"name": "vendor.example.com/gpu=0"}]}  # fmt: skip
        reply = await h.relay("create-container", pod=app_sandbox, container=unlisted)
        assert not cpus(reply["adjust"]["linux"]["resources"]["cpu"]["cpus"]) & claimed
        newer = objects.container(sandbox, 3, milli_cpu=500)
        reply = await h.relay("create-container", pod=sandbox, container=newer)
        assert not cpus(reply["adjust"]["linux"]["resources"]["cpu"]["cpus"]) & claimed
        assert uid in (node.state_dir / "dra-claims.json").read_text()

        # kubelet restarts: it wipes the node's slices; ours is back, same devices.
        first = await node.published()
        await kubelet.aclose()
    async with kubelet_peer(node.kubelet_binary, **node.kubelet_args()) as kubelet:
        await kubelet.wait_plugin(DRIVER, timeout=60)
        back = await node.published(not_named=first["metadata"]["name"], limit=60)
        assert [d["name"] for d in back["spec"]["devices"]] == names

        # The pod's containers end, then kubelet unprepares (after both restarts): the CDI
        # spec goes, the CPUs return to shared use.
        ours = (app, app_again, forged, guessed, listed, unlisted)
        for sandbox_of, ctr in [(app_sandbox, c) for c in ours] + [(elsewhere, thief)]:
            await h.relay("stop-container", pod=sandbox_of, container=ctr)
            await h.relay("remove-container", pod=sandbox_of, container=ctr)
        await kubelet.unprepare(pod)
        assert claim_env(node.cdi_dir, [cdi_id]) == []
        assert uid not in (node.state_dir / "dra-claims.json").read_text()
        # The shared container grows back onto them.
        regrown = await moved(h, shared["id"], lambda got: bool(got & claimed))
        assert regrown == set(range(1, 16))
    await chain.release(node.client, node.ns, "app", "four")


async def moved(h: Harness, container_id: str, check: Callable[[set[int]], bool]) -> set[int]:
    """The CPUs an UpdateContainers call gave ``container_id``, once one passes ``check``."""
    with trio.fail_after(30):
        while True:
            for record in await h.updates(count=1, timeout=25):
                for update in record["updates"]:
                    if update.get("container_id") != container_id:
                        continue
                    got = cpus(update["linux"]["resources"]["cpu"]["cpus"])
                    if check(got):
                        return got
