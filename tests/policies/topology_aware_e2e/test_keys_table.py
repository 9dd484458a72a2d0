"""The topology-aware table of docs/policies.md agrees with the code, covers every
TopologyAwarePolicy field, and no option is a silent no-op."""

from __future__ import annotations

import pytest

from nri_resmgr.config.models import PolicySpec, TopologyAwareSpec
from nri_resmgr.config.notapplied import leaf_paths
from tests.policies.topology_aware_e2e import keys_table


@pytest.fixture(scope="module")
def found() -> tuple[dict[str, str], dict[str, str]]:
    return keys_table.statuses()


def test_every_topology_aware_field_is_probed() -> None:
    # The common sections (log, instrumentation, agent, control, dra) are the same for every
    # policy and are covered where those sections are implemented; the resource
    # constraints and the policy's own options are probed here.
    common = set(leaf_paths(PolicySpec))
    # A list of objects is probed whole (``spec.cpuClasses``), not field by field.
    own = {p.split("[]")[0] for p in leaf_paths(TopologyAwareSpec) if p not in common}
    constraints = {p for p in common if p.startswith(("spec.reservedResources.",
                                                      "spec.availableResources."))}  # fmt: skip
    assert {f"spec.{k}" for k in keys_table.PROBES} == own | constraints


def test_policies_page_table_matches_the_code(found: tuple[dict[str, str], dict[str, str]]) -> None:
    expected = keys_table.render(*found)
    actual = keys_table.page_block(keys_table.PAGE.read_text())
    assert actual == expected, (
        "docs/policies.md topology-aware table is stale: "
        "python -m tests.policies.topology_aware_e2e.keys_table --write"
    )


def test_applied_annotations_are_read(found: tuple[dict[str, str], dict[str, str]]) -> None:
    # Those the policy read on main, as a floor: a change that stops reading one fails.
    _, anns = found
    applied = {a for a, v in anns.items() if v == "applied"}
    assert {"cpu.preserve", "memory.preserve", "prefer-isolated-cpus", "prefer-shared-cpus",
            "prefer-reserved-cpus"} <= applied  # fmt: skip


def test_no_option_is_a_silent_no_op(found: tuple[dict[str, str], dict[str, str]]) -> None:
    options, _ = found
    assert list(keys_table.iter_silent(options)) == []
