"""Kubernetes API access: cluster config, a small async client on httpx, resilient watches."""

from nri_resmgr.kube.client import KubeClient, PatchType
from nri_resmgr.kube.config import ClusterConfig, load_config, load_in_cluster, load_kubeconfig
from nri_resmgr.kube.errors import (
    AlreadyExists,
    ApiError,
    BadRequest,
    BadResponse,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    TlsVerifyFailed,
    Unauthorized,
    Unavailable,
)
from nri_resmgr.kube.objects import KubeObject, ObjectList
from nri_resmgr.kube.resources import ApiResource
from nri_resmgr.kube.watch import EventType, Watch, WatchEvent

__all__ = [
    "AlreadyExists",
    "ApiError",
    "ApiResource",
    "BadRequest",
    "BadResponse",
    "ClusterConfig",
    "Conflict",
    "EventType",
    "Forbidden",
    "Gone",
    "Invalid",
    "KubeClient",
    "KubeObject",
    "NotFound",
    "ObjectList",
    "PatchType",
    "TlsVerifyFailed",
    "Unauthorized",
    "Unavailable",
    "Watch",
    "WatchEvent",
    "load_config",
    "load_in_cluster",
    "load_kubeconfig",
]
