"""Typed API errors, so callers classify failures without reading HTTP status codes.

Errors that a retry after a backoff can cure also inherit ``Recoverable``; the supervision
tree then retries them instead of ending the daemon.
"""

from __future__ import annotations

import json
import ssl
from typing import Any

from nri_resmgr.errors import Recoverable, ResmgrError
from nri_resmgr.shorten import shorten

# Characters of a server's error message kept in an ApiError.
MESSAGE_LIMIT = 500


class ApiError(ResmgrError):
    """A request the API server refused or could not be sent; ``status`` is 0 without a reply."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(f"{status} {reason}: {message}" if status else f"{reason}: {message}")


class BadRequest(ApiError):
    """400: the request itself is malformed (a bad selector, a patch that does not parse)."""


class Unauthorized(ApiError, Recoverable):
    """401: the credentials were refused; a rotated token may cure it."""


class Forbidden(ApiError):
    """403: RBAC does not allow the request; a deployment problem, not worth retrying blindly."""


class NotFound(ApiError):
    """404: the object (or its namespace, or the resource type) does not exist."""


class AlreadyExists(ApiError):
    """409 with reason AlreadyExists: a create met an object of the same name."""


class Conflict(ApiError, Recoverable):
    """409: the object changed since it was read (resourceVersion mismatch); re-read and retry."""


class Gone(ApiError, Recoverable):
    """410: the resourceVersion asked for is too old; list again and watch from the new one."""


class Invalid(ApiError):
    """422: the object failed validation; ``message`` names the offending fields."""


class Unavailable(ApiError, Recoverable):
    """5xx, 429, a refused or dropped connection, or a timeout: the server may come back."""


class BadResponse(ApiError, Recoverable):
    """A reply that is not what the API server sends (not JSON, not an object, items that are
    not objects): a proxy or a glitch in between, worth retrying, never worth a crash."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: Unavailable,
}


def error_for(status: int, reason: str, message: str) -> ApiError:
    """The most specific error class for an HTTP status and a Status reason."""
    if status == 409 and reason == "AlreadyExists":
        return AlreadyExists(status, reason, message)
    if status >= 500:
        return Unavailable(status, reason, message)
    return _BY_STATUS.get(status, ApiError)(status, reason, message)


def error_from_status_object(status_obj: dict[str, Any], http_status: int = 0) -> ApiError:
    """Maps a Kubernetes ``Status`` object (a reply body or a watch ERROR event) to an error."""
    code = status_obj.get("code")
    status = code if isinstance(code, int) and code else http_status
    reason = str(status_obj.get("reason") or _default_reason(status))
    # An Invalid reply quotes the rejected value; keep logs (and retries) from repeating it all.
    message = shorten(str(status_obj.get("message") or ""), MESSAGE_LIMIT)
    reason = shorten(reason, MESSAGE_LIMIT)
    return error_for(status, reason, message)


def error_from_body(http_status: int, body: bytes) -> ApiError:
    """Maps an error reply to an error, using its Status object when the body holds one."""
    try:
        decoded = json.loads(body)
    except (ValueError, RecursionError):  # not a Status; the text below is what there is
        decoded = None
    if isinstance(decoded, dict) and decoded.get("kind") == "Status":
        return error_from_status_object(decoded, http_status)
    text = body[:MESSAGE_LIMIT].decode("utf-8", errors="replace").strip()
    if len(body) > MESSAGE_LIMIT:
        text = f"{text}… ({len(body)} bytes)"
    return error_for(http_status, _default_reason(http_status), text)


class TlsVerifyFailed(ApiError):
    """The server's certificate does not verify: a deployment problem retrying cannot cure."""


def connection_error(exc: BaseException) -> ApiError:
    """A transport failure as an error that names its root cause.

    httpx wraps the ssl or OS error and often has no message of its own (``ConnectError('')``),
    so the cause chain is walked for the most specific description. A certificate that does
    not verify is ``TlsVerifyFailed`` (not retried: the CA or the server name is wrong);
    everything else (refused, reset, timed out, a handshake cut short) is ``Unavailable``.
    """
    chain = _causes(exc)
    for cause in chain:
        if isinstance(cause, ssl.SSLCertVerificationError):
            detail = cause.verify_message or cause.reason or str(cause)
            return TlsVerifyFailed(0, "TLSVerifyFailed", f"certificate verify failed: {detail}")
    described = [f"{type(c).__name__}: {c}" for c in chain if str(c)]
    message = "; caused by ".join(described) or repr(exc)
    return Unavailable(0, type(exc).__name__, message)


def _causes(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain and len(chain) < 8:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _default_reason(status: int) -> str:
    names = {
        400: "BadRequest",
        401: "Unauthorized",
        403: "Forbidden",
        404: "NotFound",
        409: "Conflict",
        410: "Gone",
        422: "Invalid",
        429: "TooManyRequests",
    }
    if status >= 500:
        return "ServerError"
    return names.get(status, "Unknown")
