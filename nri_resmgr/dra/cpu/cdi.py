"""Per-claim transient CDI specs: the container edits that tell NRI a container is a claim's.

One file per claim, ``<cdi dir>/<driver>-cpu_claim-<uid>.json`` (the CDI library's transient
spec name for vendor ``<driver>``, class ``cpu``, id ``claim-<uid>``), holding one device
``claim-<uid>`` whose only edits are the env vars ``NRI_DRA_CPUS_<uid>=<cpuset>`` and
``NRI_DRA_KEY_<uid>=<key>``. containerd injects them for the CDI id kubelet passes at
CreateContainer, and the policy sees them in the NRI container's env. The key is random per
claim (``new_claim_key``): a pod spec can set the CPU variable of any claim whose UID it can
read, but not the key, which only this file (root's, on the host) and the state file hold.
``cdiVersion`` 0.6.0: env-only specs need 0.3.0, and containerd 2.0-2.2 refuse versions
newer than their CDI library knows (1.1.0 fails before 2.3).

The file name is made from the claim UID, which must be a Kubernetes UID
(``kubeletplugin.claims.CLAIM_UID``): nothing else reaches a path. Files are written, checked
and removed through ``kubeletplugin.files`` (checked directory, random temporary name, no
symlink followed): the CDI directory is shared with every other CDI producer on the node.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.dra.kubeletplugin.claims import uid_problem
from nri_resmgr.dra.kubeletplugin.files import is_regular_file, remove_file, write_file
from nri_resmgr.errors import ResmgrError
from nri_resmgr.resmgr.model import claim_env_name, claim_key_name

CDI_VERSION = "0.6.0"
CDI_CLASS = "cpu"
CDI_DIR_MODE = 0o755
"""As the CDI directory is usually made: the runtime reads it."""


def new_claim_key() -> str:
    """128 random bits: what proves a container's claim variables came from its CDI spec."""
    return secrets.token_hex(16)


class CdiError(ResmgrError):
    """A CDI spec cannot be written or removed; the message names the file and cause."""


class CdiWriter:
    def __init__(self, directory: str | Path, driver: str) -> None:
        self.directory = Path(directory)
        self.driver = driver
        self.kind = f"{driver}/{CDI_CLASS}"

    def device_name(self, claim_uid: str) -> str:
        return f"claim-{claim_uid}"

    def device_id(self, claim_uid: str) -> str:
        return f"{self.kind}={self.device_name(claim_uid)}"

    def path(self, claim_uid: str) -> Path:
        problem = uid_problem(claim_uid)
        if problem:
            raise CdiError(f"no CDI spec for claim {problem}")
        return self.directory / f"{self.driver}-{CDI_CLASS}_{self.device_name(claim_uid)}.json"

    def spec(self, claim_uid: str, cpus: CpuSet, key: str) -> dict[str, object]:
        return {
            "cdiVersion": CDI_VERSION,
            "kind": self.kind,
            "devices": [
                {
                    "name": self.device_name(claim_uid),
                    "containerEdits": {
                        "env": [
                            f"{claim_env_name(claim_uid)}={cpus}",
                            f"{claim_key_name(claim_uid)}={key}",
                        ]
                    },
                }
            ],
        }

    def write(self, claim_uid: str, cpus: CpuSet, key: str) -> Path:
        path = self.path(claim_uid)
        data = json.dumps(self.spec(claim_uid, cpus, key), indent=1).encode()
        try:
            # No fsync: the CDI directory is tmpfs (/var/run), and a spec lost with the
            # machine is rewritten from the state file at start (``ClaimPreparer.restore``).
            write_file(path.parent, path.name, data, 0o644, durable=False, dir_mode=CDI_DIR_MODE)
        except OSError as e:
            raise CdiError(f"cannot write CDI spec {path}: {e.strerror or e}") from e
        return path

    def remove(self, claim_uid: str) -> None:
        path = self.path(claim_uid)
        try:
            remove_file(path.parent, path.name)
        except OSError as e:
            raise CdiError(f"cannot remove CDI spec {path}: {e.strerror or e}") from e

    def exists(self, claim_uid: str) -> bool:
        path = self.path(claim_uid)
        return is_regular_file(path.parent, path.name)
