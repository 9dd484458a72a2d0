"""Errors of the NRI transport: a broken wire, and a call answered with an error status."""

from __future__ import annotations

from enum import IntEnum

from nri_resmgr.errors import Recoverable


class Code(IntEnum):
    """The gRPC status codes ttrpc carries in Response.status.code."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14


class ProtocolError(Recoverable):
    """The peer broke the wire protocol; the connection cannot be trusted and is dropped."""


class ConnectionLost(Recoverable):
    """The peer closed the connection (or it broke) while we still needed it."""


class RpcError(Recoverable):
    """A call failed with a ttrpc status: remote (peer answered it) or local (e.g. too big)."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        self.message = message
        try:
            name = Code(code).name
        except ValueError:
            name = f"code {code}"
        super().__init__(f"{name}: {message}")
