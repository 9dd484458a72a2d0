"""Instrumentation: what the daemon reports, kept by the code that knows it; no I/O.

- ``metrics``: the Prometheus registry, request/config instruments, the policy collector;
- ``prom``: the Prometheus client's side, imported only once metrics are exported;
- ``health``: liveness and readiness conditions other services set;
- ``exports``: what a policy exports about itself (gauges, NodeResourceTopology zones).

The services that serve them (the HTTP endpoint, the NRT export) are in
``nri_resmgr.observability``.
"""

from nri_resmgr.instrumentation.health import READINESS, Readiness
from nri_resmgr.instrumentation.metrics import (
    CHANGES,
    RequestObserver,
    observed,
)

__all__ = [
    "CHANGES",
    "READINESS",
    "Readiness",
    "RequestObserver",
    "observed",
]
