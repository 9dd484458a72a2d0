"""The device metadata file (KEP-5304) our plugin writes for a prepared claim: its content in
per-CPU and grouped mode, and its CDI mount, as k8s.io/dynamic-resource-allocation v0.37's
kubeletplugin writes them. The real-containerd proof is ``tests/runtime/test_dra_metadata.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.dra.kubeletplugin.claims import AllocatedClaim, ClaimRef
from nri_resmgr.dra.kubeletplugin.driver import PreparedDevice
from nri_resmgr.dra.kubeletplugin.metadata import container_path, document
from tests.dra.claim_setup import DRIVER, NODE, Node, claim_object, make_node
from tests.dra.metadata_stream import attributes, newest, objects
from tests.dra.test_grouped import claim as grouped_claim
from tests.dra.test_grouped import grouped_node

UID = "5d0c3a2b-7e41-4f6a-9b8c-0d1e2f3a4b5c"
CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"


def written(node: Node, request: str = "cpus") -> tuple[dict[str, Any], dict[str, Any]]:
    """(the newest object of the request's metadata file, its CDI spec)."""
    host = node.plugin_dir / "dra-device-metadata" / f"{UID}_{request}.json"
    spec = json.loads((node.cdi_dir / f"{DRIVER}_metadata_{UID}_{request}.json").read_text())
    return newest(host.read_text()), spec


async def test_per_cpu_claim_file_names_claim_request_driver_and_each_cpu(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    node.claims.add(claim_object(UID, ["cpu6", "cpu7"], name="two"))
    [outcome] = (await node.preparer.prepare([node.ref(UID)])).values()
    assert outcome.error == ""
    doc, spec = written(node)
    assert doc["metadata"] == {"name": "two", "namespace": "default", "uid": UID, "generation": 1}
    assert "podClaimName" not in doc
    [request] = doc["requests"]
    assert request["name"] == "cpus"
    assert [(d["driver"], d["pool"], d["name"]) for d in request["devices"]] == [
        (DRIVER, NODE, "cpu6"),
        (DRIVER, NODE, "cpu7"),
    ]
    # n4c16: CPUs 6 and 7 are SMT siblings of core 6, NUMA node 1, socket 0.
    cpu7 = attributes(request["devices"][1])
    assert cpu7 == cpu7 | {"cpuID": 7, "coreID": 6, "numaNode": 1, "socketID": 0,
                           "resource.kubernetes.io/numaNode": 1, "smtEnabled": True}  # fmt: skip
    # The CDI spec mounts it read-only at the documented path.
    [device] = spec["devices"]
    assert (spec["cdiVersion"], spec["kind"]) == ("0.5.0", f"{DRIVER}/metadata")
    assert device["name"] == f"{UID}_cpus"
    [mount] = device["containerEdits"]["mounts"]
    assert mount == {
        "hostPath": str(node.plugin_dir / "dra-device-metadata" / f"{UID}_cpus.json"),
        "containerPath": f"{CONTAINER_DIR}/resourceclaims/two/cpus/{DRIVER}-metadata.json",
        "options": ["ro", "bind"],
    }


async def test_grouped_claim_file_gives_the_cpus_prepare_picked_in_the_group(
    tmp_path: Path,
) -> None:
    node = grouped_node(tmp_path)
    node.claims.add(grouped_claim(UID, "numa3", "2"))
    [outcome] = (await node.preparer.prepare([node.ref(UID)])).values()
    assert outcome.error == ""
    picked = node.driver.store.records[UID].cpus
    doc, _ = written(node)
    [request] = doc["requests"]
    [device] = request["devices"]
    assert (device["name"], device["pool"]) == ("numa3", NODE)
    assert attributes(device) == {
        "numCPUs": 4, "smtEnabled": True, "numaNodeID": 3, "numaNode": 3,
        "resource.kubernetes.io/numaNode": 3, "socketID": 1,
        "allocatedNumCPUs": 2, "allocatedCPUs": sorted(picked),
    }  # fmt: skip
    assert len(picked) == 2 and picked.issubset(CpuSet.parse("12-15"))


def test_template_claim_is_filed_by_the_pods_name_for_it_and_subrequests_by_base() -> None:
    claim = AllocatedClaim(ClaimRef(UID, "ns", "app-cpus-x7k2p"), (), pod_claim_name="cpus")
    assert container_path(DRIVER, claim, "big") == (
        f"{CONTAINER_DIR}/resourceclaimtemplates/cpus/big/{DRIVER}-metadata.json"
    )
    with_attrs = PreparedDevice(NODE, "cpu1", ("big/small",), metadata={"cpuID": 1})
    without = PreparedDevice(NODE, "cpu2", ("big/small",))
    docs = document(DRIVER, claim, "big/small", [with_attrs, without])
    assert [d["apiVersion"] for d in docs] == [
        "metadata.resource.k8s.io/v1beta1",
        "metadata.resource.k8s.io/v1alpha1",
    ]
    [request] = docs[0]["requests"]
    # The request keeps its subrequest (as the allocation result names it); a device the
    # driver gave no attributes is listed without them, as the Go helper lists it.
    assert docs[0]["podClaimName"] == "cpus" and request["name"] == "big/small"
    assert request["devices"] == [
        {"driver": DRIVER, "pool": NODE, "name": "cpu1", "attributes": {"cpuID": {"int": 1}}},
        {"driver": DRIVER, "pool": NODE, "name": "cpu2"},
    ]


def test_a_list_of_numbers_is_written_as_ints() -> None:
    claim = AllocatedClaim(ClaimRef(UID, "ns", "c"), ())
    device = PreparedDevice(NODE, "numa0", ("r",), metadata={"allocatedCPUs": (1, 2, 5)})
    [doc, _] = document(DRIVER, claim, "r", [device])
    assert doc["requests"][0]["devices"][0]["attributes"] == {"allocatedCPUs": {"ints": [1, 2, 5]}}


def test_stream_reader_takes_objects_in_order_and_refuses_other_json() -> None:
    assert objects('{"a": 1}\n{"b": 2}\n') == [{"a": 1}, {"b": 2}]
    assert objects("") == []
    for bad in ("[1]", '{"a": 1} x'):
        with pytest.raises(ValueError):
            objects(bad)
