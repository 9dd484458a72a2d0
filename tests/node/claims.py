"""DRA claims on the guest's cluster, read where each link lives: the claim from the API
server, the daemon's CDI spec from the guest's /var/run/cdi (where containerd reads it), the
container's environment from its /proc/<pid>/environ."""

from __future__ import annotations

import json
from typing import Any

from tests.node.cluster import Cluster, parse_cpus

CDI_DIR = "/var/run/cdi"


def manifest(kind: str, name: str, spec: dict[str, Any]) -> str:
    meta = {"name": name, "namespace": "default"}
    return json.dumps({"apiVersion": "resource.k8s.io/v1", "kind": kind, "metadata": meta,
                       "spec": spec})  # fmt: skip


def cdi_spec(cluster: Cluster, uid: str) -> tuple[str, dict[str, Any]]:
    """The claim's CDI spec file in the guest, and its content (the claim's device metadata
    has a CDI spec of its own, ``<driver>_metadata_<uid>_<request>.json``)."""
    names = cluster.guest.sh(f"ls {CDI_DIR}").out.split()
    (name,) = [n for n in names if n.endswith(f"-cpu_claim-{uid}.json")]
    return name, json.loads(cluster.guest.read(f"{CDI_DIR}/{name}"))


def spec_env(spec: dict[str, Any]) -> dict[str, str]:
    edits = [spec.get("containerEdits", {})]
    edits += [d.get("containerEdits", {}) for d in spec.get("devices", [])]
    return dict(e.split("=", 1) for edit in edits for e in edit.get("env", []))


def claim_env(env: dict[str, str], uid: str) -> dict[str, str]:
    """The container's variables that name the claim (its CPUs and key variables)."""
    token = uid.replace("-", "_")
    return {k: v for k, v in env.items() if token in k}


def the_claims_cpus_var(env: dict[str, str], uid: str) -> frozenset[int]:
    (cpus,) = [v for k, v in claim_env(env, uid).items() if k.startswith("NRI_DRA_CPUS_")]
    return parse_cpus(cpus)


def released(cluster: Cluster, claim_name: str, spec_name: str) -> bool:
    claim = cluster.try_get("resourceclaim", claim_name, namespace="default")
    if claim is None or claim.get("status", {}).get("reservedFor"):
        return False
    return spec_name not in cluster.guest.sh(f"ls {CDI_DIR}").out.split()
