"""Instrumentation: the HTTP endpoint (/metrics, /healthz, /readyz) and what it reports.

- ``metrics``: the Prometheus registry, request/config instruments, the policy collector;
- ``health``: liveness and readiness conditions other services set;
- ``endpoint``: parsing ``instrumentation.httpEndpoint``;
- ``server``: the supervised HTTP service (hypercorn under trio), rebound on reconfigure.
"""

from nri_resmgr.instrumentation.health import READINESS, Readiness
from nri_resmgr.instrumentation.metrics import (
    CHANGES,
    observe_nri_handlers,
    observe_nri_inline,
    observed,
)

__all__ = [
    "CHANGES",
    "READINESS",
    "Readiness",
    "observe_nri_handlers",
    "observe_nri_inline",
    "observed",
]
