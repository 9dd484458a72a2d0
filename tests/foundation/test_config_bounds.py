"""Hostile configuration values: bounded depth, bounded messages, cpusets parsed in ranges."""

from __future__ import annotations

from typing import Any

import pytest

from nri_resmgr.agent.status import MAX_STATUS_ERROR_TEXT, failure_entry
from nri_resmgr.config.documents import load_document
from nri_resmgr.config.values import MAX_CPU_VALUE
from nri_resmgr.cpuset import MAX_TEXT, CpuSet, CpuSetError, merge_ranges
from nri_resmgr.errors import ConfigError


def doc(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "config.nri/v1alpha1", "kind": "TemplatePolicy",
            "metadata": {"name": "default"},
            "spec": {"reservedResources": {"cpu": "750m"}, **spec}}  # fmt: skip


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def test_free_form_fields_nested_too_deep_are_refused_with_their_path() -> None:
    load_document(doc(control={"rdt": {"options": nested(10)}}))  # a plausible depth loads
    with pytest.raises(ConfigError, match=r"spec\.control\.rdt\.options\.a\.a.*nested deeper"):
        load_document(doc(control={"rdt": {"options": nested(900)}}))


def test_free_form_fields_with_too_many_values_are_refused() -> None:
    wide = {f"k{i}": i for i in range(30_000)}
    with pytest.raises(ConfigError, match="more than 20000 values"):
        load_document(doc(control={"blockio": {"classes": wide}}))


def test_a_huge_bad_value_is_quoted_short() -> None:
    huge = "9" * 600_000
    with pytest.raises(ConfigError) as caught:
        load_document(doc(instrumentation={"reportPeriod": huge}))
    message = str(caught.value)
    assert "reportPeriod" in message and "600000 characters" in message
    assert len(message) < 2_000
    with pytest.raises(ConfigError) as caught:
        load_document(doc(**{"x" * 100_000: 1}))
    assert len(str(caught.value)) < 500


def test_status_errors_are_capped_in_count_and_length() -> None:
    entry = failure_entry(1, [f"spec.k{i}: unknown key" for i in range(1000)])
    assert entry["errors"].endswith("; … and 990 more")
    assert len(failure_entry(1, ["e" * 10**6])["errors"]) <= MAX_STATUS_ERROR_TEXT


def test_an_overlong_cpu_value_is_refused_before_it_is_parsed() -> None:
    value = "cpuset:" + ",".join(["0-65536"] * 2000)  # inside the CRD's pattern
    assert len(value) > MAX_CPU_VALUE
    with pytest.raises(ConfigError, match=f"longer than {MAX_CPU_VALUE}"):
        load_document(doc(reservedResources={"cpu": value}))


def test_cpuset_text_longer_than_the_cap_is_refused() -> None:
    with pytest.raises(CpuSetError, match="more than"):
        CpuSet.parse("0," * (MAX_TEXT // 2 + 1))


def test_cpuset_ranges_merge_without_listing_their_members() -> None:
    assert merge_ranges([range(0, 65537)] * 5000) == [range(0, 65537)]
    assert merge_ranges([range(7, 8), range(0, 4), range(2, 6), range(6, 7)]) == [range(0, 8)]
    assert merge_ranges([range(5, 6), range(0, 2)]) == [range(0, 2), range(5, 6)]
    assert str(CpuSet.parse(",".join(["0-65536"] * 2000))) == "0-65536"
    assert str(CpuSet.parse("0-3,2-5,7,6,10")) == "0-7,10"


def test_cpuset_errors_quote_the_list_short() -> None:
    with pytest.raises(CpuSetError) as caught:
        CpuSet.parse("1," * 10_000 + "x")
    assert len(str(caught.value)) < 300
