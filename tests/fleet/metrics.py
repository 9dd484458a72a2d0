"""The API server's own account of what the agents cost: its /metrics, scraped and differenced.

Request counts come from ``apiserver_request_total`` (by verb, resource, subresource, code).
That counter moves when a request ends, so a watch still open is not in it yet: watches
opened in a window are the ended ones plus the change in ``apiserver_longrunning_requests``
(the watches open now). Only the resources the agents touch are counted; the harness'
own requests in a window (a config change) are subtracted by the caller.

A watch the server ends on its own (the stream closes cleanly, counted with code 200) shows
in the watch cache's counters: ``apiserver_terminated_watchers_total`` (a watcher whose
buffer stayed full past the dispatcher's time budget, closed as unresponsive) and
``apiserver_watch_cache_initializations_total`` (the cache re-listed from etcd, which ends
every watch on that resource). ``server_closed_watches`` reads both per resource.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping

import httpx
from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]
Samples = dict[tuple[str, Labels], float]

AGENT_RESOURCES = frozenset(
    {"nodes", "topologyawarepolicies", "resourceslices", "noderesourcetopologies", "events"}
)
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE", "APPLY", "CREATE", "UPDATE"})
READING = frozenset({"GET", "LIST"})


def scrape(client: httpx.Client, path: str = "/metrics") -> Samples:
    response = client.get(path)
    response.raise_for_status()
    return parse(response.text)


def parse(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def delta(after: Samples, before: Samples) -> Samples:
    """What counters gained between two scrapes (a gauge: its change)."""
    return {key: value - before.get(key, 0.0) for key, value in after.items()}


def select(samples: Samples, name: str, **wanted: str) -> Iterable[tuple[dict[str, str], float]]:
    for (sample, labels), value in samples.items():
        if sample != name:
            continue
        found = dict(labels)
        if all(found.get(k) == v for k, v in wanted.items()):
            yield found, value


RequestKey = tuple[str, str, str, str]
"""(verb, resource, subresource, code)."""


def requests(window: Samples, resources: frozenset[str] = AGENT_RESOURCES) -> dict[RequestKey, int]:
    """Requests in a window by verb/resource/subresource/code; watches counted when opened."""
    counts: dict[RequestKey, int] = defaultdict(int)
    for labels, value in select(window, "apiserver_request_total"):
        if labels.get("resource") in resources:
            key = (labels["verb"], labels["resource"], labels.get("subresource", ""),
                   labels.get("code", ""))  # fmt: skip
            counts[key] += round(value)
    # Watches still open at the end of the window (code "open"), less those open at its
    # start: those ended in it, so apiserver_request_total counted them, opened before.
    for labels, value in select(window, "apiserver_longrunning_requests"):
        if labels.get("resource") in resources and labels.get("verb") in ("WATCH", "WATCHLIST"):
            key = (labels["verb"], labels["resource"], labels.get("subresource", ""), "open")
            counts[key] += round(value)
    return {k: v for k, v in counts.items() if v}


def by_verb_resource(counts: Mapping[RequestKey, int]) -> dict[str, int]:
    """``VERB resource[/sub]`` → requests, all codes together."""
    out: dict[str, int] = defaultdict(int)
    for (verb, resource, subresource, _code), n in counts.items():
        out[f"{verb} {resource}{'/' + subresource if subresource else ''}"] += n
    return dict(sorted(out.items()))


def by_code(counts: Mapping[RequestKey, int]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for (_verb, _resource, _sub, code), n in counts.items():
        out[code] += n
    return dict(sorted(out.items()))


def open_watches(samples: Samples, resources: frozenset[str] = AGENT_RESOURCES) -> int:
    """Watches open now on the agents' resources (a gauge, so a scrape, not a window)."""
    return round(sum(
        value for labels, value in select(samples, "apiserver_longrunning_requests")
        if labels.get("resource") in resources and labels.get("verb") in ("WATCH", "WATCHLIST")
    ))  # fmt: skip


TERMINATED = "apiserver_terminated_watchers_total"
CACHE_INITIALIZATIONS = "apiserver_watch_cache_initializations_total"


def server_closed_watches(
    after: Samples, before: Samples, resources: frozenset[str] = AGENT_RESOURCES
) -> dict[str, dict[str, int]]:
    """Per resource the watch cache serves, between two scrapes: watchers it closed as
    unresponsive (``terminated``) and its re-initializations (``cache_reinitialized``, each
    ending every watch open on the resource). A cache not in ``before`` (a new server, or a
    custom resource's, built on its first request) was initialized once to begin with: that
    one is no re-initialization. A resource is listed as soon as the cache reports it, so 0
    means counted and none (the terminated counter appears only once it moved)."""
    out: dict[str, dict[str, int]] = defaultdict(
        lambda: {"terminated": 0, "cache_reinitialized": 0}
    )
    for labels, value in select(after, CACHE_INITIALIZATIONS):
        if labels.get("resource") in resources:
            key = (CACHE_INITIALIZATIONS, tuple(sorted(labels.items())))
            first = before.get(key, 1.0)  # not there before: its first is no re-initialization
            out[labels["resource"]]["cache_reinitialized"] += max(0, round(value - first))
    for labels, value in select(delta(after, before), TERMINATED):
        if labels.get("resource") in resources:
            out[labels["resource"]]["terminated"] += round(value)
    return dict(sorted(out.items()))


def latency_p99(window: Samples, verbs: frozenset[str]) -> float | None:
    """p99 of ``apiserver_request_duration_seconds`` over the agents' resources, from the
    histogram's buckets (the upper bound of the bucket holding the 99th percentile)."""
    buckets: dict[float, float] = defaultdict(float)
    for labels, value in select(window, "apiserver_request_duration_seconds_bucket"):
        if labels.get("resource") in AGENT_RESOURCES and labels.get("verb") in verbs:
            buckets[float(labels["le"])] += value
    if not buckets or buckets[math.inf] <= 0:
        return None
    total = buckets[math.inf]
    for bound in sorted(buckets):
        if buckets[bound] >= 0.99 * total:
            return bound
    return None


def total(window: Samples, name: str, **wanted: str) -> float:
    return sum(value for _labels, value in select(window, name, **wanted))


def bytes_moved(window: Samples, resources: frozenset[str] = AGENT_RESOURCES) -> dict[str, float]:
    """Bytes the API server sent (replies, watch events) and received (request bodies)."""
    out = {"response": 0.0, "watch_events": 0.0, "request_bodies": 0.0, "watch_event_count": 0.0}
    for labels, value in select(window, "apiserver_response_sizes_sum"):
        if labels.get("resource") in resources:
            out["response"] += value
    for labels, value in select(window, "apiserver_watch_events_sizes_sum"):
        if labels.get("resource") in resources:
            out["watch_events"] += value
    for labels, value in select(window, "apiserver_watch_events_total"):
        if labels.get("resource") in resources:
            out["watch_event_count"] += value
    for labels, value in select(window, "apiserver_request_body_size_bytes_sum"):
        if labels.get("resource", "").split("/")[0] in resources:
            out["request_bodies"] += value
    return out


def rejected(window: Samples) -> dict[str, float]:
    """Requests priority and fairness turned away (429), by priority level and reason."""
    out: dict[str, float] = defaultdict(float)
    for labels, value in select(window, "apiserver_flowcontrol_rejected_requests_total"):
        out[f"{labels.get('priority_level')}/{labels.get('reason')}"] += value
    return {k: v for k, v in out.items() if v}


def dispatched_by_flow_schema(window: Samples) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for labels, value in select(window, "apiserver_flowcontrol_dispatched_requests_total"):
        out[f"{labels.get('flow_schema')}->{labels.get('priority_level')}"] += value
    return {k: v for k, v in out.items() if v}
