"""Container affinities, as nri-plugins' topology-aware weighs pools with them.

A pod says which of its containers want (``resource-policy.nri.io/affinity``) or shun
(``resource-policy.nri.io/anti-affinity``) which others, in one of two YAML notations
(nri-plugins ``pkg/resmgr/cache/affinity.go``):

- simple, ``c0: [c1, c2]``: containers of the same pod, made symmetric (c1 and c2 also get
  an affinity on c0), weight 1 (-1 for anti-affinity);
- full, ``c0: [{scope: EXPR, match: EXPR, weight: N}]``: any container ``scope`` selects
  (default: the same pod) that ``match`` selects; weight default 1, clamped to ±1000, and
  negated under the anti-affinity key.

With ``colocatePods`` / ``colocateNamespaces``, a container without explicit affinities gets
an implicit one of weight 10 on the containers of its pod / namespace (``affinity.go``
registerImplicitAffinities). Every affinity adds its weight to the pool of each matching
container already placed (``calculatePoolAffinities``); ``pool_score`` spreads those weights
over the tree (``pools.go`` affinityScore).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, get_args

import attrs
import yaml

from nri_resmgr.config.expressions import evaluate, key_error
from nri_resmgr.config.models import Expression, ExprOperator, TopologyAwareSpec
from nri_resmgr.policies.allocations import Allocation
from nri_resmgr.policies.annotations import DOMAIN, AnnotationError
from nri_resmgr.policies.subject import container_subject
from nri_resmgr.policies.topology_aware.preferences import preferences_of
from nri_resmgr.resmgr.model import Container, Pod
from nri_resmgr.shorten import shorten

log = logging.getLogger(__name__)

AFFINITY_KEY = f"{DOMAIN}/affinity"
ANTI_AFFINITY_KEY = f"{DOMAIN}/anti-affinity"
WEIGHT_CUTOFF = 1000
DEFAULT_WEIGHT = 1
IMPLICIT_WEIGHT = 10
DILUTION = 0.75
"""nri-plugins' Q: an affinity on a pool counts 0.75**k in a pool k links away."""

_OPERATORS: frozenset[str] = frozenset(get_args(ExprOperator))
_ONE_VALUE = {"Equals", "NotEqual", "Matches", "MatchesNot"}
_NO_VALUE = {"Exists", "NotExist", "AlwaysTrue"}
_ALWAYS = Expression("", "AlwaysTrue")


class AffinityError(AnnotationError):
    """An affinity annotation that cannot be read; the message names the problem."""


@attrs.frozen
class Affinity:
    scope: Expression
    """Which containers are candidates."""
    match: Expression
    """Which candidates the affinity is on."""
    weight: int
    """Positive pulls towards their pools, negative pushes away."""


def pod_scope(pod: Pod) -> Expression:
    # As nri-plugins: the pod's name only, not its namespace.
    return Expression("pod/name", "Equals", (pod.name,))


def container_affinities(pod: Pod, container: Container) -> list[Affinity]:
    """The explicit affinities of ``container`` from its pod's annotations."""
    prefs = preferences_of(pod, container)
    out: list[Affinity] = []
    for key, value, sign in ((AFFINITY_KEY, prefs.affinity, 1),
                             (ANTI_AFFINITY_KEY, prefs.anti_affinity, -1)):  # fmt: skip
        if value is not None:
            out.extend(_parse(pod, key, value, sign).get(container.name, []))
    return out


def implicit_affinities(pod: Pod, colocate_pods: bool, colocate_namespaces: bool) -> list[Affinity]:
    out = []
    if colocate_pods:
        out.append(Affinity(pod_scope(pod), _ALWAYS, IMPLICIT_WEIGHT))
    if colocate_namespaces:
        match = Expression("namespace", "Equals", (pod.namespace,))
        out.append(Affinity(_ALWAYS, match, IMPLICIT_WEIGHT))
    return out


def placed_weights(
    cid: str, pod: Pod, container: Container, spec: TopologyAwareSpec, placed: Iterable[Allocation]
) -> dict[str, int] | None:
    """Per pool name, the weight of the container's affinities (explicit, else the implicit
    colocate ones) on the containers placed there; None when it has none. An unreadable
    annotation is logged, naming the problem, and the container placed without it."""
    if not pod.annotations and not (spec.colocate_pods or spec.colocate_namespaces):
        return None  # the common case: neither explicit nor implicit affinities
    try:
        affinities = container_affinities(pod, container)
    except AffinityError as e:
        log.error("%s/%s: ignoring affinities: %s", pod.namespace, pod.name, shorten(str(e)))
        affinities = []
    if not affinities:
        affinities = implicit_affinities(pod, spec.colocate_pods, spec.colocate_namespaces)
    if not affinities:
        return None
    return pool_weights(affinities, cid, placed)


def pool_weights(
    affinities: list[Affinity], container_id: str, placed: Iterable[Allocation]
) -> dict[str, int]:
    """Per pool name: the summed weight of the affinities on the containers placed there."""
    weights: dict[str, int] = {}
    if not affinities:
        return weights
    for a in placed:
        if a.container_id == container_id or a.pod is None or a.container is None:
            continue  # self-affinity means nothing
        subject = container_subject(a.pod, a.container)
        w = sum(
            x.weight
            for x in affinities
            if evaluate(x.scope, subject) and evaluate(x.match, subject)
        )
        if w:
            weights[a.pool] = weights.get(a.pool, 0) + w
    return weights


def pool_score(
    weights: Mapping[int, int], ancestors: list[int], below: Iterable[tuple[int, int]]
) -> float:
    """nri-plugins' affinityScore: the weights on the pool's ancestors (k links up) and on its
    subtree (``below``: (pool, links down)), each diluted by DILUTION**k."""
    score = 0.0
    q = DILUTION
    for a in ancestors:
        score += q * weights.get(a, 0)
        q *= DILUTION
    for pool, links in below:
        score += DILUTION**links * weights.get(pool, 0)
    return score


# -- parsing --------------------------------------------------------------------------------


def _parse(pod: Pod, key: str, value: str, sign: int) -> dict[str, list[Affinity]]:
    try:
        data = yaml.safe_load(value)
    except yaml.YAMLError as e:
        raise AffinityError(f"{key}: not YAML: {e}") from e
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise AffinityError(f"{key}: expected a map of container names, got {value!r}")
    if all(_is_names(v) for v in data.values()):
        return _simple(pod, data, sign)
    return {
        name: [_full(pod, key, name, i, x, sign) for i, x in enumerate(_items(key, name, v))]
        for name, v in data.items()
    }


def _is_names(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _items(key: str, name: str, v: Any) -> list[Any]:
    if not isinstance(v, list):
        raise AffinityError(f"{key}: {name}: expected a list of affinities, got {v!r}")
    return v


def _simple(pod: Pod, data: dict[str, list[str]], sign: int) -> dict[str, list[Affinity]]:
    # Symmetric: "a: [b]" gives a an affinity on b and b one on a.
    others: dict[str, set[str]] = {}
    for name, names in data.items():
        for other in names:
            others.setdefault(name, set()).add(other)
            others.setdefault(other, set()).add(name)
    out = {}
    for name, peers in others.items():
        values = tuple(sorted(peers))
        match = Expression("name", "Equals" if len(values) == 1 else "In", values)
        out[name] = [Affinity(pod_scope(pod), match, sign * DEFAULT_WEIGHT)]
    return out


def _full(pod: Pod, key: str, name: str, i: int, item: Any, sign: int) -> Affinity:
    where = f"{key}: {name}[{i}]"
    if (
        not isinstance(item, dict)
        or "match" not in item
        or set(item) - {"scope", "match", "weight"}
    ):
        raise AffinityError(
            f"{where}: expected {{scope, match, weight}} with a match, got {item!r}"
        )
    weight = item.get("weight", 0)
    if not isinstance(weight, int) or isinstance(weight, bool):
        raise AffinityError(f"{where}.weight: expected an integer, got {weight!r}")
    weight = sign * DEFAULT_WEIGHT if weight == 0 else sign * weight
    weight = max(-WEIGHT_CUTOFF, min(WEIGHT_CUTOFF, weight))
    scope = _expression(f"{where}.scope", item["scope"]) if "scope" in item else pod_scope(pod)
    return Affinity(scope, _expression(f"{where}.match", item["match"]), weight)


def _expression(where: str, raw: Any) -> Expression:
    if not isinstance(raw, dict):
        raise AffinityError(f"{where}: expected {{key, operator, values}}, got {raw!r}")
    op = raw.get("operator")
    if op not in _OPERATORS:
        raise AffinityError(f"{where}.operator: unknown operator {op!r}")
    values = raw.get("values") or []
    if not _is_names(values):
        raise AffinityError(f"{where}.values: expected a list of strings, got {values!r}")
    if op in _ONE_VALUE and len(values) != 1:
        raise AffinityError(f"{where}: operator {op} takes exactly one value")
    if op in _NO_VALUE and values:
        raise AffinityError(f"{where}: operator {op} takes no values")
    key = raw.get("key", "")
    if not isinstance(key, str):
        raise AffinityError(f"{where}.key: expected a string, got {key!r}")
    problem = key_error(key) if op != "AlwaysTrue" else None
    if problem:
        raise AffinityError(f"{where}.key: {problem} in {key!r}")
    return Expression(key, op, tuple(values))
