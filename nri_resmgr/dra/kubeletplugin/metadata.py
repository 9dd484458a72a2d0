"""Device metadata for workloads (KEP-5304): a prepared claim's device attributes, as a file in
the container, so a workload (KubeVirt's virt-launcher) reads its devices without sysfs.

What ``k8s.io/dynamic-resource-allocation/kubeletplugin`` v0.37 does with
``EnableDeviceMetadata`` (``metadata.go``), and where we differ:

- One file per claim and base request (``req`` of ``req/sub``), mounted read-only at
  ``/var/run/kubernetes.io/dra-device-attributes/resourceclaims/<claim>/<request>/<driver>-metadata.json``
  (a claim made from a template: ``resourceclaimtemplates/<pod's claim name>/...``, the name
  from the claim's ``resource.kubernetes.io/pod-claim-name`` annotation).
- The file is a JSON stream of one ``DeviceMetadata`` object per API version, newest first
  (``metadata.resource.k8s.io/v1beta1``, then ``v1alpha1``, which 1.36 readers know), each
  followed by a newline: ``metadata`` {name, namespace, uid, generation 1}, ``podClaimName``
  for a template's claim, ``requests`` [{name: the result's request (``req/sub`` kept),
  devices: [{driver, pool, name, attributes}]}], every prepared device of the request (one
  the driver gave no attributes has none), attributes in the ResourceSlice's JSON form plus
  ``ints`` for a list of numbers. A reader that takes the whole file as one JSON document
  trips on the second object; upstream's ``devicemetadata`` package, ``jq -s`` and any
  streaming decoder read it (the Go helper writes the same stream when a driver names two
  versions; dra-driver-cpu names only v1beta1).
- The mount is a CDI device of kind ``<driver>/metadata`` named ``<claim uid>_<request>`` in
  ``<cdi dir>/<driver>_metadata_<uid>_<request>.json``; its id is added to the first device
  of the request in the answer to kubelet, so exactly the containers of that request get it.
- On the host the file is ``<plugin dir>/dra-device-metadata/<uid>_<request>.json`` (the Go
  helper nests ``<ns>_<name>/<request>/metadata.json``; a flat name keyed by the checked UID
  needs no directory tree to remove). Unprepare removes both files.
- Files go through ``files`` (checked directories, no symlinks followed, atomic renames).

``tests/runtime/test_dra_metadata.py`` reads the file inside a container that the real
containerd started with the CDI ids kubelet's own DRA code got from us, with upstream's
``devicemetadata`` package (validation on).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nri_resmgr.dra.kubeletplugin.claims import AllocatedClaim, ClaimRef, base_request, uid_problem
from nri_resmgr.dra.kubeletplugin.devices import MetadataValue
from nri_resmgr.dra.kubeletplugin.driver import PreparedDevice
from nri_resmgr.dra.kubeletplugin.files import remove_matching, write_file
from nri_resmgr.dra.kubeletplugin.slice_spec import attribute_json
from nri_resmgr.errors import ResmgrError

CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"
METADATA_GROUP = "metadata.resource.k8s.io"
METADATA_VERSIONS = ("v1beta1", "v1alpha1")
"""Written newest first; readers take the first version they know."""
HOST_SUBDIR = "dra-device-metadata"
CDI_VERSION = "0.5.0"
"""The least version this spec needs (a device name may start with a digit since 0.5.0), as
the Go helper computes it: runtimes with an older CDI library still read it."""
FILE_MODE = 0o644
"""The container's user reads it (the bind mount keeps the host file's mode)."""
DIR_MODE = 0o755


class MetadataError(ResmgrError):
    """A metadata file or its CDI spec cannot be written or removed."""


def container_path(driver: str, claim: AllocatedClaim, request: str) -> str:
    if claim.pod_claim_name:
        where = f"resourceclaimtemplates/{claim.pod_claim_name}"
    else:
        where = f"resourceclaims/{claim.ref.name}"
    return f"{CONTAINER_DIR}/{where}/{request}/{driver}-metadata.json"


def document(
    driver: str, claim: AllocatedClaim, request: str, devices: Sequence[PreparedDevice]
) -> list[dict[str, Any]]:
    """The ``DeviceMetadata`` objects of one request's file, newest version first."""
    body: dict[str, Any] = {
        "metadata": {
            "name": claim.ref.name,
            "namespace": claim.ref.namespace,
            "uid": claim.ref.uid,
            "generation": 1,
        },
    }
    if claim.pod_claim_name:
        body["podClaimName"] = claim.pod_claim_name
    body["requests"] = [
        {
            "name": request,
            "devices": [_device(driver, d) for d in devices],
        }
    ]
    return [
        {"kind": "DeviceMetadata", "apiVersion": f"{METADATA_GROUP}/{version}", **body}
        for version in METADATA_VERSIONS
    ]


def _device(driver: str, device: PreparedDevice) -> dict[str, Any]:
    out: dict[str, Any] = {"driver": driver, "pool": device.pool, "name": device.device}
    if device.metadata:
        out["attributes"] = {k: _value_json(v) for k, v in device.metadata.items()}
    return out


def _value_json(value: MetadataValue) -> dict[str, Any]:
    if isinstance(value, tuple):
        return {"ints": list(value)}
    return attribute_json(value)


class MetadataWriter:
    def __init__(self, driver: str, plugin_dir: Path, cdi_dir: Path) -> None:
        self.driver = driver
        self.host_dir = plugin_dir / HOST_SUBDIR
        self.cdi_dir = cdi_dir
        self.kind = f"{driver}/metadata"

    def write(self, claim: AllocatedClaim, devices: Sequence[PreparedDevice]) -> dict[str, str]:
        """Writes the file of every request of ``devices``; base request -> its CDI id. As the
        Go helper, a device without attributes is listed too (its name and pool are news to
        the workload)."""
        by_request: dict[str, list[PreparedDevice]] = {}
        for device in devices:
            for request in device.requests:
                by_request.setdefault(request, []).append(device)
        ids: dict[str, str] = {}
        for request, devs in by_request.items():
            base = base_request(request)
            ids[base] = self._write_request(claim, base, request, devs)
        return ids

    def _write_request(
        self, claim: AllocatedClaim, base: str, request: str, devices: Sequence[PreparedDevice]
    ) -> str:
        uid = claim.ref.uid
        host_name = f"{uid}_{base}.json"
        stream = "".join(
            json.dumps(obj, indent=2) + "\n"
            for obj in document(self.driver, claim, request, devices)
        )
        device_name = f"{uid}_{base}"
        spec = {
            "cdiVersion": CDI_VERSION,
            "kind": self.kind,
            "devices": [
                {
                    "name": device_name,
                    "containerEdits": {
                        "mounts": [
                            {
                                "hostPath": str(self.host_dir / host_name),
                                "containerPath": container_path(self.driver, claim, base),
                                "options": ["ro", "bind"],
                            }
                        ]
                    },
                }
            ],
        }
        try:
            write_file(self.host_dir, host_name, stream.encode(), FILE_MODE, durable=False,
                       dir_mode=DIR_MODE)  # fmt: skip
            write_file(self.cdi_dir, self._cdi_name(uid, base), json.dumps(spec, indent=1).encode(),
                       FILE_MODE, durable=False, dir_mode=DIR_MODE)  # fmt: skip
        except OSError as e:
            raise MetadataError(
                f"cannot write device metadata of claim {claim.ref.describe()} request {base}: "
                f"{e.strerror or e}"
            ) from e
        return f"{self.kind}={device_name}"

    def remove(self, ref: ClaimRef) -> None:
        """Removes every metadata file and CDI spec of the claim (none: nothing to do)."""
        if uid_problem(ref.uid):
            return
        try:
            remove_matching(self.host_dir, f"{ref.uid}_", ".json")
            remove_matching(self.cdi_dir, f"{self.driver}_metadata_{ref.uid}_", ".json")
        except OSError as e:
            raise MetadataError(
                f"cannot remove device metadata of claim {ref.describe()}: {e.strerror or e}"
            ) from e

    def _cdi_name(self, uid: str, request: str) -> str:
        return f"{self.driver}_metadata_{uid}_{request}.json"


def inject(
    devices: Sequence[PreparedDevice], ids: Mapping[str, str]
) -> list[tuple[PreparedDevice, tuple[str, ...]]]:
    """Each device with the CDI ids kubelet gets for it: the metadata id of a request is added
    to the first device of that request only (every container of the request gets it)."""
    done: set[str] = set()
    out = []
    for device in devices:
        extra = []
        for request in device.requests:
            base = base_request(request)
            if base in ids and base not in done:
                extra.append(ids[base])
                done.add(base)
        out.append((device, device.cdi_ids + tuple(extra)))
    return out
