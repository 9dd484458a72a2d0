"""What real containerd answers to UpdateContainers, and the retry that follows.

An in-process plugin (the manager, a test policy that wants a given cpuset per container)
on the session's containerd. containerd skips an id it does not know and reports success,
so such an update is never retried. An update it cannot apply (a CPU the machine lacks)
comes back as an error status: the adaptation drops the ``failed`` list when it also returns
an error, so the whole call counts as failed; it is retried, and once the container is gone
containerd answers success again and the retry ends.
"""

from __future__ import annotations

import trio

from nri_resmgr.backoff import Backoff
from nri_resmgr.resmgr.model import Adjustment, Update
from nri_resmgr.resmgr.retry import UpdateRetry
from tests.dra.conftest import wait_until
from tests.nri.helpers import WantingPolicy, make_manager, running_service
from tests.runtime.containerd import Containerd
from tests.runtime.cri import BESTEFFORT, Cri

LIMIT = 60.0


async def test_containerd_skips_unknown_ids_and_a_failing_update_is_retried_until_it_is_gone(
    containerd: Containerd, cri: Cri
) -> None:
    policy = WantingPolicy()
    manager = make_manager(policy)
    manager.retry = UpdateRetry(
        backoff=lambda: Backoff(initial=0.05, maximum=0.5), give_up_after=1000
    )
    async with running_service(manager, containerd.nri_socket) as service:
        await wait_until(lambda: service.connections == 1 and bool(policy.synced), LIMIT)

        policy.wanted["no-such-container"] = "0"
        gone = Update("no-such-container", Adjustment(cpuset_cpus="0"))
        assert await manager.send_updates([gone]) == []  # skipped, reported applied
        assert manager.retry.pending() == []

        victim = await trio.to_thread.run_sync(cri.run, "victim", BESTEFFORT)
        policy.wanted[victim.id] = "1023"  # no such CPU: runc cannot apply it
        bad = Update(victim.id, Adjustment(cpuset_cpus="1023"))
        assert [u.container_id for u in await manager.send_updates([bad])] == [victim.id]
        await wait_until(lambda: len(policy.failed) >= 3, LIMIT)  # retried, failing
        assert manager.retry.pending() == [victim.id]

        # Removed behind the policy's back (it still wants the cpuset): containerd no
        # longer knows the id, answers success, and the retry ends.
        await trio.to_thread.run_sync(cri.remove_pod, victim.pod_id)
        await wait_until(lambda: not manager.retry.pending(), LIMIT)
    assert f"container {victim.id} failed" in containerd.log_text()
