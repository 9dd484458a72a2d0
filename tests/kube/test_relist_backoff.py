"""After a 410 the watch backs off before relisting, against a real kube-apiserver.

The server answers every watch with a real 410 (tests/kube/expired.py). Before the fix the
relist came at once and the successful list reset the backoff, so one watch made about a
thousand LISTs and WATCHes in three seconds; now each relist waits for a backoff that keeps
growing until a watch delivers an event.
"""

from __future__ import annotations

import attrs
import pytest
import trio

from nri_resmgr.backoff import Backoff
from nri_resmgr.kube import EventType
from nri_resmgr.kube.resources import CONFIG_MAPS
from tests.kube.apiserver import ApiServer
from tests.kube.expired import expiring_client

pytestmark = pytest.mark.integration


@attrs.define
class RecordingBackoff(Backoff):
    """A backoff that records every delay it is asked to wait."""

    delays: list[float] = attrs.field(factory=list)

    async def sleep(self) -> float:
        delay = await super().sleep()
        self.delays.append(delay)
        return delay


async def test_relists_after_gone_wait_for_a_growing_backoff(apiserver: ApiServer) -> None:
    # A restart starts the watch cache at the current version, so "1" is surely expired.
    await apiserver.crash_apiserver()
    await apiserver.restart_apiserver()
    backoff = RecordingBackoff(initial=0.01, maximum=10.0, jitter=0.0)
    client, counted = expiring_client(apiserver.config())
    resets = 0
    watch = client.watch(CONFIG_MAPS, "default", backoff=backoff, watch_list=False)
    async with client, watch:
        with trio.fail_after(60):
            async for event in watch:
                assert event.type is EventType.RESET  # every watch is answered with 410
                resets += 1
                if resets == 6:
                    break
    # One wait before each of the five relists after the first list, each twice the last:
    # the successful lists in between did not reset it.
    assert backoff.delays == pytest.approx([0.01, 0.02, 0.04, 0.08, 0.16])
    assert (counted.lists, counted.watches) == (6, 5)
