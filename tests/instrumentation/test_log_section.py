"""The ``log`` section: per-source debug, the source prefix, klog headers, and keys declared
not applied exactly once."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from nri_resmgr import log as logconfig
from nri_resmgr.config.models import InstrumentationConfig, KlogConfig, LogConfig, TemplateSpec
from nri_resmgr.errors import ConfigError
from nri_resmgr.observability.setup import declare_not_applied


@pytest.fixture(autouse=True)
def clean_logging() -> Iterator[None]:
    logconfig.setup_logging("info")
    yield
    logconfig.configure(LogConfig(source=True))
    logconfig.setup_logging("info")


def test_debug_names_sources_in_our_and_upstream_spelling() -> None:
    logconfig.configure(LogConfig(debug=("dra,resource-manager", "nri:off")))
    assert logging.getLogger("nri_resmgr.dra.kubeletplugin.plugin").isEnabledFor(logging.DEBUG)
    assert logging.getLogger("nri_resmgr.resmgr.manager").isEnabledFor(logging.DEBUG)
    assert not logging.getLogger("nri_resmgr.nri.service").isEnabledFor(logging.DEBUG)
    assert not logging.getLogger("nri_resmgr.kube.watch").isEnabledFor(logging.DEBUG)
    # A new section replaces the old one: dra is back at the base level.
    logconfig.configure(LogConfig(debug=("none",)))
    assert not logging.getLogger("nri_resmgr.dra.kubeletplugin.plugin").isEnabledFor(logging.DEBUG)


def test_debug_all_turns_on_every_logger_of_ours() -> None:
    logconfig.configure(LogConfig(debug=("all",)))
    assert logging.getLogger("nri_resmgr.kube.watch").isEnabledFor(logging.DEBUG)
    assert not logging.getLogger("httpx").isEnabledFor(logging.DEBUG)


def test_a_debug_entry_with_a_bad_state_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"spec.log.debug: 'dra:maybe': state must be on or off"):
        logconfig.parse_debug(("dra:maybe",))


def test_source_and_skip_headers_shape_the_line() -> None:
    record = logging.LogRecord("nri_resmgr.x", logging.INFO, "f", 1, "hello", None, None)
    handler = logging.getLogger().handlers[0]
    logconfig.configure(LogConfig(source=True, klog=KlogConfig(skip_headers=True)))
    assert handler.format(record) == "nri_resmgr.x: hello"
    logconfig.configure(LogConfig(source=False, klog=KlogConfig(skip_headers=True)))
    assert handler.format(record) == "hello"
    logconfig.configure(LogConfig(source=False))
    assert handler.format(record).endswith("INFO    hello")


def test_keys_without_effect_are_declared_once_each(caplog: pytest.LogCaptureFixture) -> None:
    spec = TemplateSpec(
        instrumentation=InstrumentationConfig(
            sampling_rate_per_million=5, tracing_collector="otlp-http"
        )
    )
    with caplog.at_level(logging.WARNING):
        declare_not_applied(spec)
        declare_not_applied(spec)
        logconfig.configure(LogConfig(klog=KlogConfig(v=3)))
    lines = [r.getMessage() for r in caplog.records]
    assert (
        lines.count(
            "spec.instrumentation.samplingRatePerMillion: accepted, not applied by nri-resmgr 0.1.0"
        )
        == 1
    )
    assert any(line.startswith("spec.instrumentation.tracingCollector: accepted") for line in lines)
    assert any(line.startswith("spec.log.klog.v: accepted, not applied") for line in lines)
