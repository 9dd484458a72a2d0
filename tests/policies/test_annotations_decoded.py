"""A container's annotations are read once, at the edge, into one frozen value that the
policy reads fields of: the scoping rule, the memo that makes "once" true while the engine
asks by pod and container, and what a create costs in decodes."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from nri_resmgr.policies.annotations import Annotations, Decoded
from nri_resmgr.policies.topology_aware.preferences import (
    NO_PREFERENCES,
    Preferences,
    preferences_of,
)
from nri_resmgr.resmgr.model import Container, Pod
from tests.policies.test_topology_aware import policy
from tests.policies.workload import Runtime, guaranteed

P = "resource-policy.nri.io"


def test_the_narrowest_scope_wins_and_other_containers_keys_are_not_read() -> None:
    pod, c0 = guaranteed("p", 1000, annotations={
        f"prefer-shared-cpus.{P}": "true",
        f"prefer-shared-cpus.{P}/pod": "false",
        f"prefer-shared-cpus.{P}/container.c0": "1",
        f"cpu.preserve.{P}/pod": "true",
        f"cpu.preserve.{P}/container.other": "false",
        f"memory-type.{P}/container.other": "hbm",
        f"{P}/affinity": "c0: [c1]",
        "unrelated.example.com/key": "x",
    })  # fmt: skip
    a = Annotations.of(pod, c0)
    assert dict(a.values) == {"prefer-shared-cpus": "1", "cpu.preserve": "true"}
    assert (a.scope("prefer-shared-cpus"), a.scope("cpu.preserve")) == (0, 1)
    assert dict(a.pod_keys) == {"affinity": "c0: [c1]"}


def test_isolation_is_the_narrower_annotation_require_winning_a_tie() -> None:
    def decoded(annotations: dict[str, str]) -> tuple[bool | None, bool]:
        prefs = Preferences.decode(Annotations.of(*guaranteed("p", 2000, annotations=annotations)))
        return prefs.isolated, prefs.require_isolated

    prefer, require = f"prefer-isolated-cpus.{P}", f"require-isolated-cpus.{P}"
    assert decoded({}) == (None, False)
    assert decoded({prefer: "false", require: "true"}) == (True, True)
    assert decoded({f"{prefer}/pod": "false", require: "true"}) == (False, False)
    assert decoded({f"{require}/container.c0": "t", f"{prefer}/pod": "f"}) == (True, True)


def _pod(annotations: dict[str, str]) -> tuple[Pod, Container]:
    return guaranteed("p", 1000, annotations=annotations)


def test_a_decode_is_remembered_for_the_same_objects_and_redone_for_new_ones() -> None:
    calls: list[str] = []

    def decode(a: Annotations) -> str:
        calls.append(a.pod)
        return a.values.get("cpu.preserve", "")

    memo = Decoded(decode, "none")
    pod, c = _pod({f"cpu.preserve.{P}": "true"})
    assert memo(pod, c) == memo(pod, c) == "true"
    assert len(calls) == 1
    # A later event brings new objects (maybe other annotations): decoded anew.
    changed = attrs.evolve(pod, annotations={f"cpu.preserve.{P}": "false"})
    assert memo(changed, c) == "false" and len(calls) == 2
    # A pod without annotations is the shared default, not decoded.
    bare, c1 = guaranteed("q", 1000)
    assert memo(bare, c1) == "none" and len(calls) == 2


def test_the_memo_keeps_at_most_its_limit_oldest_first_out() -> None:
    memo = Decoded(lambda a: a.pod, "", limit=2)
    made = [_pod({f"cpu.preserve.{P}": "true"}) for _ in range(3)]
    made = [(attrs.evolve(p, name=f"p{i}"), attrs.evolve(c, id=f"c{i}"))
            for i, (p, c) in enumerate(made)]  # fmt: skip
    for pod, c in made:
        memo(pod, c)
    assert list(memo._recent) == ["c1", "c2"]


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Each decode of a container's annotations, by container name."""
    seen: list[str] = []
    of = Annotations.of.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Annotations], pod: Pod, container: Container) -> Annotations:
        seen.append(container.name)
        return of(cls, pod, container)  # type: ignore[no-any-return]

    monkeypatch.setattr(Annotations, "of", classmethod(counting))
    yield seen


ALL_OF_THEM = {
    f"prefer-shared-cpus.{P}": "false", f"prefer-isolated-cpus.{P}": "false",
    f"prefer-cpu-priority.{P}": "normal", f"memory-type.{P}": "dram",
    f"memory.preserve.{P}": "false", f"topologyhints.{P}": "true",
    f"strict.topologyhints.{P}": "false", f"{P}/affinity": "c0: [c1]",
}  # fmt: skip


def test_creating_a_container_decodes_its_annotations_once(
    tmp_path: Path, decodes: list[str]
) -> None:
    rt = Runtime(policy(tmp_path))
    rt.create(guaranteed("g", 2000, annotations=ALL_OF_THEM))
    # Once for the policy's decision (wanted, hints, memory, affinities read its fields);
    # the engine's cpuset refresh (cpusets.py, hide-hyperthreads) reads its one key itself.
    assert decodes.count("c0") == 2


def test_a_bad_boolean_is_said_once_per_create(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rt = Runtime(policy(tmp_path))
    with caplog.at_level(logging.WARNING):
        rt.create(guaranteed("g", 2000, annotations={f"prefer-isolated-cpus.{P}": "maybe"}))
    said = [r for r in caplog.records if "prefer-isolated-cpus" in r.getMessage()]
    assert len(said) == 1 and "'maybe'" in said[0].getMessage()


def test_a_pod_without_annotations_gets_the_shared_default() -> None:
    assert preferences_of(*guaranteed("p", 1000)) is NO_PREFERENCES
