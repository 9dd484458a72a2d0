"""The kubelet DRA peer's build: per-version Go files chosen by build tags, and a version the
suite cannot build fails the test under CI, naming it (no Go needed to run these)."""

from __future__ import annotations

import re

import pytest

from tests.dra import kubeletbuild
from tests.dra.kubelet_peer import peer_binary
from tests.kube.gobuild import KUBERNETES_VERSIONS
from tests.kube.versions import NEWEST, OLDEST, VERSIONS_ENV, kube_versions

TAG_LINE = re.compile(r"^//go:build (.+)$", re.M)


@pytest.mark.parametrize(
    ("version", "tags"),
    [("v1.35.4", ("-tags", "getnode_noctx")), ("v1.36.3", ()), ("v1.37.2", ())],
)
def test_each_version_gets_the_getnode_variant_of_its_kubelet_api(
    version: str, tags: tuple[str, ...]
) -> None:
    assert kubeletbuild.build_tags(version) == tags


def test_exactly_one_getnode_variant_is_compiled_per_tag_set() -> None:
    """Each per-version file names the tag; main.go has none, so it builds everywhere."""
    constraints = {
        f.name: m.group(1) if (m := TAG_LINE.search(f.read_text())) else None
        for f in kubeletbuild.sources()
    }
    assert constraints == {
        "main.go": None,
        "node_ctx.go": "!getnode_noctx",
        "node_noctx.go": "getnode_noctx",
    }


def test_a_version_the_suite_does_not_build_fails_the_test_under_ci(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"kubelet-dra-peer v1\.34\.0 .*not one of"):
        peer_binary("v1.34.0")


def test_the_default_matrix_is_the_oldest_and_newest_supported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(VERSIONS_ENV, raising=False)
    assert kube_versions() == (OLDEST, NEWEST) == (KUBERNETES_VERSIONS[0], KUBERNETES_VERSIONS[-1])
    monkeypatch.setenv(VERSIONS_ENV, "v1.36.3")
    assert kube_versions() == ("v1.36.3",)
    monkeypatch.setenv(VERSIONS_ENV, "v1.99.0")
    with pytest.raises(ValueError, match=r"NRI_RESMGR_KUBE_VERSION=v1\.99\.0: not one of"):
        kube_versions()
