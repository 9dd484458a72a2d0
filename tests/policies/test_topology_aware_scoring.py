"""Issue 14: topology-aware pool choice and grant rules, table by table, each derived from the
nri-plugins rule named beside it (cmd/plugins/topology-aware/policy/ unless noted).

N4C16 with the default 750m reservation: CPU 0 reserved; pools root 0-15, socket #0 0-7
(NUMA node #0 0-3, #1 4-7), socket #1 8-15 (#2 8-11, #3 12-15); threads are core pairs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.allocations import Kind
from nri_resmgr.policies.annotations import lookup_bool, parse_bool
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.policies.topology_aware.affinity import (
    AffinityError,
    container_affinities,
    pool_score,
)
from nri_resmgr.policies.topology_aware.preferences import Want
from nri_resmgr.policies.topology_aware.scoring import (
    Ask,
    PoolScore,
    best,
    compare,
    find_existing_level,
)
from nri_resmgr.resmgr.model import Container, Pod
from tests.policies.workload import (
    Runtime,
    besteffort,
    burstable,
    container,
    guaranteed,
    pod,
    start,
    topology_spec,
)
from tests.sysfs.fakesys import N4C16, ONE_SOCKET_4CPU, Layout

P = "resource-policy.nri.io"
NODE = {"0": "1-3", "1": "4-7", "2": "8-11", "3": "12-15"}


def policy(tmp_path: Path, layout: Layout = N4C16, **spec: Any) -> TopologyAwarePolicy:
    p = TopologyAwarePolicy()
    start(p, tmp_path, layout, topology_spec(**spec))
    return p


def annotated(
    name: str,
    qos: str,
    annotations: Mapping[str, str],
    containers: tuple[tuple[str, int, int | None], ...],
    namespace: str = "default",
) -> list[tuple[Pod, Container]]:
    p = pod(name, qos, namespace, annotations)
    return [(p, container(p, c, req, lim)) for c, req, lim in containers]


def pool_of(p: TopologyAwarePolicy, c: Container) -> str:
    a = p.engine.allocation(c.id)
    assert a is not None
    return a.pool


# -- ordering: compareScores, criterion by criterion ------------------------------------------


def score(pool: int, **kw: Any) -> PoolScore:
    base: dict[str, Any] = {
        "upstream_id": pool,
        "depth": 2,
        "level": "numa",
        "isolated": 0,
        "shared": 1000,
        "free": 2000,
        "colocated": 0,
    }
    return PoolScore(pool=pool, **{**base, **kw})


@pytest.mark.parametrize(
    ("rule", "ask", "a", "b"),
    [
        # "insufficient isolated capacity loses" comes before everything else, even depth.
        (
            "isolated first",
            Ask(full=1, isolate=True),
            score(0, isolated=0, depth=0),
            score(1, isolated=-1),
        ),
        # "if we have affinity, the higher affinity score wins" before depth and capacity.
        ("affinity", Ask(), score(0, affinity=1.0, depth=0), score(1, shared=9000)),
        # "sufficient capacity for the limit wins" (limited Burstable) before depth.
        (
            "limit",
            Ask(burstable=True, limit=3000),
            score(0, free=3000, depth=1),
            score(1, free=2999),
        ),
        # unlimited Burstable: "a pool at configured topology level" wins outright.
        (
            "level",
            Ask(burstable=True, level="package"),
            score(0, level="package", depth=1),
            score(1),
        ),
        ("level tie: more free", Ask(burstable=True, level="numa"), score(1, free=3000), score(0)),
        (
            "below the level beats above",
            Ask(burstable=True, level="die"),
            score(1, level="numa"),
            score(0, level="package"),
        ),
        ("a lower node wins", Ask(), score(1, depth=3, shared=0), score(0)),
        (
            "more isolated capacity",
            Ask(full=1, isolate=True),
            score(1, isolated=2),
            score(0, isolated=1),
        ),
        ("exclusive: more sliceable", Ask(full=1), score(1, shared=2000, colocated=5), score(0)),
        # Issue item 5: shared-only, "fewer colocated containers win" before capacity.
        (
            "shared: fewer colocated",
            Ask(),
            score(1, colocated=0, shared=100),
            score(0, colocated=1, shared=9000),
        ),
        ("shared: then more capacity", Ask(), score(1, shared=2000), score(0)),
        ("lower id", Ask(), score(0), score(1)),
    ],
)
def test_compare_scores_order(rule: str, ask: Ask, a: PoolScore, b: PoolScore) -> None:
    assert compare(ask, a, b) < 0, rule
    assert compare(ask, b, a) > 0, rule
    assert best(ask, [b, a]) == a


@pytest.mark.parametrize(
    ("levels", "wanted", "found"),
    [
        (["numa", "numa", "package", "numa", "numa", "package", "system"], "numa", "numa"),
        (["numa", "numa", "package", "numa", "numa", "package", "system"], "die", "package"),
        (["numa", "numa", "package", "numa", "numa", "package", "system"], "l3cache", "numa"),
        (["numa", "numa", "package", "numa", "numa", "package", "system"], "system", "system"),
        (["package"], "system", "package"),  # nothing at or above: package
        (["package"], "numa", "package"),
    ],
)
def test_find_existing_topology_level(levels: list[str], wanted: str, found: str) -> None:
    # topology-aware-policy.go findExistingTopologyLevel, over pools children first.
    assert find_existing_level(levels, wanted) == found


def test_upstream_ids_number_children_before_parents(tmp_path: Path) -> None:
    e = policy(tmp_path).engine
    order = sorted(e.supply.upstream_id, key=e.supply.upstream_id.__getitem__)
    assert [e.pools[i].name for i in order] == [
        "NUMA node #0",
        "NUMA node #1",
        "socket #0",
        "NUMA node #2",
        "NUMA node #3",
        "socket #1",
        "root",
    ]


# -- item 5: shared-only requests, fewer colocated containers first ---------------------------


def test_shared_requests_go_to_the_pool_with_fewest_containers(tmp_path: Path) -> None:
    # Node #0 has 3 shared CPUs, the others 4. Three Burstables take nodes #1-#3 (equal
    # count: more capacity, then lower id); the fourth goes to the emptier node #0 although
    # the others still have more capacity (compareScores "fewer colocated containers win").
    p = policy(tmp_path)
    rt = Runtime(p)
    made = [rt.create(burstable(f"b{i}", 100, 100)) for i in range(4)]
    assert [rt.cpus[c.id] for c in made] == [NODE["1"], NODE["2"], NODE["3"], NODE["0"]]


# -- item 7: an exclusive grant is not shared load --------------------------------------------


def test_an_exclusive_grant_takes_no_shared_load(tmp_path: Path) -> None:
    p = policy(tmp_path)
    rt = Runtime(p)
    g = rt.create(guaranteed("g", 1000))
    a = p.engine.allocation(g.id)
    assert a is not None and a.kind is Kind.EXCLUSIVE and a.shared_part == 0
    assert p.engine.supply.pool_load(p.engine.supply.index[a.pool]).shared_mcpu == 0


def test_a_pool_with_an_exclusive_grant_still_takes_shared_containers(tmp_path: Path) -> None:
    # Socket {0-3}, node #0 {0,1}, node #1 {2,3}, CPU 0 reserved. The exclusive CPU comes from
    # node #1 (node #0 would go empty); a 900m Burstable then fits the one shared CPU left
    # in each node. Counting the exclusive 1000m as shared load (the old bug) sent the
    # second Burstable to the socket, over all memory nodes.
    p = policy(tmp_path, Layout(nodes_per_die=2, cores_per_node=2), reserved="cpuset:0")
    rt = Runtime(p)
    g = rt.create(guaranteed("g", 1000))
    b1 = rt.create(burstable("b1", 900, 900))
    b2 = rt.create(burstable("b2", 900, 900))
    assert pool_of(p, g) == "NUMA node #1"
    assert {pool_of(p, b1), pool_of(p, b2)} == {"NUMA node #0", "NUMA node #1"}
    assert {rt.mems[b1.id], rt.mems[b2.id]} == {"0", "1"}


# -- item 6: slicing keeps each child's shared allocation, 0-request counts 1 mCPU ------------


def test_slicing_leaves_a_busy_childs_shared_cpus_and_one_for_besteffort(tmp_path: Path) -> None:
    # resources.go SliceableCPUs / AllocatableSharedCPU: node #1 holds 2000m plus a
    # BestEffort (1 mCPU), so 3 of its 4 CPUs stay shared; socket #0 slices the idle node #0
    # whole (1-3) and one CPU of node #1.
    p = policy(tmp_path)
    e = p.engine
    bu = Want(Kind.SHARED, request=2000, limit=2000)
    e.grant("bu", "pbu", "bu", bu, hint="NUMA node #1")
    e.grant("be", "pbe", "be", Want(Kind.SHARED), hint="NUMA node #1")
    g = e.grant("g", "pg", "g", Want(Kind.EXCLUSIVE, 4, 4000), hint="socket #0")
    assert g.kind is Kind.EXCLUSIVE and g.pool == "socket #0"
    assert len(g.exclusive & CpuSet.parse("1-3")) == 3 and len(g.exclusive) == 4
    assert len(e.supply.shared_cpus(e.supply.index["NUMA node #1"])) == 3
    assert not e.supply.shared_cpus(e.supply.index["NUMA node #0"])


def test_without_zero_request_containers_the_same_slice_fits(tmp_path: Path) -> None:
    # The counterpart: without the BestEffort, node #1 keeps 2 CPUs and socket #0 slices 4.
    p = policy(tmp_path)
    e = p.engine
    e.grant("bu", "pbu", "bu", Want(Kind.SHARED, request=2000, limit=2000), hint="NUMA node #1")
    g = e.grant("g", "pg", "g", Want(Kind.EXCLUSIVE, 4, 4000), hint="socket #0")
    assert g.pool == "socket #0" and len(g.exclusive) == 4
    assert len(e.supply.shared_cpus(e.supply.index["NUMA node #1"])) == 2


def test_a_besteffort_counts_one_mcpu_of_shared_capacity(tmp_path: Path) -> None:
    p = policy(tmp_path, ONE_SOCKET_4CPU, reserved="cpuset:0")
    e = p.engine
    e.grant("b", "pb", "b", Want(Kind.SHARED, request=3000, limit=3000))
    assert e.supply.choose(Want(Kind.SHARED)) is not None, "a BestEffort may share a full pool"
    e.grant("be", "pbe", "be", Want(Kind.SHARED))
    assert e.supply.pool_load(0).shared_mcpu == 3001
    assert e.supply.choose(Want(Kind.SHARED, request=1, limit=1)) is None


# -- item 4: reserved requests beyond the reserved capacity -----------------------------------


def test_reserved_overflow_falls_back_to_normal_shared_cpus(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # resources.go supply.AllocateCPU: "falling back to using normal unreserved CPUs".
    p = policy(tmp_path)  # CPU 0 reserved: 1000m
    rt = Runtime(p)
    k1 = rt.create(burstable("k1", 800, 800, namespace="kube-system"))
    with caplog.at_level(logging.WARNING):
        k2 = rt.create(burstable("k2", 500, 500, namespace="kube-system"))
    k3 = rt.create(burstable("k3", 200, 200, namespace="kube-system"))
    kinds = [p.engine.allocation(c.id).kind for c in (k1, k2, k3)]  # type: ignore[union-attr]
    assert kinds == [Kind.RESERVED, Kind.SHARED, Kind.RESERVED]
    assert rt.cpus[k1.id] == rt.cpus[k3.id] == "0"
    # pools.go allocatePool puts reserved requests in the root; the fallback keeps that pool,
    # so the container gets the root's whole shared set, not one node's.
    assert p.engine.allocation(k2.id).pool == "root"  # type: ignore[union-attr]
    assert rt.cpus[k2.id] == "1-15"
    assert "needs 500 mCPU reserved, only 200 available" in caplog.text
    # Full reserved CPUs still take a container asking no CPU (upstream: "fraction > 0").
    be = rt.create(besteffort("kbe", namespace="kube-system"))
    assert p.engine.allocation(be.id).kind is Kind.RESERVED  # type: ignore[union-attr]


# -- item 9: limited Burstable prefers a pool covering its limit ------------------------------


@pytest.mark.parametrize(
    ("limit", "pool"),
    [(2000, "NUMA node #1"), (4000, "NUMA node #1"), (5000, "socket #1"), (9000, "root")],
)
def test_limited_burstable_prefers_a_pool_covering_its_limit(
    tmp_path: Path, limit: int, pool: str
) -> None:
    # compareScores "prefer pool with enough burstable capacity"; node #0 has 3 CPUs, the
    # other nodes 4, socket #0 7, socket #1 8, the root 15.
    p = policy(tmp_path)
    rt = Runtime(p)
    assert pool_of(p, rt.create(burstable("b", 100, limit))) == pool


# -- item 10: unlimited-burstable annotation ---------------------------------------------------


@pytest.mark.parametrize(
    ("value", "pool"),
    [
        (None, "socket #1"),  # the config's unlimitedBurstable: package
        ("numa", "NUMA node #1"),
        ("system", "root"),
        ("package", "socket #1"),
        ("die", "socket #1"),  # no die pools: the next existing level up
        ("l3cache", "NUMA node #1"),  # no L3 pools: NUMA nodes
        ("socket", "socket #1"),  # not a level: logged, the config's level
    ],
)
def test_unlimited_burstable_annotation(tmp_path: Path, value: str | None, pool: str) -> None:
    p = policy(tmp_path)
    rt = Runtime(p)
    ann = {} if value is None else {f"unlimited-burstable.{P}/container.c0": value}
    [pc] = annotated("u", "burstable", ann, (("c0", 100, None),))
    assert pool_of(p, rt.create(pc)) == pool


def test_unlimited_burstable_config_level_resolves_to_existing(tmp_path: Path) -> None:
    p = policy(tmp_path, unlimited_burstable="numa")
    rt = Runtime(p)
    assert pool_of(p, rt.create(burstable("u", 100))) == "NUMA node #1"


# -- items 2 and 3: affinities ---------------------------------------------------------------


def test_without_affinity_a_pods_containers_spread(tmp_path: Path) -> None:
    p = policy(tmp_path)
    rt = Runtime(p)
    made = [
        rt.create(pc)
        for pc in annotated("p", "guaranteed", {}, (("a", 1000, 1000), ("b", 1000, 1000)))
    ]
    assert pool_of(p, made[0]) != pool_of(p, made[1])


@pytest.mark.parametrize(
    "annotation",
    [
        "b: [a]",  # simple notation, symmetric
        "a: [b]",  # b gets the mirrored affinity on a
        "b:\n- match: {key: name, operator: Equals, values: [a]}\n  weight: 5",
    ],
)
def test_affinity_annotation_colocates(tmp_path: Path, annotation: str) -> None:
    # affinity.go calculatePoolAffinities: weight on the pool of each matching container.
    p = policy(tmp_path)
    rt = Runtime(p)
    ann = {f"{P}/affinity": annotation}
    a, b = (
        rt.create(pc)
        for pc in annotated("p", "guaranteed", ann, (("a", 1000, 1000), ("b", 1000, 1000)))
    )
    assert pool_of(p, a) == pool_of(p, b) == "NUMA node #1"


def test_anti_affinity_overrides_colocate_pods(tmp_path: Path) -> None:
    # An explicit affinity replaces the implicit colocate-pods one (registerImplicitAffinities:
    # "if hasExplicit return nil").
    p = policy(tmp_path, colocate_pods=True)
    rt = Runtime(p)
    ann = {f"{P}/anti-affinity": "b: [a]"}
    spec = (("a", 100, 100), ("b", 100, 100), ("c", 100, 100))
    a, b, c = (rt.create(pc) for pc in annotated("p", "burstable", ann, spec))
    assert pool_of(p, a) != pool_of(p, b)
    # c has no explicit affinity: the implicit one pulls it to both a and b, so to the
    # pool holding both (the root: affinityScore sums the subtree's weights, diluted).
    pools = p.engine.pools
    home = pools[p.engine.supply.index[pool_of(p, c)]].cpus
    assert all(pools[p.engine.supply.index[pool_of(p, x)]].cpus.issubset(home) for x in (a, b))
    assert pool_of(p, c) == "root"


def test_colocate_pods(tmp_path: Path) -> None:
    spec = (("a", 100, 100), ("b", 100, 100))
    for colocate, same in ((False, False), (True, True)):
        p = policy(tmp_path / str(colocate), colocate_pods=colocate)
        rt = Runtime(p)
        a, b = (rt.create(pc) for pc in annotated("p", "burstable", {}, spec))
        assert (pool_of(p, a) == pool_of(p, b)) is same


def test_colocate_namespaces(tmp_path: Path) -> None:
    for colocate, same in ((False, False), (True, True)):
        p = policy(tmp_path / str(colocate), colocate_namespaces=colocate)
        rt = Runtime(p)
        rt.create(burstable("other", 100, 100, namespace="other"))
        a = rt.create(burstable("a", 100, 100, namespace="team"))
        b = rt.create(burstable("b", 100, 100, namespace="team"))
        assert (pool_of(p, a) == pool_of(p, b)) is same


def test_full_notation_across_pods_with_weights(tmp_path: Path) -> None:
    p = policy(tmp_path)
    rt = Runtime(p)
    first = rt.create(burstable("first", 100, 100))  # NUMA node #1
    rt.create(burstable("second", 100, 100))  # NUMA node #2
    ann = {
        f"{P}/affinity": (
            "c0:\n- scope: {key: namespace, operator: Equals, values: [default]}\n"
            "  match: {key: pod/name, operator: In, values: [first, second]}\n  weight: 3\n"
            "- scope: {key: namespace, operator: Equals, values: [default]}\n"
            "  match: {key: pod/name, operator: Equals, values: [first]}\n  weight: 2"
        )
    }
    [pc] = annotated("third", "burstable", ann, (("c0", 100, 100),))
    assert pool_of(p, rt.create(pc)) == pool_of(p, first)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[a, b]", "expected a map of container names"),
        ("a: [{match: {key: name, operator: Near, values: [b]}}]", "unknown operator 'Near'"),
        ("a: [{match: {key: color, operator: Exists}}]", "unknown key 'color'"),
        ("a: [{match: {key: name, operator: Equals, values: [b, c]}}]", "takes exactly one value"),
        ("a: [{weight: 3}]", "with a match"),
        ("a: [b", "not YAML"),
    ],
)
def test_bad_affinity_annotation_names_the_problem(value: str, message: str) -> None:
    [(p, c)] = annotated("p", "burstable", {f"{P}/affinity": value}, (("a", 100, 100),))
    with pytest.raises(AffinityError, match=message):
        container_affinities(p, c)


def test_bad_affinity_is_logged_and_the_container_placed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    p = policy(tmp_path)
    rt = Runtime(p)
    [pc] = annotated("p", "burstable", {f"{P}/affinity": "[a]"}, (("a", 100, 100),))
    with caplog.at_level(logging.ERROR):
        c = rt.create(pc)
    assert rt.cpus[c.id] and "ignoring affinities" in caplog.text


def test_weights_clamp_and_anti_negates() -> None:
    ann = {
        f"{P}/affinity": "a: [{match: {key: name, operator: Equals, values: [b]}, weight: 5000}]",
        f"{P}/anti-affinity": "a: [{match: {key: name, operator: Equals, values: [c]}, weight: 7}]",
    }
    [(p, c)] = annotated("p", "burstable", ann, (("a", 100, 100),))
    assert [x.weight for x in container_affinities(p, c)] == [1000, -7]


def test_affinity_score_dilutes_by_distance() -> None:
    # pools.go affinityScore: Q = 0.75 per link, up the ancestors and down the subtree.
    weights = {0: 4, 1: 8, 2: 16}
    assert pool_score(weights, ancestors=[0], below=[(1, 0), (2, 1)]) == 0.75 * 4 + 8 + 0.75 * 16


# -- item 1: hide-hyperthreads ---------------------------------------------------------------


def test_hide_hyperthreads_exclusive_and_shared(tmp_path: Path) -> None:
    # pools.go setPreferredCpusetCpus: one thread per core of the grant.
    p = policy(tmp_path)
    rt = Runtime(p)
    hide = {f"hide-hyperthreads.{P}": "true"}
    g = rt.create(guaranteed("g", 2000, annotations=hide))
    a = p.engine.allocation(g.id)
    assert a is not None and a.exclusive == CpuSet.parse("4-5")
    assert rt.cpus[g.id] == "4"
    s = rt.create(besteffort("s", annotations=hide))
    shared = p.engine.supply.shared_cpus(p.engine.supply.index[pool_of(p, s)])
    cpus = CpuSet.parse(rt.cpus[s.id] or "")
    assert (
        cpus.issubset(shared)
        and cpus != shared
        and {cpu // 2 for cpu in cpus} == {cpu // 2 for cpu in shared}
    )
    plain = rt.create(besteffort("plain"))
    assert len(CpuSet.parse(rt.cpus[plain.id] or "")) == 4


# -- item 13: annotation booleans as Go strconv.ParseBool -------------------------------------


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        *((v, True) for v in ("1", "t", "T", "true", "TRUE", "True")),
        *((v, False) for v in ("0", "f", "F", "false", "FALSE", "False")),
        *((v, None) for v in ("yes", "no", "tRUE", " true", "", "2")),
    ],
)
def test_parse_bool_is_go_strconv(value: str, parsed: bool | None) -> None:
    assert parse_bool(value) is parsed


def test_a_refused_boolean_is_named_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    [(p, c)] = annotated(
        "p", "guaranteed", {f"prefer-shared-cpus.{P}": "yes"}, (("c", 1000, 1000),)
    )
    with caplog.at_level(logging.WARNING):
        assert lookup_bool(p, c, "prefer-shared-cpus") is None
    assert "prefer-shared-cpus.resource-policy.nri.io='yes': not a boolean" in caplog.text


def test_t_and_f_annotations_now_apply(tmp_path: Path) -> None:
    p = policy(tmp_path)
    rt = Runtime(p)
    g = rt.create(guaranteed("g", 1000, annotations={f"prefer-shared-cpus.{P}": "t"}))
    assert p.engine.allocation(g.id).kind is Kind.SHARED  # type: ignore[union-attr]


# -- item 13: reservedResources.cpu exclude-cpuset: -------------------------------------------


def test_reserved_exclude_cpuset(tmp_path: Path) -> None:
    # topology-aware checkConstraints: reserved = allowed minus the set.
    p = policy(tmp_path, reserved="exclude-cpuset:2-15")
    assert p.engine.reserved == CpuSet.parse("0-1")
    rt = Runtime(p)
    k = rt.create(besteffort("k", namespace="kube-system"))
    assert rt.cpus[k.id] == "0-1"


def test_a_reserved_overflow_keeps_its_shared_cpus_over_a_restart(tmp_path: Path) -> None:
    # Restore reads the runtime: a reserved-class container on normal CPUs had fallen back,
    # and stays on them (re-granting it before the others would pick NUMA node #1 here).
    # Socket {0-3}, node #0 {0,1}, node #1 {2,3}, CPU 0 reserved (1000m).
    layout = Layout(nodes_per_die=2, cores_per_node=1, threads=2)
    p = policy(tmp_path, layout)
    rt = Runtime(p)
    rt.create(burstable("b", 1000))  # unlimited: the socket
    k = rt.create(guaranteed("k", 1500, namespace="kube-system"))
    assert p.engine.allocation(k.id).kind is Kind.SHARED  # type: ignore[union-attr]
    before = dict(rt.cpus)
    fresh = policy(tmp_path / "again", layout)
    pods, containers = rt.reported()
    assert fresh.synchronize(pods, containers) == []
    assert fresh.engine.allocation(k.id).kind is Kind.SHARED  # type: ignore[union-attr]
    assert rt.cpus == before


def test_reconfigured_reserved_cpus_keep_reserved_containers_reserved(tmp_path: Path) -> None:
    # A new reserved set is not a fallback: the container follows the reserved CPUs.
    p = policy(tmp_path, reserved="cpuset:0")
    rt = Runtime(p)
    k = rt.create(besteffort("k", namespace="kube-system"))
    assert rt.cpus[k.id] == "0"
    rt.apply(p.reconfigure(topology_spec(reserved="cpuset:1")))
    assert p.engine.allocation(k.id).kind is Kind.RESERVED  # type: ignore[union-attr]
    assert rt.cpus[k.id] == "1"
