"""Requests answered in the ttrpc reader's task (no handler task) while the manager lock is
free, and on the task path, in arrival order, while someone else holds it; the same reply
either way."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import betterproto
import trio
import trio.testing

from nri_resmgr._gen import ttrpc as envelope
from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.instrumentation import RequestObserver
from nri_resmgr.nri.handlers import PLUGIN_SERVICE, PluginHandlers
from nri_resmgr.nri.ttrpc import TtrpcServer
from nri_resmgr.nri.ttrpc_codec import MSG_REQUEST, Message, encode_message
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.model import Adjustment, Container, Pod, Update
from nri_resmgr.resmgr.policy import PolicyEnv
from nri_resmgr.sim.runtime import Simulator
from tests.nri.helpers import (
    PinningPolicy,
    RawPeer,
    container,
    make_manager,
    mux_pair,
    pod,
    running_service,
)
from tests.policies.workload import topology_spec
from tests.sysfs.fakesys import N4C16, write_sysfs

GUARD = 10  # a hang guard only
T = TypeVar("T")


class TaskRecordingPolicy(PinningPolicy):
    """Records, per created container, the trio task the policy was called in."""

    def __init__(self) -> None:
        super().__init__()
        self.created: list[tuple[str, trio.lowlevel.Task]] = []

    def create_container(self, pod: Pod, container: Container) -> tuple[Adjustment, list[Update]]:
        self.created.append((container.id, trio.lowlevel.current_task()))
        return super().create_container(pod, container)


async def test_events_are_answered_in_the_reader_task_when_the_lock_is_free(
    sock_path: str,
) -> None:
    policy = TaskRecordingPolicy()
    manager = make_manager(policy)
    with trio.fail_after(GUARD):
        async with Simulator.listen(sock_path) as sim, running_service(manager, sock_path):
            await sim.wait_plugin()
            await sim.run_pod_sandbox(pod())
            replies = [await sim.create_container(pod(), container(i)) for i in range(3)]
    assert [r.adjust.linux.resources.cpu.cpus for r in replies] == ["0-1"] * 3
    tasks = {task for _, task in policy.created}
    assert len(tasks) == 1, "one task, the reader's, answered every create"
    [reader] = tasks
    assert "Mux.run" in reader.name


async def test_with_the_lock_held_events_wait_on_the_task_path_and_keep_their_order(
    sock_path: str,
) -> None:
    policy = TaskRecordingPolicy()
    manager = make_manager(policy)
    with trio.fail_after(GUARD):
        async with Simulator.listen(sock_path) as sim, running_service(manager, sock_path):
            await sim.wait_plugin()
            await sim.run_pod_sandbox(pod())
            # The lock held as a DRA claim preparation holds it.
            async with trio.open_nursery() as nursery, manager.lock:
                for i in range(3):
                    nursery.start_soon(sim.create_container, pod(), container(i))
                    await trio.testing.wait_all_tasks_blocked()
                assert policy.created == [], "nothing decided while the lock is held"
            # After the lock: a free lock again, so the next one is answered inline.
            await sim.create_container(pod(), container(3))
    assert [cid for cid, _ in policy.created] == ["ctr0", "ctr1", "ctr2", "ctr3"]
    handler_tasks = [task for _, task in policy.created[:3]]
    assert len(set(handler_tasks)) == 3, "each waiting create got its own handler task"
    assert all("_handle" in task.name for task in handler_tasks)
    assert "Mux.run" in policy.created[3][1].name
    assert set(policy.containers) == {f"ctr{i}" for i in range(4)}


def _every_plugin_request() -> list[tuple[str, bytes]]:
    """Every method of the Plugin service, in an order a runtime could send them, and one
    request that does not decode."""
    pod0, pod1 = _pod(0), _pod(1)
    created = api.Container(
        id="c1", pod_sandbox_id=pod1.id, name="app", state=api.ContainerState.CONTAINER_CREATED
    )
    running = api.Container(
        id="c0", pod_sandbox_id=pod0.id, name="db", state=api.ContainerState.CONTAINER_RUNNING
    )
    cpu = api.LinuxResources(cpu=api.LinuxCpu(shares=api.OptionalUInt64(2048)))
    requests: list[tuple[str, betterproto.Message]] = [
        ("Configure", api.ConfigureRequest(runtime_name="sim", nri_version="v0.12.2")),
        ("Synchronize", api.SynchronizeRequest(pods=[pod0], containers=[running])),
        ("RunPodSandbox", api.RunPodSandboxRequest(pod=pod1)),
        ("UpdatePodSandbox", api.UpdatePodSandboxRequest(pod=pod1)),
        ("PostUpdatePodSandbox", api.PostUpdatePodSandboxRequest(pod=pod1)),
        ("CreateContainer", api.CreateContainerRequest(pod=pod1, container=created)),
        ("PostCreateContainer", api.PostCreateContainerRequest(pod=pod1, container=created)),
        ("StartContainer", api.StartContainerRequest(pod=pod1, container=created)),
        ("PostStartContainer", api.PostStartContainerRequest(pod=pod1, container=created)),
        (
            "UpdateContainer",
            api.UpdateContainerRequest(pod=pod1, container=created, linux_resources=cpu),
        ),
        ("PostUpdateContainer", api.PostUpdateContainerRequest(pod=pod1, container=created)),
        ("ValidateContainerAdjustment", api.ValidateContainerAdjustmentRequest(pod=pod1)),
        ("StopContainer", api.StopContainerRequest(pod=pod1, container=created)),
        ("RemoveContainer", api.RemoveContainerRequest(pod=pod1, container=created)),
        ("StopPodSandbox", api.StopPodSandboxRequest(pod=pod1)),
        ("RemovePodSandbox", api.RemovePodSandboxRequest(pod=pod1)),
        (
            "StateChange",
            api.StateChangeEvent(event=api.Event.REMOVE_CONTAINER, pod=pod0, container=running),
        ),
        ("Shutdown", api.Empty()),
    ]
    return [(m, bytes(r)) for m, r in requests] + [("CreateContainer", b"\x0a\xff")]


def _pod(n: int) -> api.PodSandbox:
    return api.PodSandbox(id=f"pod{n}", name=f"pod-{n}", namespace="default", uid=f"uid-{n}")


async def _replies(root: Path, *, lock_held: bool) -> tuple[list[bytes], set[str]]:
    """The reply bytes to ``_every_plugin_request`` from a fresh topology-aware manager, and
    the names of the tasks its manager bodies ran in."""
    manager = ResourceManager(TopologyAwarePolicy(), topology_spec(), PolicyEnv(str(root)))
    tasks: set[str] = set()
    for name in ("synchronize", "run_pod_sandbox", "create_container", "remove_container"):
        setattr(manager, name, _in_task(getattr(manager, name), tasks))
    handlers = PluginHandlers(manager, lambda updates: None)
    replies: list[bytes] = []
    with trio.fail_after(GUARD):
        async with mux_pair() as muxes, trio.open_nursery() as nursery:
            server = TtrpcServer(
                muxes.theirs.channel(1), handlers.service(), RequestObserver("nri")
            )
            nursery.start_soon(server.serve)
            runtime = RawPeer(muxes.ours.channel(1))
            for n, (method, payload) in enumerate(_every_plugin_request()):
                request = envelope.Request(service=PLUGIN_SERVICE, method=method, payload=payload)
                message = encode_message(Message(2 * n + 1, MSG_REQUEST, bytes(request)))
                if lock_held:
                    async with manager.lock:
                        await runtime.send_all(message)
                        await trio.testing.wait_all_tasks_blocked()
                else:
                    await runtime.send_all(message)
                reply = await runtime.message()
                assert reply.stream_id == 2 * n + 1
                replies.append(reply.data)
            nursery.cancel_scope.cancel()
    return replies, tasks


def _in_task(body: Callable[..., T], tasks: set[str]) -> Callable[..., T]:
    def recorded(*args: Any) -> T:
        tasks.add(trio.lowlevel.current_task().name)
        return body(*args)

    return recorded


async def test_a_request_gets_the_same_reply_in_place_and_on_the_task_path(
    tmp_path: Path,
) -> None:
    """The one body of each Plugin method answers alike wherever the server runs it: byte
    for byte, errors included, with the manager's state carried from request to request."""
    write_sysfs(tmp_path, N4C16)
    in_place, in_place_tasks = await _replies(tmp_path, lock_held=False)
    on_tasks, task_tasks = await _replies(tmp_path, lock_held=True)
    assert [envelope.Response().parse(r).status.code for r in in_place].count(0) == len(
        in_place
    ) - 1, "all answered but the undecodable one"
    assert on_tasks == in_place
    assert all("read_until_it_ends" in name for name in in_place_tasks), "the mux reader's"
    assert all("_handle" in name for name in task_tasks), task_tasks
