"""A container as the subject of match expressions and groupBy substitutions: the keys
nri-plugins resolves on a container and its pod."""

from __future__ import annotations

from nri_resmgr.config.expressions import Resolver
from nri_resmgr.policies.requests import QoS, container_request
from nri_resmgr.resmgr.model import Container, Pod

QOS_NAMES = {QoS.GUARANTEED: "Guaranteed", QoS.BURSTABLE: "Burstable", QoS.BESTEFFORT: "BestEffort"}


def container_subject(pod: Pod, c: Container) -> Resolver:
    qos = QOS_NAMES[container_request(pod, c).qos]

    def pod_key(key: str) -> object:
        return {
            "name": pod.name,
            "namespace": pod.namespace,
            "qosclass": qos,
            "labels": pod.labels,
            "id": pod.id,
            "uid": pod.uid,
        }.get(key)

    def key(k: str) -> object:
        if k == "pod":
            return pod_key
        return {
            "name": c.name,
            "namespace": pod.namespace,
            "qosclass": qos,
            "labels": c.labels,
            "tags": {},
            "id": c.id,
        }.get(k)

    return key
