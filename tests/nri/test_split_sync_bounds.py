"""A split Synchronize is bounded: past the caps it is refused and what was held is dropped."""

from __future__ import annotations

import pytest

from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.nri import handlers
from nri_resmgr.nri.errors import Code, RpcError
from nri_resmgr.nri.handlers import PluginHandlers
from tests.nri.helpers import PinningPolicy, container, make_manager, pod


def chunk(first: int, count: int, more: bool) -> bytes:
    containers = [container(i) for i in range(first, first + count)]
    return bytes(api.SynchronizeRequest(pods=[pod(first)], containers=containers, more=more))


@pytest.mark.parametrize("limit", ["MAX_SPLIT_SYNC_OBJECTS", "MAX_SPLIT_SYNC_BYTES"])
def test_a_split_sync_past_its_cap_is_refused_and_forgotten(
    monkeypatch: pytest.MonkeyPatch, limit: str
) -> None:
    # Caps small enough for a test: 2 chunks fit, the 3rd does not.
    size = len(chunk(10, 4, more=True))  # the larger of the two that must fit
    monkeypatch.setattr(handlers, limit, 10 if limit.endswith("OBJECTS") else 2 * size + 10)
    policy = PinningPolicy()
    plugin = PluginHandlers(make_manager(policy), lambda updates: None)
    for n in range(2):
        assert plugin.synchronize(chunk(10 * n, 4, more=True)) == bytes(
            api.SynchronizeResponse(more=True)
        )
    with pytest.raises(RpcError, match="split Synchronize too large") as caught:
        plugin.synchronize(chunk(20, 4, more=True))
    assert caught.value.code == Code.RESOURCE_EXHAUSTED
    assert policy.synced == []
    # A new sync starts from nothing: the refused chunks are not held any more.
    plugin.synchronize(chunk(100, 2, more=False))
    assert policy.synced == [(1, 2)]
