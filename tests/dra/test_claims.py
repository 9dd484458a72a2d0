"""ClaimService (the kubelet-plugin layer): one answer per requested claim, whatever the claim
store or the driver does; claims read and checked before the driver sees them."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_resmgr.dra.kubeletplugin.claims import ClaimRef
from nri_resmgr.dra.kubeletplugin.node_service import ClaimOutcome, ClaimService
from tests.dra.claim_setup import Claims, claim_object
from tests.dra.conftest import DRIVER, AllocatedEverywhere, uid
from tests.dra.fake_driver import FakeDriver

A, B = uid("a"), uid("b")


def ref(claim_uid: str) -> ClaimRef:
    return ClaimRef(claim_uid, "default", f"claim-{claim_uid}")


def service(driver: FakeDriver, claims: Claims | None = None) -> ClaimService:
    return ClaimService(driver, DRIVER, claims or AllocatedEverywhere())  # type: ignore[arg-type]


async def test_a_failing_driver_fails_each_claim_not_the_call() -> None:
    driver = FakeDriver()
    driver.explode = True
    outcomes = await service(driver).prepare([ref(A), ref(B)])
    assert outcomes == {
        A: ClaimOutcome(error="prepare failed: driver exploded"),
        B: ClaimOutcome(error="prepare failed: driver exploded"),
    }
    unprepared = await service(driver).unprepare([ref(A)])
    assert unprepared == {A: ClaimOutcome(error="unprepare failed: driver exploded")}


@pytest.mark.parametrize("verb", ["prepare", "unprepare"])
async def test_duplicate_claims_are_asked_once(verb: str) -> None:
    driver = FakeDriver()
    outcomes = await getattr(service(driver), verb)([ref(A), ref(A), ref(B)])
    asked = driver.prepared if verb == "prepare" else driver.unprepared
    assert asked == [[A, B]]
    assert set(outcomes) == {A, B} and all(o.error == "" for o in outcomes.values())


async def test_an_empty_request_asks_nothing() -> None:
    driver = FakeDriver()
    assert await service(driver).prepare([]) == {}
    assert await service(driver).unprepare([]) == {}
    assert driver.prepared == driver.unprepared == []


async def test_claims_that_fail_their_checks_never_reach_the_driver() -> None:
    claims = Claims()
    claims.add(claim_object(A, ["dev0"], driver=DRIVER))
    unallocated = claim_object(B, ["dev0"], driver=DRIVER)
    del unallocated["status"]
    claims.add(unallocated)
    replaced = uid("replaced")
    claims.add(claim_object(uid("new object"), ["dev0"], driver=DRIVER, name=f"claim-{replaced}"))
    missing = uid("missing")
    driver = FakeDriver()

    outcomes = await service(driver, claims).prepare(
        [ref(A), ref(B), ref(replaced), ref(missing), ClaimRef("x/../y", "default", "c")]
    )

    assert driver.prepared == [[A]]
    assert outcomes[A].error == ""
    assert outcomes[B].error == f"claim default/claim-{B} ({B}) is not allocated"
    assert f"kubelet asked for {replaced} (the claim was replaced)" in outcomes[replaced].error
    assert outcomes[missing].error == f"ResourceClaim default/claim-{missing} not found"
    assert "is not a Kubernetes UID" in outcomes["x/../y"].error


async def test_unprepare_of_a_malformed_uid_succeeds_without_the_driver() -> None:
    driver = FakeDriver()
    assert await service(driver).unprepare([ClaimRef("../../etc")]) == {"../../etc": ClaimOutcome()}
    assert driver.unprepared == []


async def test_the_driver_gets_only_its_own_results_and_the_other_drivers_by_name() -> None:
    claims = Claims()
    obj = claim_object(A, ["dev0"], driver=DRIVER)
    results = obj["status"]["allocation"]["devices"]["results"]
    results.append({"request": "gpu", "driver": "gpu.example.com", "pool": "p", "device": "g0"})
    claims.add(obj)
    seen = []

    class Recording(FakeDriver):
        async def prepare(self, given):  # type: ignore[no-untyped-def]
            seen.extend(given)
            return await super().prepare(given)

    await service(Recording(), claims).prepare([ref(A)])
    [claim] = seen
    assert [(r.driver, r.device) for r in claim.results] == [(DRIVER, "dev0")]
    assert claim.other_drivers == ("gpu.example.com",)


async def test_device_metadata_is_written_and_mounted_and_removed(tmp_path: Path) -> None:
    from nri_resmgr.dra.kubeletplugin.metadata import MetadataWriter

    plugin_dir, cdi_dir = tmp_path / "plugin", tmp_path / "cdi"
    claims_service = ClaimService(
        FakeDriver(), DRIVER, AllocatedEverywhere(),  # type: ignore[arg-type]
        metadata=MetadataWriter(DRIVER, plugin_dir, cdi_dir),
    )  # fmt: skip
    outcome = (await claims_service.prepare([ref(A)]))[A]
    [answered] = outcome.devices
    assert answered.cdi_ids[-1] == f"{DRIVER}/metadata={A}_cpus"
    assert (plugin_dir / "dra-device-metadata" / f"{A}_cpus.json").is_file()
    assert (cdi_dir / f"{DRIVER}_metadata_{A}_cpus.json").is_file()

    assert (await claims_service.unprepare([ref(A)]))[A].error == ""
    assert list((plugin_dir / "dra-device-metadata").iterdir()) == []
    assert list(cdi_dir.iterdir()) == []
