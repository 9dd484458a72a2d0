"""nri-plugins' topology-aware e2e scenarios on the suite's other VMs: n4c128 (L3 cache
clusters), s8c4k (sparse CPU ids, hot-plugged CPUs) and n6-hbm-cxl (CPU-less HBM and PMEM
nodes), replayed with the same configuration, pods, order and ``verify`` expressions."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from nri_resmgr.observability.nrt import nrt_body
from nri_resmgr.policies.topology_aware.pools import build_pools
from nri_resmgr.sysfs import discover
from tests.policies.replay.vm import write_caches, write_vm_sysfs
from tests.policies.topology_aware_e2e.scenario import Scenario, helm_config
from tests.policies.topology_aware_e2e.topologies import (
    N4C128,
    N6_CONSTS,
    N6_HBM_CXL,
    S8C4K,
    S8C4K_ONLINE,
)

UB = "unlimited-burstable.resource-policy.nri.io/container"
MT = "memory-type.resource-policy.nri.io/container"


# -- n4c128/test19-cacheclusters ------------------------------------------------------------

# n4c128/test19-cacheclusters/helm-config.yaml (its own, not the suite's template).
CACHE_VALUES: dict[str, Any] = {
    "reservedResources": {"cpu": "750m"},
    "pinCPU": True,
    "pinMemory": True,
    "instrumentation": {"httpEndpoint": ":8891"},
    "log": {"debug": ["resource-manager", "policy"], "source": True,
            "klog": {"skip_headers": True}},
}  # fmt: skip
# Its extraEnv OVERRIDE_SYS_CACHES. Each cpuset string is one cache (upstream's
# parseCpuCacheOverrides), so "0-7" and "64-71" are two L3 caches, one per NUMA node of
# the VM: sixteen L3 caches of eight CPUs, four under each NUMA node.
L3 = ["0-7,64-71", "8-15,72-79", "48-55,112-119", "56-63,120-127", "16-23,80-87",
      "24-31,88-95", "32-39,96-103", "40-47,104-111"]  # fmt: skip
CACHES: list[dict[str, Any]] = [
    *({"cpusets": g.split(","), "level": 3, "size": "16M"} for g in L3),
    {"cpusets": ["0-63"], "level": 2, "size": "4M"},
    {"cpusets": ["64-127"], "level": 2, "size": "4M"},
    {"cpusets": ["0-63"], "level": 1, "size": "1M", "kind": "d"},
    {"cpusets": ["0-63"], "level": 1, "size": "1M", "kind": "i"},
    {"cpusets": ["64-127"], "level": 1, "size": "128k", "kind": "d"},
    {"cpusets": ["64-127"], "level": 1, "size": "128k", "kind": "i"},
]


def cache_run(tmp_path: Path, first_pod: int = 0) -> Scenario:
    write_vm_sysfs(tmp_path, N4C128)
    write_caches(tmp_path, CACHES)
    return Scenario(tmp_path, N4C128, CACHE_VALUES, first_pod=first_pod, write=False)


def test19_each_cpuset_string_is_one_l3_cache_four_per_numa_node(tmp_path: Path) -> None:
    write_vm_sysfs(tmp_path, N4C128)
    write_caches(tmp_path, CACHES)
    pools = build_pools(discover(str(tmp_path)))
    caches = [p for p in pools if p.level == "l3cache"]
    expected = [cpus for group in L3 for cpus in group.split(",")]
    assert sorted(str(p.cpus) for p in caches) == sorted(expected)
    for node in (p for p in pools if p.level == "numa"):
        under = [p for p in caches if p.parent == node.index]
        assert len(under) == 4
        assert all(len(p.cpus) == 8 and p.cpus.issubset(node.cpus) for p in under)


def l3(s: Scenario, req: str, lim: str = "0", mem: str = "100M", n: int = 1) -> str:
    pod = f"pod{s.next_pod}"
    ann = [f"{UB}.{pod}c{i}: l3cache" for i in range(n)]
    return s.create("burstable", CONTCOUNT=n, CPUREQ=req, CPULIM=lim, MEMREQ=mem, ann=ann)


def test19_unlimited_burstable_levels(tmp_path: Path) -> None:
    s = cache_run(tmp_path)
    levels = [f"{UB}.pod0c0: l3cache", f"{UB}.pod0c1: system", f"{UB}.pod0c2: socket"]
    s.create("burstable", CONTCOUNT=3, CPUREQ="1500m", CPULIM="0", MEMREQ="100M", ann=levels)
    s.verify('len(cpus["pod0c0"]) == 8', 'len(cpus["pod0c1"]) == 127',
             'len(cpus["pod0c2"]) == 64')  # fmt: skip


def test19_promotion(tmp_path: Path) -> None:
    s = cache_run(tmp_path, first_pod=1)
    l3(s, "12")
    s.verify('len(cpus["pod1c0"]) == 31')
    s.delete_all()
    l3(s, "4", "20")
    s.verify('len(cpus["pod2c0"]) == 32')
    s.delete_all()
    l3(s, "4", "8")
    s.verify('len(cpus["pod3c0"]) == 8')


def test19_clusters_and_affinity(tmp_path: Path) -> None:
    s = cache_run(tmp_path, first_pod=4)
    l3(s, "2", n=2)
    s.verify('len(cpus["pod4c0"]) == 8', 'len(cpus["pod4c1"]) == 8',
             'disjoint_sets(cpus["pod4c0"], cpus["pod4c1"])')  # fmt: skip
    s.delete_all()
    s.create("burstable", CONTCOUNT=2, CPUREQ="2", CPULIM="0", MEMREQ="100M",
             ann=[f"{UB}.pod5c0: l3cache", f"{UB}.pod5c1: l3cache"],
             annotations={"resource-policy.nri.io/affinity": "pod5c0: [ pod5c1 ]\n"})  # fmt: skip
    s.verify('len(cpus["pod5c0"]) == 8', 'len(cpus["pod5c1"]) == 8',
             'cpus["pod5c0"] == cpus["pod5c1"]')  # fmt: skip
    s.delete_all()
    for _ in range(4):
        l3(s, "2", mem="50M")
    s.verify(
        'len(cpus["pod6c0"]) == 8',
        'len(cpus["pod7c0"]) == 8',
        'len(cpus["pod8c0"]) == 8',
        'len(cpus["pod9c0"]) == 8',
        'disjoint_sets(cpus["pod6c0"], cpus["pod7c0"], cpus["pod8c0"], cpus["pod9c0"])',
    )


def test19_occupancy_and_overflow(tmp_path: Path) -> None:
    s = cache_run(tmp_path, first_pod=10)
    for _ in range(15):
        l3(s, "4", mem="50M")
    l3(s, "1", mem="50M")
    s.verify(
        'len(set.union(*[cpus[f"pod{i}c0"] for i in range(10, 26)])) == 127',
        'disjoint_sets(*[cpus[f"pod{i}c0"] for i in range(10, 26)])',
    )
    l3(s, "2", mem="50M")
    s.verify('cpus["pod26c0"] == cpus["pod25c0"]')
    s.delete_all()
    for _ in range(16):
        l3(s, "7", mem="50M")
    s.verify(
        'len(set.union(*[cpus[f"pod{i}c0"] for i in range(27, 43)])) == 127',
        'disjoint_sets(*[cpus[f"pod{i}c0"] for i in range(27, 43)])',
    )
    l3(s, "3", mem="50M")
    s.verify('len(cpus["pod43c0"]) == 31')
    l3(s, "3", mem="50M")
    s.verify('len(cpus["pod44c0"]) == 32')


def test19_exclusive_from_clusters(tmp_path: Path) -> None:
    s = cache_run(tmp_path, first_pod=45)
    for _ in range(16):
        l3(s, "2", mem="50M")
    s.verify(
        'len(set.union(*[cpus[f"pod{i}c0"] for i in range(45, 61)])) == 127',
        'disjoint_sets(*[cpus[f"pod{i}c0"] for i in range(45, 61)])',
    )
    s.verify('len(cpus["pod45c0"]) == 8')
    s.create("guaranteed", CPU="4", MEM="100M")
    s.verify('len(cpus["pod61c0"]) == 4', 'len(cpus["pod45c0"]) == 4',
             'disjoint_sets(cpus["pod45c0"], cpus["pod61c0"])')  # fmt: skip
    s.create("guaranteed", CPU="8", MEM="100M")
    s.verify('len(cpus["pod62c0"]) == 8', 'len(cpus["pod50c0"]) == 2',
             'len(cpus["pod51c0"]) == 6')  # fmt: skip
    s.delete("pod61", "pod62")
    s.verify('len(cpus["pod45c0"]) == 8', 'len(cpus["pod50c0"]) == 8',
             'len(cpus["pod51c0"]) == 8')  # fmt: skip


# -- s8c4k/test01-sparse-4kcpus -------------------------------------------------------------


def sparse(tmp_path: Path, first_pod: int = 0) -> Scenario:
    # The test hot-plugs 511, 1535 and 4095 and onlines them before the policy starts.
    cfg = helm_config(COLOCATE_PODS=True)
    return Scenario(tmp_path, S8C4K, cfg, online=S8C4K_ONLINE, first_pod=first_pod)


def test01_sparse_4kcpus_all_cpus_used(tmp_path: Path) -> None:
    s = sparse(tmp_path)
    s.create("guaranteed", CPU="5000m")
    s.verify('"cpu4095" in cpus["pod0c0"]', 'len(cpus["pod0c0"]) == 5')


def test01_sparse_4kcpus_packages(tmp_path: Path) -> None:
    s = sparse(tmp_path, first_pod=1)
    s.create("burstable", CONTCOUNT=1, CPUREQ="3100m", CPULIM="4000m")
    s.verify('len(packages["pod1c0"]) == 1 and len(cpus["pod1c0"]) == 4')
    s.create("burstable", CONTCOUNT=1, CPUREQ="900m", CPULIM="1")
    s.verify('cpus["pod2c0"] == {"cpu4095"}')
    s.create("besteffort", CONTCOUNT=1)
    s.delete("pod1", "pod2", "pod3")
    s.create("guaranteed", CPU="5000m")
    s.verify('len(cpus["pod4c0"]) == 5')


# -- n6-hbm-cxl/test01-memory-types ---------------------------------------------------------


def _by_package(c: str, pkg0: str, pkg1: str) -> str:
    return (f'mems["{c}"] == {{{pkg0}}} if packages["{c}"] == {{"package0"}}'
            f' else mems["{c}"] == {{{pkg1}}}')  # fmt: skip


def test01_memory_types(tmp_path: Path) -> None:
    s = Scenario(tmp_path, N6_HBM_CXL, helm_config())
    k = N6_CONSTS

    def verify(*exprs: str) -> None:
        env = s.env()
        env.update(k)
        from tests.policies.replay.verify import check

        check(env, *exprs)

    s.create("guaranteed", CONTCOUNT=4, CPU="100m", MEM="512M",
             ann=[f"{MT}.pod0c1: dram", f"{MT}.pod0c2: hbm", f"{MT}.pod0c3: pmem"])  # fmt: skip
    verify(
        _by_package("pod0c0", "dram0, pmem0", "dram1, pmem1"),
        _by_package("pod0c1", "dram0", "dram1"),
        _by_package("pod0c2", "hbm0", "hbm1"),
        _by_package("pod0c3", "pmem0", "pmem1"),
    )
    s.delete("pod0")
    s.create("guaranteed", CONTCOUNT=4, CPU="100m", MEM="2816M",
             ann=[f"{MT}.pod1c0: hbm,dram", f"{MT}.pod1c1: hbm,dram", f"{MT}.pod1c2: pmem",
                  f"{MT}.pod1c3: pmem"])  # fmt: skip
    pod1 = (
        _by_package("pod1c0", "hbm0, dram0", "hbm1, dram1"),
        _by_package("pod1c1", "hbm0, dram0", "hbm1, dram1"),
        _by_package("pod1c2", "pmem0", "pmem1"),
        _by_package("pod1c3", "pmem0", "pmem1"),
    )
    verify(*pod1)
    s.create("guaranteed", CONTCOUNT=1, CPU="100m", MEM="2G", ann=[f"{MT}.pod2c0: pmem"])
    verify(*pod1, 'mems["pod2c0"] == {pmem0, pmem1}')


# -- n6-hbm-cxl/test04-nrt ------------------------------------------------------------------

# n6-hbm-cxl/test04-nrt/topology-aware-nrt.cfg (its own helm config, not the suite's).
NRT_VALUES: dict[str, Any] = {
    "pinCPU": True,
    "pinMemory": True,
    "reservedResources": {"cpu": "cpuset:3"},
    "agent": {"nodeResourceTopology": True},
    "log": {"debug": ["resource-manager", "policy", "cache"], "source": True,
            "klog": {"skip_headers": True}},
    "instrumentation": {"reportPeriod": "60s", "samplingRatePerMillion": 1000000},
}  # fmt: skip


def test04_nrt(tmp_path: Path) -> None:
    """The zone attributes upstream's nrt-verify-zone-attribute checks, on the object the
    NodeResourceTopology exporter writes (its writes to a real API server: tests/kube)."""
    s = Scenario(tmp_path, N6_HBM_CXL, NRT_VALUES)
    body = nrt_body(s.policy.name, s.policy.topology_zones())
    attributes = {
        (z["name"], a["name"]): a["value"] for z in body["zones"] for a in z.get("attributes", ())
    }
    expected = {
        ("socket #0", "memory set"): r"^0,2,4$",
        ("socket #0", "shared cpuset"): r"^0-2$",
        ("socket #0", "reserved cpuset"): r"^3$",
        ("socket #1", "memory set"): r"^1,3,5$",
        ("socket #1", "shared cpuset"): r"^4-7$",
        ("root", "memory set"): r"^0-5$",
        ("root", "shared cpuset"): r"^0-2,4-7$",
        ("root", "reserved cpuset"): r"^3$",
    }
    for key, pattern in expected.items():
        assert re.match(pattern, attributes.get(key, "")), (key, attributes.get(key))
