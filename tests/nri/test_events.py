"""Which events we subscribe to on which runtime."""

from __future__ import annotations

import pytest

from nri_resmgr._gen.nri.pkg.api.v1alpha1 import ConfigureRequest
from nri_resmgr.nri.events import runtime_nri_version, subscription_mask
from nri_resmgr.nri.handlers import runtime_info_from


@pytest.mark.parametrize(
    ("nri", "name", "version", "expected"),
    [
        ("v0.12.2", "containerd", "v2.3.0", (0, 12, 2)),
        ("", "containerd", "v1.7.20", (0, 0, 0)),
        ("", "containerd", "v2.1.4", (0, 0, 0)),
        ("", "containerd", "v2.2.0", (0, 10, 0)),
        ("(devel)", "cri-o", "1.34.1", (0, 10, 0)),
        ("0.0.0-unknown", "cri-o", "1.31.0", (0, 0, 0)),
        ("", "something", "", (0, 0, 0)),
    ],
)
def test_runtime_version_is_read_or_inferred(
    nri: str, name: str, version: str, expected: tuple[int, int, int]
) -> None:
    assert runtime_nri_version(nri, name, version) == expected


def test_bits_11_to_13_only_for_nri_0_10_and_later() -> None:
    assert subscription_mask((0, 6, 1)) & 0x3800 == 0
    assert subscription_mask((0, 6, 1)) & ~0x7FF == 0
    assert subscription_mask((0, 10, 0)) & 0x0800  # UPDATE_POD_SANDBOX
    assert subscription_mask((0, 12, 0)) & 0x2000 == 0  # never a validator


def test_zero_timeouts_from_old_runtimes_mean_defaults() -> None:
    info = runtime_info_from(ConfigureRequest(runtime_name="containerd", runtime_version="1.7.2"))
    assert (info.registration_timeout, info.request_timeout) == (5.0, 2.0)
    info = runtime_info_from(ConfigureRequest(request_timeout=1500, nri_version="v0.12.0"))
    assert info.request_timeout == 1.5
