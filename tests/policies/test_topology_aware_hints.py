"""Topology hints (issue 14, upstream test18): each rule of ``topology_aware/hints.py``
table by table, from the nri-plugins code named beside it, then through the policy.

N4C16 with the default 750m reservation: CPU 0 reserved; pools root 0-15, socket #0 0-7
(NUMA node #0 0-3, #1 4-7), socket #1 8-15 (#2 8-11, #3 12-15); threads are core pairs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import attrs
import pytest

from nri_resmgr.config import notapplied
from nri_resmgr.cpus import Priority
from nri_resmgr.cpus.errors import PlacementError
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.policies.topology_aware.hint_sources import (
    PathList,
    container_hints,
    denied,
)
from nri_resmgr.policies.topology_aware.hints import (
    ContainerHints,
    Granted,
    Hint,
    HintTarget,
    combine,
    hint_targets,
    misaligned,
    misaligned_mems,
    pool_score,
    strict_failure,
    take_cpus,
)
from nri_resmgr.policies.topology_aware.pools import build_pools
from nri_resmgr.policies.topology_aware.scoring import Ask, PoolScore, compare
from nri_resmgr.resmgr.model import Container, DeviceNode, Pod
from nri_resmgr.resmgr.policy import PolicyEnv
from nri_resmgr.sysfs import System, discover
from tests.policies.workload import Runtime, container, pod, running, start, topology_spec
from tests.sysfs.fakesys import FOUR_NUMA_DIES, N4C16, Layout, write_sysfs

P = "resource-policy.nri.io"
TEST = f"test.topologyhints.{P}"
STRICT = f"strict.topologyhints.{P}"


@pytest.fixture(autouse=True)
def _test_apis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENABLE_TEST_APIS", "1")
    notapplied._reported.clear()


def system(tmp_path: Path, layout: Layout = N4C16) -> System:
    write_sysfs(tmp_path, layout)
    return discover(str(tmp_path))


def hints_of(annotations: Mapping[str, str], sys: System) -> ContainerHints | None:
    p = pod("p", "guaranteed", annotations=annotations)
    return container_hints(p, container(p, "c0", 1000, 1000), sys)


def cs(text: str) -> CpuSet:
    return CpuSet.parse(text)


# -- gathering: container.go generateTopologyHints ------------------------------------------


def test_a_numa_hint_is_resolved_to_its_nodes_cpus_and_a_trailing_brace_is_ignored(
    tmp_path: Path,
) -> None:
    # Upstream's own e2e value has one "}" too many; Go's yaml.Unmarshal reads one document.
    got = hints_of({TEST: '{ test: { NUMAs: "2" } } }'}, system(tmp_path))
    assert got == ContainerHints((Hint("", cpus=cs("8-11"), numas=cs("2")),))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # encoding/json matches field names case-insensitively.
        ("{a: {cpus: '4-5', provider: x}}", (Hint("x", cpus=cs("4-5")),)),
        ("{a: {Sockets: '1'}}", (Hint("", sockets=cs("1")),)),
        # MergeTopologyHints keys by provider and keeps the first.
        ("{a: {CPUs: '1', Provider: x}, b: {CPUs: '2', Provider: x}}", (Hint("x", cs("1")),)),
        # A CPU-less (or unknown) node resolves to no CPUs: the hint stays NUMA-only.
        ("{a: {NUMAs: '9'}}", (Hint("", numas=cs("9")),)),
    ],
)
def test_test_hint_values(tmp_path: Path, value: str, expected: tuple[Hint, ...]) -> None:
    got = hints_of({TEST: value}, system(tmp_path))
    assert got is not None and got.hints == expected


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("{a: {NUMAs: 2}}", "is not a string"),  # json.Unmarshal refuses a number
        ("{a: {CPUs: '3-1'}}", "invalid"),
        ("[1, 2]", "not a mapping"),
        ("{a: [", "invalid test.topologyhints"),
    ],
)
def test_a_bad_test_hint_is_an_error_naming_it_and_gives_no_hints(
    tmp_path: Path, value: str, problem: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        assert hints_of({TEST: value}, system(tmp_path)) is None
    assert problem in caplog.text and "default/p/c0" in caplog.text


def test_test_hints_need_enable_test_apis_and_say_so_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("ENABLE_TEST_APIS")
    sys = system(tmp_path)
    with caplog.at_level(logging.WARNING):
        assert hints_of({TEST: "{a: {CPUs: '1'}}"}, sys) is None
        assert hints_of({TEST: "{a: {CPUs: '2'}}"}, sys) is None
    said = [r for r in caplog.records if "accepted, not applied" in r.getMessage()]
    assert [r.getMessage().split(":")[0] for r in said] == [TEST]


@pytest.mark.parametrize(
    ("value", "has_hints"),
    [("false", False), ("none", False), ("mounts,none", False), ("true", True),
     ("devices", True), ("mounts,bogus", True)],
)  # fmt: skip
def test_topologyhints_false_or_none_turns_off_test_hints_too(
    tmp_path: Path, value: str, has_hints: bool
) -> None:
    anns = {f"topologyhints.{P}": value, TEST: "{a: {CPUs: '1'}}"}
    assert (hints_of(anns, system(tmp_path)) is not None) is has_hints


@pytest.mark.parametrize(
    ("path", "allow", "deny", "is_denied"),
    [
        ("/dev/x", None, None, False),
        ("/dev/x", None, PathList(False, ("/dev",)), True),
        ("/dev/x", PathList(False, ("/dev/x",)), PathList(False, ("/dev",)), False),
        ("/dev/x", PathList(False, ("/other",)), PathList(False, ("/dev",)), True),
        # filepath.Match: "*" does not cross "/", "[^...]" negates.
        ("/sys/a/b", None, PathList(True, ("/sys/*",)), False),
        ("/sys/a/b", None, PathList(True, ("/sys/*/b",)), True),
        ("/sys/a", None, PathList(True, ("/sys/[^a]",)), False),
        ("/sys/b", None, PathList(True, ("/sys/[^a]",)), True),
        # A malformed deny pattern ends the check: not denied.
        ("/dev/x", None, PathList(True, ("[", "/dev/x")), False),
    ],
)
def test_allow_and_deny_lists(
    path: str, allow: PathList | None, deny: PathList | None, is_denied: bool
) -> None:
    assert denied(path, allow, deny) is is_denied


def test_deny_and_allow_annotations_filter_test_hints_by_provider(tmp_path: Path) -> None:
    value = "{a: {CPUs: '1', Provider: /dev/a}, b: {CPUs: '2', Provider: /dev/b}}"
    anns = {TEST: value, f"deny.topologyhints.{P}": "{type: glob, paths: ['/dev/*']}",
            f"allow.topologyhints.{P}": "{paths: [/dev/b]}"}  # fmt: skip
    got = hints_of(anns, system(tmp_path))
    assert got is not None and [h.provider for h in got.hints] == ["/dev/b"]


# -- scoring: hint.go, node.go HintScore, pools.go combineHintScores ------------------------


def test_hint_scores_per_pool_kind_on_n4c16(tmp_path: Path) -> None:
    sys = system(tmp_path)
    pools = build_pools(sys)
    targets = hint_targets(sys, pools)
    names = [p.name for p in pools]

    def scores(h: Hint) -> dict[str, float]:
        return {n: round(pool_score(targets, i, h), 4) for i, n in enumerate(names)}

    zero = dict.fromkeys(names, 0.0)
    # A CPU hint: the share of the hint's CPUs the pool (upstream: its whole node) has.
    assert scores(Hint("", cpus=cs("10-13"))) == {
        **zero, "root": 1.0, "socket #1": 1.0, "NUMA node #2": 0.5, "NUMA node #3": 0.5
    }  # fmt: skip
    # A NUMA-only hint: a NUMA node matches, a socket overfits by 0.9, the root by 0.81.
    assert scores(Hint("", numas=cs("2"))) == {
        **zero, "root": 0.81, "socket #1": 0.9, "NUMA node #2": 1.0
    }  # fmt: skip
    # A socket hint: the socket matches, the root overfits, a NUMA node underfits by 1/2.
    assert scores(Hint("", sockets=cs("0"))) == {
        **zero, "root": 0.9, "socket #0": 1.0, "NUMA node #0": 0.5, "NUMA node #1": 0.5
    }  # fmt: skip


def test_die_pools_match_cpu_hints_by_package_and_numa_hints_by_their_nodes(
    tmp_path: Path,
) -> None:
    sys = system(tmp_path, FOUR_NUMA_DIES)
    pools = build_pools(sys)
    targets = hint_targets(sys, pools)
    die = next(i for i, p in enumerate(pools) if p.level == "die" and 0 in p.cpus)
    assert pool_score(targets, die, Hint("", numas=cs("0"))) == pytest.approx(0.9)
    assert pool_score(targets, die, Hint("", numas=cs("3"))) == 0.0
    # Upstream's die node scores CPU hints against its whole package.
    assert pool_score(targets, die, Hint("", cpus=cs("15"))) == 1.0
    assert pool_score(targets, die, Hint("", sockets=cs("0"))) == 0.5


def test_l3_cache_pools_overfit_numa_hints_and_their_parents_socket_score() -> None:
    targets = [
        HintTarget("numa", cs("0-7"), cs("0"), 0, divisor=2),
        HintTarget("l3cache", cs("0-3"), cs("0"), 0, parent=0),
    ]
    assert pool_score(targets, 1, Hint("", cpus=cs("0-1"))) == 1.0
    assert pool_score(targets, 1, Hint("", numas=cs("0"))) == pytest.approx(0.9)
    assert pool_score(targets, 1, Hint("", sockets=cs("0"))) == pytest.approx(0.45)


@pytest.mark.parametrize(
    ("scores", "expected"),
    [([], (1.0, 0.0)), ([0.5, 1.0], (0.5, 0.5)), ([0.0, 0.5], (0.0, 0.5)), ([0.0], (0.0, 0.0))],
)
def test_combine_multiplies_all_and_the_non_zero_scores(
    scores: list[float], expected: tuple[float, float]
) -> None:
    assert combine(scores) == expected


def score(pool: int, hints: tuple[float, float] | None, **kw: int) -> PoolScore:
    base = {"upstream_id": pool, "depth": 2, "isolated": 0, "shared": 1000, "free": 2000,
            "colocated": 0}  # fmt: skip
    return PoolScore(pool=pool, level="numa", hints=hints, **{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rule", "a", "b"),
    [
        # "better hint score wins", before memory, capacity and depth.
        ("higher score", score(1, (1.0, 1.0), depth=0, shared=0), score(0, (0.5, 0.5))),
        # All zero: the product of the non-zero scores decides.
        ("non-zero product", score(1, (0.0, 0.9), depth=0), score(0, (0.0, 0.5))),
        # A non-zero tie ends the comparison: the lower node, then the lower id ...
        ("tie: deeper", score(1, (1.0, 1.0), colocated=5), score(0, (1.0, 1.0), depth=1)),
        ("tie: lower id", score(0, (1.0, 1.0), shared=0), score(1, (1.0, 1.0), shared=9000)),
    ],
)
def test_hint_order_in_compare_scores(rule: str, a: PoolScore, b: PoolScore) -> None:
    assert compare(Ask(), a, b) < 0, rule
    assert compare(Ask(), b, a) > 0, rule


def test_a_zero_hint_tie_leaves_the_choice_to_the_later_rules() -> None:
    # ... but an all-zero tie does not: more shared capacity wins as without hints.
    a, b = score(1, (0.0, 0.0), shared=3000), score(0, (0.0, 0.0))
    assert compare(Ask(), a, b) < 0


# -- the grant: resources.go verifyStrictTopologyHints, takeCPUsByHints ---------------------


def test_misaligned_cpus_and_mems(tmp_path: Path) -> None:
    sys = system(tmp_path)
    h = Hint("", cpus=cs("8-11"), numas=cs("2"))
    assert misaligned(h, sys, cs("9-12")) == cs("12")
    assert misaligned(Hint("", numas=cs("3")), sys, cs("11-13")) == cs("11")
    assert misaligned_mems(h, sys, cs("2-3")) == cs("3")
    assert misaligned_mems(Hint("", cpus=cs("4-8")), sys, cs("0-2")) == cs("0")


@pytest.mark.parametrize(
    ("granted", "failure"),
    [
        (Granted(shared=cs("8-11"), mems=cs("2")), None),
        (Granted(shared=cs("8-12"), mems=cs("2")), 'granted shared CPUs "12" fail'),
        (Granted(reserved=cs("0"), mems=cs("2")), 'granted reserved CPUs "0" fail'),
        (Granted(exclusive=cs("11,13"), mems=cs("2")), 'granted exclusive CPUs "13" fail'),
        (Granted(exclusive=cs("11"), mems=cs("2-3")), "granted memory zones 3 fail"),
    ],
)
def test_strict_failure_names_what_lies_outside_the_hint(
    tmp_path: Path, granted: Granted, failure: str | None
) -> None:
    sys = system(tmp_path)
    h = ContainerHints((Hint("", cpus=cs("8-11"), numas=cs("2")),), strict=True)
    got = strict_failure(h, sys, granted)
    assert (got is None) if failure is None else (got is not None and got.startswith(failure))
    # Not strict: never a failure.
    assert strict_failure(ContainerHints(h.hints), sys, granted) is None


POD_RES = "podresourceapi:"


@pytest.mark.parametrize(
    ("hints", "count", "expected"),
    [
        # One CPU from each pod-resource hint, the rest where the allocator likes.
        ((Hint(POD_RES + "a", cs("8-9")), Hint(POD_RES + "b", cs("12-13"))), 2, "8,12"),
        # Hints dividing the count: an equal share each.
        ((Hint(POD_RES + "a", cs("8-11")), Hint(POD_RES + "b", cs("12-15"))), 4, "8-9,12-13"),
        # Not from the pod resources API: the plain pick.
        ((Hint("/dev/x", cs("12-13")),), 1, "plain"),
        # More hints than CPUs, or a hint without free CPUs: the plain pick.
        ((Hint(POD_RES + "a", cs("12")), Hint(POD_RES + "b", cs("13"))), 1, "plain"),
        ((Hint(POD_RES + "a", cs("3")),), 1, "plain"),
    ],
)
def test_take_cpus_by_pod_resource_hints(
    tmp_path: Path, hints: tuple[Hint, ...], count: int, expected: str
) -> None:
    sys = system(tmp_path)
    free = cs("8-15")
    got = take_cpus(sys, free, ContainerHints(hints, pick=True), count, Priority.NONE)
    if expected == "plain":
        from nri_resmgr.cpus import allocate_cpus

        assert got == allocate_cpus(sys, free, count, Priority.NONE)
    else:
        assert got.issubset(free) and len(got) == count
        for h in hints:
            assert len(got & h.cpus) == count // len(hints)


# -- through the policy -------------------------------------------------------------------


def policy(tmp_path: Path) -> tuple[TopologyAwarePolicy, Runtime]:
    p = TopologyAwarePolicy()
    start(p, tmp_path, N4C16, topology_spec())
    return p, Runtime(p)


def annotated(name: str, milli: int, anns: Mapping[str, str]) -> tuple[Pod, Container]:
    p = pod(name, "guaranteed", annotations=anns)
    c = container(p, "c0", milli, milli)
    return p, c


def test_a_hint_steers_a_container_to_the_hinted_node(tmp_path: Path) -> None:
    _, rt = policy(tmp_path)
    plain = rt.create(annotated("plain", 1000, {}))
    hinted = rt.create(annotated("hinted", 1000, {TEST: "{a: {CPUs: '14-15'}}"}))
    assert rt.cpus[plain.id] == "4"  # without hints: the emptiest node (as test01)
    # The hint picks the pool (NUMA node #3); CPUs within it are picked as usual.
    assert rt.cpus[hinted.id] is not None and cs(rt.cpus[hinted.id]).issubset(cs("12-15"))
    assert rt.mems[hinted.id] == "3"


def test_a_shared_container_with_a_socket_hint_goes_to_that_socket(tmp_path: Path) -> None:
    _, rt = policy(tmp_path)
    c = rt.create(annotated("s", 500, {TEST: "{a: {Sockets: '1'}}"}))
    assert rt.cpus[c.id] == "8-15" and rt.mems[c.id] == "2-3"


def test_strict_hints_fail_creation_and_leave_nothing_allocated(tmp_path: Path) -> None:
    p, rt = policy(tmp_path)
    anns = {TEST: "{a: {NUMAs: '2'}}", STRICT: "true"}
    rt.create(annotated("a", 2000, anns))
    rt.create(annotated("b", 1000, anns))
    p3, c3 = annotated("c", 2000, anns)
    with pytest.raises(PlacementError, match="fail strict hint"):
        rt.create((p3, c3))
    assert p.engine.allocation(c3.id) is None
    # The same request without strict runs, outside the hinted node.
    c4 = rt.create(annotated("d", 2000, {TEST: "{a: {NUMAs: '2'}}"}))
    assert rt.cpus[c4.id] is not None and not cs(rt.cpus[c4.id]).issubset(cs("8-11"))


def test_a_strict_container_already_running_is_kept_on_synchronize(tmp_path: Path) -> None:
    # Re-placing a running container (restart, reconfiguration) does not fail it.
    p, _ = policy(tmp_path)
    anns = {TEST: "{a: {CPUs: '8'}}", STRICT: "true"}
    pd, c = annotated("a", 2000, anns)
    p.synchronize([pd], [running(c, "12-13", "3")])
    assert p.engine.allocation(c.id) is not None


def test_pick_resources_by_hints_takes_exclusive_cpus_from_each_hint(tmp_path: Path) -> None:
    _, rt = policy(tmp_path)
    value = f"{{a: {{CPUs: '7', Provider: {POD_RES}a}}, b: {{CPUs: '12', Provider: {POD_RES}b}}}}"
    pick = {TEST: value, f"pick-resources-by-hints.{P}": "true"}
    without = rt.create(annotated("x", 2000, {TEST: value}))
    with_pick = rt.create(annotated("y", 2000, pick))
    # Both land in the root (the hints span sockets); only the picked one gets 7 and 12.
    assert rt.cpus[with_pick.id] == "7,12"
    assert rt.cpus[without.id] != "7,12"


# -- device nodes: pkg/topology NewTopologyHints, container.go isReadOnlyDevice -----------


@pytest.mark.parametrize(
    ("rules", "writable"),
    [
        ([], False),  # no rule: read-only, as upstream
        ([("", 0, 0, "rwm")], True),  # the wildcard rule (containerd's deny-all has "rwm")
        ([("c", 240, 0, "r")], False),
        ([("c", 240, 0, "rw"), ("", 0, 0, "r")], True),  # the device's own rule decides
        ([("", 0, 0, "rwm"), ("c", 240, 0, "r")], True),  # ... but a wildcard before it stays
        ([("b", 240, 0, "rw")], False),
    ],
)
def test_device_writable(rules: list[tuple[str, int, int, str]], writable: bool) -> None:
    from nri_resmgr.resmgr.model import device_writable

    assert device_writable(("c", 240, 0), rules) is writable


def _device(root: Path, dev: str, target: str, files: Mapping[str, str]) -> None:
    """``/sys/dev/<dev>`` -> ``/sys/devices/<target>``, with ``files`` in that directory
    (``../name`` in its parent)."""
    d = root / "sys/devices" / target
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name).resolve().parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(text + "\n")
    link = root / "sys/dev" / dev
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(d)


@pytest.fixture
def devices(tmp_path: Path) -> Path:
    system(tmp_path)
    _device(tmp_path, "char/240:0", "pci0000:00/0000:00:03.0/nvme/nvme0",
            {"../../numa_node": "2", "../../local_cpulist": "8-11"})  # fmt: skip
    # NUMA node only: the parent bus names the CPUs.
    _device(tmp_path, "char/241:0", "pci0000:02/0000:02:00.0",
            {"numa_node": "3", "../cpulistaffinity": "12-15"})  # fmt: skip
    # NUMA node only and no CPUs anywhere: firmware's socket id.
    _device(tmp_path, "char/242:0", "pci0000:01/0000:01:00.0", {"numa_node": "1"})
    _device(tmp_path, "char/243:0", "pci0000:03/0000:03:00.0", {"numa_node": "-1"})
    # A RAID: its members' hints.
    _device(tmp_path, "block/9:0", "virtual/block/md0", {})
    (tmp_path / "sys/devices/virtual/block/md0/slaves").mkdir()
    (tmp_path / "sys/devices/virtual/block/md0/slaves/nvme0").symlink_to(
        tmp_path / "sys/devices/pci0000:00/0000:00:03.0/nvme/nvme0"
    )
    return tmp_path


def _dev_hints(root: Path, *nodes: DeviceNode, deny: str = "") -> list[Hint]:
    from nri_resmgr.policies.topology_aware.device_hints import device_hints

    return device_hints(str(root), nodes, lambda p: bool(deny) and p.startswith(deny))


NVME = "/sys/devices/pci0000:00/0000:00:03.0"
BUS2, BUS1 = "/sys/devices/pci0000:02/0000:02:00.0", "/sys/devices/pci0000:01/0000:01:00.0"


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        (DeviceNode("c", 240, 0), [Hint(NVME, cs("8-11"), cs("2"))]),
        (DeviceNode("char", 240, 0), [Hint(NVME, cs("8-11"), cs("2"))]),
        (DeviceNode("c", 241, 0), [Hint(BUS2, cs("12-15"), cs("3"))]),
        (DeviceNode("c", 242, 0), [Hint(BUS1, sockets=cs("1"))]),
        (DeviceNode("c", 243, 0), []),  # numa_node -1: no affinity
        (DeviceNode("b", 9, 0), [Hint(NVME, cs("8-11"), cs("2"))]),  # via slaves/
        (DeviceNode("c", 240, 0, writable=False), []),
        (DeviceNode("c", 1, 3), []),  # not in sysfs
        (DeviceNode("u", 240, 0), []),  # not a char or block device
    ],
)  # fmt: skip
def test_device_hints_from_sysfs(devices: Path, node: DeviceNode, expected: list[Hint]) -> None:
    assert _dev_hints(devices, node) == expected


def test_a_denied_device_path_gives_no_hint(devices: Path) -> None:
    assert _dev_hints(devices, DeviceNode("c", 240, 0), deny="/sys/devices/pci0000:00") == []


def test_a_device_steers_a_container_without_any_annotation(devices: Path) -> None:
    p = TopologyAwarePolicy()
    p.setup(topology_spec(), PolicyEnv(host_root=str(devices)))
    rt = Runtime(p)
    pd = pod("dev", "guaranteed")
    nvme = (DeviceNode("c", 240, 0),)
    c = rt.create((pd, attrs.evolve(container(pd, "c0", 1000, 1000), devices=nvme)))
    assert rt.mems[c.id] == "2" and cs(rt.cpus[c.id] or "").issubset(cs("8-11"))
    # Turned off by annotation: placed as without the device.
    off = pod("off", "guaranteed", annotations={f"topologyhints.{P}": "false"})
    c = rt.create((off, attrs.evolve(container(off, "c0", 1000, 1000), devices=nvme)))
    assert rt.mems[c.id] != "2"
