"""The error taxonomy the supervision tree acts on.

``Recoverable`` failures are logged and retried with backoff inside the task that met them;
``Fatal`` ones end the daemon through the same shutdown path that SIGTERM takes. Every error
this package raises on purpose derives from ``ResmgrError``, so ``app.main`` turns any of them
that reaches it into one line and an exit status (README, "Running"): 2 for a configuration
or command line that is refused, 1 for anything else. A traceback means a bug.

The hierarchy (a second base in brackets, kept where callers catch the stdlib error)::

    ResmgrError
    ├── Recoverable
    │   ├── nri.errors: ProtocolError, ConnectionLost, RpcError
    │   └── kube.errors: Unauthorized, Conflict, Gone, Unavailable,
    │       └── BadResponse
    │           └── kube.watch.MalformedEvent
    ├── Fatal
    │   ├── sysfs.SysfsError
    │   └── dra.kubeletplugin.grpc_server.ServerGaveUp
    ├── ConfigError
    ├── UsageError
    ├── InvalidValue [ValueError]
    │   ├── quantity.QuantityError
    │   ├── cpuset.CpuSetError
    │   ├── nri.wire.WireError
    │   ├── config.problems.ValueProblem
    │   └── policies.annotations.AnnotationError
    │       └── policies.topology_aware.affinity.AffinityError
    ├── config.expressions.UnresolvedKey [KeyError]
    ├── cpus.errors.AllocationError [RuntimeError]
    │   └── PlacementError
    │       └── policies.balloons.types.BalloonsError
    ├── kube.errors.ApiError
    │   ├── BadRequest, Forbidden, NotFound, AlreadyExists, Invalid, TlsVerifyFailed
    │   └── (the Recoverable ones above)
    ├── resmgr.policy.ClaimError
    ├── dra.kubeletplugin: claims.ClaimProblem, metadata.MetadataError, files.UnsafePath [OSError]
    ├── dra.cpu: driver.PrepareError, state.StateError, cdi.CdiError
    └── sim: SimulationError, MachineError, WorkloadError, SnapshotError, PlotError,
        connection.PluginRejected, workload._Invalid

Misuse of an API by this package's own code (a service started twice, a policy used before
``setup``, a namespace given for a cluster-scoped resource) is a bug, not an error of the
input: it raises the builtin error (``RuntimeError``, ``TypeError``, ``ValueError``), as
httpx raises ``RuntimeError`` for a closed client. ``tests/foundation/test_error_tree.py``
lists each such site with its reason.
"""

from __future__ import annotations

__all__ = [
    "EXIT_FATAL",
    "EXIT_OK",
    "EXIT_REFUSED",
    "ConfigError",
    "Fatal",
    "InvalidValue",
    "Recoverable",
    "ResmgrError",
    "UsageError",
]

EXIT_OK = 0
"""A clean stop (SIGTERM, SIGINT)."""
EXIT_FATAL = 1
"""A failure the daemon cannot serve through, at start-up or later."""
EXIT_REFUSED = 2
"""The initial configuration or the command line was refused."""


class ResmgrError(Exception):
    """Base of every error this package raises on purpose."""

    exit_status = EXIT_FATAL
    """What ``app.main`` exits with when this error ends the daemon."""


class Recoverable(ResmgrError):
    """A failure worth retrying: the task logs it and tries again after a backoff."""


class Fatal(ResmgrError):
    """A failure the daemon cannot serve through: it asks for shutdown with a non-zero exit."""


class ConfigError(ResmgrError):
    """A configuration that failed to parse, validate, or that the policy refused.

    ``errors`` holds one line per problem, each naming the path of the offending key.
    """

    exit_status = EXIT_REFUSED

    def __init__(self, errors: list[str] | str) -> None:
        self.errors = [errors] if isinstance(errors, str) else list(errors)
        super().__init__("; ".join(self.errors))


class UsageError(ResmgrError):
    """A command line that cannot be run: an unknown flag, a missing or malformed value."""

    exit_status = EXIT_REFUSED


class InvalidValue(ResmgrError, ValueError):
    """Text or bytes that do not parse as the value they should be (a quantity, a cpuset, a
    protobuf message, an annotation); a ValueError too, which callers may catch."""
