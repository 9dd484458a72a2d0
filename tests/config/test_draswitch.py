"""Which keys ask for DRA devices, the effective ``dra.enabled``, and which changes a running
daemon refuses (issue 38 item 3): the pure rules of ``config.draswitch``, from YAML."""

from __future__ import annotations

from typing import Any

import pytest

from nri_resmgr.config.documents import load_document
from nri_resmgr.config.draswitch import device_keys, dra_switch, switch_refusal
from nri_resmgr.config.models import BalloonType, BalloonTypeDra, PolicySpec
from tests.policies.workload import balloons_spec

KINDS = {"ta": "TopologyAwarePolicy", "balloons": "BalloonsPolicy", "template": "TemplatePolicy"}
GROUPED = {"cpuDeviceMode": "grouped", "groupedCPUs": "8-15"}


def spec(kind: str, enabled: bool | None = None, **body: Any) -> PolicySpec:
    dra = dict(body.pop("dra", {}))
    if enabled is not None:
        dra["enabled"] = enabled
    doc = {
        "apiVersion": "config.nri/v1alpha1",
        "kind": KINDS[kind],
        "metadata": {"name": "default"},
        "spec": {"reservedResources": {"cpu": "1"}, **({"dra": dra} if dra else {}), **body},
    }
    return load_document(doc).spec


def balloon_type(name: str, **dra: Any) -> dict[str, Any]:
    return {"name": name, **({"dra": dra} if dra else {})}


def balloons(*types: dict[str, Any], enabled: bool | None = None) -> PolicySpec:
    return spec("balloons", enabled, balloonTypes=list(types))


ASKING = {
    "grouped": (spec("ta", dra=GROUPED), ["spec.dra.cpuDeviceMode"]),
    "grouped by socket": (
        spec("ta", dra={**GROUPED, "groupBy": "socket"}),
        ["spec.dra.cpuDeviceMode"],
    ),
    "publish": (
        balloons(balloon_type("a"), balloon_type("b", publish=True)),
        ["spec.balloonTypes[1].dra.publish"],
    ),
    "two publish": (
        balloons(
            balloon_type("a", publish=True, groupBy="socket"), balloon_type("b", publish=True)
        ),
        ["spec.balloonTypes[0].dra.publish", "spec.balloonTypes[1].dra.publish"],
    ),
}
NOT_ASKING = {
    "ta plain": spec("ta"),
    "individual": spec("ta", dra={"cpuDeviceMode": "individual"}),
    "template": spec("template"),
    "balloons plain": balloons(balloon_type("a")),
    "publish false": balloons(balloon_type("a", publish=False)),
    # Refused at load ("applies only with publish: true"); as a model it still asks nothing.
    "groupBy only": balloons_spec(
        balloon_types=(BalloonType(name="a", dra=BalloonTypeDra(group_by="socket")),)
    ),
}


@pytest.mark.parametrize("name", ASKING)
def test_keys_that_ask_for_devices_are_named(name: str) -> None:
    s, keys = ASKING[name]
    assert list(device_keys(s)) == keys


@pytest.mark.parametrize("name", NOT_ASKING)
def test_keys_that_do_not_ask(name: str) -> None:
    assert device_keys(NOT_ASKING[name]) == ()


@pytest.mark.parametrize(
    ("enabled", "asks", "on", "by_policy", "cause"),
    [
        (True, True, True, False, "spec.dra.enabled"),
        (True, False, True, False, "spec.dra.enabled"),
        (False, True, False, False, "spec.dra.enabled"),
        (False, False, False, False, "spec.dra.enabled"),
        (None, True, True, True, "spec.balloonTypes[0].dra.publish"),
        (None, False, False, False, "spec.dra.enabled"),
    ],
)
def test_the_effective_switch(
    enabled: bool | None, asks: bool, on: bool, by_policy: bool, cause: str
) -> None:
    s = balloons(balloon_type("a", publish=asks), enabled=enabled)
    switch = dra_switch(s)
    assert (switch.on, switch.explicit, switch.by_policy, switch.cause) == (
        on,
        enabled,
        by_policy,
        cause,
    )
    assert switch.asked_by == ("spec.balloonTypes[0].dra.publish" if asks else None)


def test_grouped_mode_turns_topology_aware_on_unless_disabled() -> None:
    assert dra_switch(spec("ta", dra=GROUPED)).on
    assert dra_switch(spec("ta", dra=GROUPED)).cause == "spec.dra.cpuDeviceMode"
    assert not dra_switch(spec("ta", False, dra=GROUPED)).on
    assert not dra_switch(spec("ta", dra={"cpuDeviceMode": "individual"})).on


PUB = balloon_type("a", publish=True)
PLAIN = balloon_type("a")
OTHER_PUB = balloon_type("b", publish=True)

# (old types, old enabled) -> (new types, new enabled): the refusal's start, or None.
CHANGES = [
    # enabled unset: a key asking for devices comes or goes
    (([PLAIN], None), ([PUB], None), "spec.balloonTypes[0].dra.publish: cannot enable DRA"),
    (([PUB], None), ([PLAIN], None), "spec.balloonTypes[0].dra.publish: cannot disable DRA"),
    (([PUB], None), ([PLAIN, OTHER_PUB], None), None),
    (([PLAIN], None), ([PLAIN, balloon_type("b")], None), None),
    # explicit: the policy keys change nothing
    (([PLAIN], True), ([PUB], True), None),
    (([PUB], True), ([PLAIN], True), None),
    (([PLAIN], False), ([PUB], False), None),
    (([PUB], False), ([PLAIN], False), None),
    # dra.enabled written or removed
    (([PUB], None), ([PUB], True), None),
    (([PUB], True), ([PUB], None), None),
    (([PLAIN], None), ([PLAIN], False), None),
    (([PLAIN], False), ([PLAIN], None), None),
    (([PUB], None), ([PUB], False), "spec.dra.enabled: cannot disable DRA"),
    (([PUB], False), ([PUB], None), "spec.dra.enabled: cannot enable DRA"),
    (([PLAIN], True), ([PLAIN], None), "spec.dra.enabled: cannot disable DRA"),
    (([PLAIN], None), ([PLAIN], True), "spec.dra.enabled: cannot enable DRA"),
    (([PUB], True), ([PUB], False), "spec.dra.enabled: cannot disable DRA"),
    (([PLAIN], False), ([PUB], True), "spec.dra.enabled: cannot enable DRA"),
]


@pytest.mark.parametrize(("old", "new", "refusal"), CHANGES)
def test_changes_of_the_effective_value_are_refused(
    old: tuple[list[dict[str, Any]], bool | None],
    new: tuple[list[dict[str, Any]], bool | None],
    refusal: str | None,
) -> None:
    said = switch_refusal(balloons(*old[0], enabled=old[1]), balloons(*new[0], enabled=new[1]))
    if refusal is None:
        assert said is None
        return
    assert said is not None and said.startswith(refusal)
    assert said.endswith("restart nri-resmgr to apply this change")


def test_a_refusal_by_a_policy_key_says_why() -> None:
    said = switch_refusal(spec("ta"), spec("ta", dra=GROUPED))
    assert said == (
        "spec.dra.cpuDeviceMode: cannot enable DRA on a running daemon (spec.dra.cpuDeviceMode "
        "asks for devices and spec.dra.enabled is unset); restart nri-resmgr to apply this change"
    )
    said = switch_refusal(balloons(PUB), balloons(PLAIN))
    assert said is not None and "(spec.balloonTypes[0].dra.publish no longer asks" in said
