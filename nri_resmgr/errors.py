"""The error taxonomy the supervision tree acts on.

``Recoverable`` failures are logged and retried with backoff inside the task that met them;
``Fatal`` ones end the daemon through the same shutdown path that SIGTERM takes.
"""

from __future__ import annotations


class ResmgrError(Exception):
    """Base of every error this package raises on purpose."""


class Recoverable(ResmgrError):
    """A failure worth retrying: the task logs it and tries again after a backoff."""


class Fatal(ResmgrError):
    """A failure the daemon cannot serve through: it asks for shutdown with a non-zero exit."""


class ConfigError(ResmgrError):
    """A configuration that failed to parse, validate, or that the policy refused.

    ``errors`` holds one line per problem, each naming the path of the offending key.
    """

    def __init__(self, errors: list[str] | str) -> None:
        self.errors = [errors] if isinstance(errors, str) else list(errors)
        super().__init__("; ".join(self.errors))
