"""ClaimService: one answer per requested claim, whatever the policy does."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from nri_resmgr.dra.service import ClaimOutcome, ClaimRef, ClaimService
from nri_resmgr.resmgr.model import ClaimResult


class Backend:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.asked: list[list[str]] = []

    async def prepare_claims(self, claim_uids: Sequence[str]) -> list[ClaimResult]:
        self.asked.append(list(claim_uids))
        if self.fail:
            raise RuntimeError("policy exploded")
        return [ClaimResult(uid) for uid in claim_uids]

    async def unprepare_claims(self, claim_uids: Sequence[str]) -> list[ClaimResult]:
        return await self.prepare_claims(claim_uids)


async def test_a_failing_policy_fails_each_claim_not_the_call() -> None:
    service = ClaimService(Backend(fail=True), "t.nri.io", "node-1")
    outcomes = await service.prepare([ClaimRef("a"), ClaimRef("b")])
    assert outcomes == {
        "a": ClaimOutcome(error="prepare failed: policy exploded"),
        "b": ClaimOutcome(error="prepare failed: policy exploded"),
    }


@pytest.mark.parametrize("verb", ["prepare", "unprepare"])
async def test_duplicate_claims_are_asked_once(verb: str) -> None:
    backend = Backend()
    service = ClaimService(backend, "t.nri.io", "node-1")
    outcomes = await getattr(service, verb)([ClaimRef("a"), ClaimRef("a"), ClaimRef("b")])
    assert backend.asked == [["a", "b"]]
    assert outcomes == {"a": ClaimOutcome(), "b": ClaimOutcome()}


async def test_an_empty_request_asks_nothing() -> None:
    backend = Backend()
    assert await ClaimService(backend, "t.nri.io", "node-1").prepare([]) == {}
    assert backend.asked == []
