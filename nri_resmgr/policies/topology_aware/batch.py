"""Placing many running containers at once (restore's re-allocations on a Synchronize).

``place_all`` gives every container the grant ``Engine.grant`` would give it, taken in the
same order, so the result is the sequential one (``tests/policies`` compares the two over
random workloads). What it saves is per-container work that cannot change the decision of a
plain shared container: one Allocation built instead of two (``_place`` builds a base and
evolves it with ``attrs.evolve``, which alone costs more than the rest of the build) and the
calls around them; the decision itself is ``Supply.choose``, on the state the previous grants
left, exactly as ``grant`` makes it. Anything else (exclusive or mixed CPUs, reserved,
topology hints, affinities, a pool that is full) goes through ``Engine.grant`` itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from nri_resmgr.policies.allocations import Allocation, Kind
from nri_resmgr.policies.topology_aware.engine import Engine
from nri_resmgr.policies.topology_aware.hint_sources import container_hints
from nri_resmgr.policies.topology_aware.live import Live
from nri_resmgr.policies.topology_aware.memory import memory_want

__all__ = ["place_all"]


def place_all(engine: Engine, lives: Sequence[Live], grant: Callable[[Live], None]) -> None:
    """Grant each of ``lives`` in order; ``grant`` is the one-by-one path (it may raise)."""
    for live in lives:
        if not _place_plain(engine, live):
            grant(live)


def _place_plain(engine: Engine, live: Live) -> bool:
    """``Engine.grant(..., hint=None)`` for a shared container without topology hints or
    affinities that fits a pool; False (nothing done) for any other container."""
    want, pod, container = live.want, live.pod, live.container
    if want.kind is not Kind.SHARED or want.exclusive:
        return False
    if container_hints(pod, container, engine.system) is not None:
        return False
    if engine.affinity_weights(container.id, pod, container) is not None:
        return False
    memory = memory_want(pod, container, engine.memory.available, engine.memory.total, live.req)
    candidate = engine.supply.choose(want, None, None, memory, None)
    if candidate is None:
        return False  # over-committed: the one-by-one path warns and picks the roomiest
    # (grant's check_required_isolation passes here: it fails only wanting exclusive CPUs.)
    a = Allocation(
        container.id,
        pod.id,
        live.name,
        engine.pools[candidate.pool].name,
        want.kind,
        want.request,
        isolated=candidate.isolated,
        keep_mems=live.keep_mems,
        pod=pod,
        container=container,
    )
    engine.store_placed(a, memory)
    return True
