"""Which config CR applies to this node: pure rules, no I/O.

In the config namespace, for the active policy's kind: ``node.<NODE_NAME>`` always wins; else
``group.<G>`` where G is the value of the Node's group label; else ``default``. A config is
identified by (UID, generation): a CR recreated under the same name has a new UID, a spec
edit bumps the generation, and a status or metadata edit changes neither.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import attrs

from nri_resmgr.config.models import SPEC_KINDS
from nri_resmgr.errors import ConfigError
from nri_resmgr.kube.client import KubeObject

log = logging.getLogger(__name__)

DEFAULT_CR = "default"
# Labels older nri-plugins releases read the group from; still honoured, with a warning.
DEPRECATED_GROUP_LABELS = ("group.config.nri", "resource-policy.nri.io/group")


@attrs.frozen
class GroupChoice:
    """The group a node belongs to, and the deprecated label it came from, if any."""

    group: str | None
    deprecated_label: str | None = None

    @property
    def cr_name(self) -> str:
        return group_cr_name(self.group)


@attrs.frozen
class ConfigKey:
    """What makes two sightings of a config CR the same configuration."""

    uid: str
    generation: int

    @classmethod
    def of(cls, obj: KubeObject) -> ConfigKey:
        meta = obj.get("metadata") or {}
        generation = meta.get("generation")
        return cls(str(meta.get("uid") or ""), generation if isinstance(generation, int) else 0)


def kind_for_policy(policy_name: str) -> str:
    """The config CR kind that configures ``policy_name``."""
    for kind, cls in SPEC_KINDS.items():
        if cls.policy_name == policy_name:
            return kind
    known = ", ".join(sorted(cls.policy_name for cls in SPEC_KINDS.values()))
    raise ConfigError(f"--policy: unknown policy {policy_name!r} (expected one of {known})")


def node_cr_name(node_name: str) -> str:
    return f"node.{node_name}"


def group_cr_name(group: str | None) -> str:
    return f"group.{group}" if group else DEFAULT_CR


def choose_group(
    labels: Mapping[str, str],
    group_label: str,
    deprecated_labels: Sequence[str] = DEPRECATED_GROUP_LABELS,
) -> GroupChoice:
    """The group named by ``group_label``, else by the first deprecated label that is set.

    An empty label value counts as unset, so ``config.nri/group=""`` selects ``default``.
    """
    if labels.get(group_label):
        return GroupChoice(labels[group_label])
    for label in deprecated_labels:
        if label != group_label and labels.get(label):
            return GroupChoice(labels[label], deprecated_label=label)
    return GroupChoice(None)


def labels_of(node: KubeObject | None) -> dict[str, str]:
    if node is None:
        return {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()}


def name_of(obj: KubeObject) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def effective_cr(node_cr: KubeObject | None, group_cr: KubeObject | None) -> KubeObject | None:
    """The node CR if there is one, else the group (or default) CR, else nothing."""
    return node_cr if node_cr is not None else group_cr


def warn_deprecated(choice: GroupChoice, group_label: str) -> None:
    if choice.deprecated_label:
        log.warning(
            "node label %s=%s is deprecated: label the node %s=%s instead",
            choice.deprecated_label, choice.group, group_label, choice.group,
        )  # fmt: skip
