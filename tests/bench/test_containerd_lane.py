"""The containerd lane's bookkeeping: the CRI messages it sends and the ratios it reports.
(The lane itself runs in ``nox -s bench``; these are fast checks without a runtime.)"""

from __future__ import annotations

from tests.bench import containerd_lane as cl
from tests.bench import cri_client as cri


def test_create_request_wire_fields() -> None:
    """Field numbers as runtime.v1 has them: sandbox id 1, config 2, config.linux 15, ..."""
    config = cri.ContainerConfig(
        metadata=cri.ContainerMetadata(name="c"),
        log_path="c.log",
        linux=cri.LinuxContainerConfig(cri.LinuxContainerResources(cpu_shares=2)),
    )
    wire = bytes(cri.CreateContainerRequest("pod", config))
    assert wire.startswith(b"\x0a\x03pod\x12")  # field 1 (string), then field 2 (message)
    inner = bytes(config)
    assert b"\x5a\x05c.log" in inner  # field 11, length-delimited
    assert b"\x7a\x04\x0a\x02\x18\x02" in inner  # 15 -> 1 -> cpu_shares (3) = 2


def test_summary_ratios_against_no_plugin_and_stub() -> None:
    lanes = []
    for name, create_us in (("none", 10), ("ours/topology-aware", 12), ("gostub/fixed-cpus", 8)):
        lane = object.__new__(cl.Lane)
        lane.name = name
        lane.samples = {0: {op: [create_us * 1000] * 3 for op in cl.OPS}}
        lanes.append(lane)
    out = cl.summarize(lanes)
    ours = out["create"]["0"]["ours/topology-aware"]
    assert ours["median_us"] == 12
    assert ours["vs none"] == [1.2, 1.2]
    assert ours["vs gostub/fixed-cpus"] == [1.5, 1.5]
    assert "vs none" not in out["create"]["0"]["none"]
    assert out["create"]["0"]["gostub/fixed-cpus"]["vs none"] == [0.8, 0.8]
