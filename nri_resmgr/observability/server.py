"""The instrumentation HTTP service: /metrics, /healthz and /readyz on ``httpEndpoint``.

hypercorn serves a tiny ASGI app, so no HTTP parsing is ours. Each connection is its own
task and a stalled one times out (``read_timeout``), so a slow client costs a task, never the
NRI or DRA paths, which share only the event loop with it; and at most ``connection_cap()``
connections are open at once (``connections``), so clients cannot take the file descriptors
those paths need.

The endpoint follows the configuration through a reconfigure hook: ``prepare`` parses and
binds the new address before the policy sees the new spec, so a bad address or a port in
use refuses the whole reconfiguration (the log and the CR status say why, the old endpoint
keeps serving); ``finish`` switches to the new socket, or closes it if the policy refused.
At start there is no previous configuration to keep: a failed bind is logged and retried.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import trio

from nri_resmgr.backoff import Backoff
from nri_resmgr.config.models import PolicySpec
from nri_resmgr.errors import ConfigError
from nri_resmgr.instrumentation import metrics
from nri_resmgr.instrumentation.health import READINESS, Readiness
from nri_resmgr.observability.connections import connection_cap, serve_capped
from nri_resmgr.observability.endpoint import Endpoint, bind, parse_endpoint

if TYPE_CHECKING:
    from hypercorn.typing import ASGIFramework

log = logging.getLogger(__name__)

READ_TIMEOUT = 10
"""Seconds a client may stall mid-request before hypercorn drops it."""

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


class HttpService:
    """The daemon service; see ``nri_resmgr.daemon`` for the service contract."""

    name = "http"

    def __init__(self, spec: Callable[[], PolicySpec], readiness: Readiness = READINESS) -> None:
        self._spec = spec
        self._readiness = readiness
        self._nursery: trio.Nursery | None = None
        self._current: trio.CancelScope | None = None
        self.address = ""
        """The configured httpEndpoint in force (may not be bound yet at start)."""
        self.bound: tuple[str, int] | None = None
        """The socket address actually listened on, once bound."""
        self._ready_to_serve = trio.Event()

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self.address = self._spec().instrumentation.http_endpoint
            try:
                endpoint = parse_endpoint(self.address)
            except ConfigError as exc:
                log.error("no HTTP endpoint: %s", "; ".join(exc.errors))
                endpoint = None
            if endpoint is not None:
                self._start(nursery, self._bind_retrying, endpoint)
            task_status.started()
            await trio.sleep_forever()

    async def stop(self) -> None:
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel(reason="http endpoint stopping")

    # -- reconfiguration ------------------------------------------------------------------

    def prepare(self, spec: PolicySpec) -> Callable[[bool], None]:
        """Bind the new endpoint (or raise ConfigError); the result finishes the change."""
        address = spec.instrumentation.http_endpoint
        if address == self.address or self._nursery is None:
            return _unchanged
        endpoint = parse_endpoint(address)
        sock = bind(endpoint) if endpoint is not None else None

        def finish(applied: bool) -> None:
            if not applied:
                if sock is not None:
                    sock.close()
                return
            assert self._nursery is not None
            log.info("instrumentation.httpEndpoint: %r -> %r", self.address, address)
            self.address = address
            if sock is None or endpoint is None:
                self._stop_current()
                return
            self._start(self._nursery, self._run_on, endpoint, sock)

        return finish

    def _start(self, nursery: trio.Nursery, fn: Callable[..., Any], *args: Any) -> None:
        self._stop_current()
        scope = trio.CancelScope()
        self._current = scope

        async def run() -> None:
            with scope:
                await fn(*args)

        nursery.start_soon(run)

    def _stop_current(self) -> None:
        if self._current is not None:
            self._current.cancel(reason="http endpoint moving or closing")
            self._current = None
        self.bound = None

    # -- serving --------------------------------------------------------------------------

    async def _bind_retrying(self, endpoint: Endpoint) -> None:
        backoff = Backoff(initial=1.0, maximum=30.0)
        first = True
        while True:
            try:
                sock = bind(endpoint)
            except ConfigError as exc:
                level = logging.ERROR if first else logging.DEBUG
                log.log(level, "%s; retrying (NRI and DRA are not affected)", exc.errors[0])
                first = False
                await backoff.sleep()
                continue
            if not first:
                log.info("HTTP endpoint %s bound after retrying", endpoint)
            await self._run_on(endpoint, sock)
            return

    async def _run_on(self, endpoint: Endpoint, sock: socket.socket) -> None:
        # Imported here: a daemon without an endpoint never pays for hypercorn (~50-200 ms).
        from hypercorn.app_wrappers import ASGIWrapper
        from hypercorn.config import Config

        config = Config()
        config.accesslog = None
        config.errorlog = logging.getLogger("hypercorn.error")
        config.read_timeout = READ_TIMEOUT
        cap = connection_cap()
        try:
            self.bound = sock.getsockname()[:2]
            log.info("serving /metrics, /healthz, /readyz on http://%s (at most %d connections)",
                     endpoint, cap)  # fmt: skip
            await serve_capped(ASGIWrapper(cast("ASGIFramework", self._app)), config, sock, cap)
        finally:
            sock.close()

    # -- the ASGI app ---------------------------------------------------------------------

    async def _app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        status, headers, body = self._respond(scope)
        if scope["method"] not in ("GET", "HEAD"):
            status, headers, body = 405, [(b"allow", b"GET, HEAD")], b"method not allowed\n"
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send(
            {"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body}
        )

    def _respond(self, scope: Scope) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        text = [(b"content-type", b"text/plain; charset=utf-8")]
        path = scope["path"]
        if path == "/healthz":
            # Answered on the event loop that serves NRI and DRA: a reply proves it turns.
            return 200, text, b"ok\n"
        if path == "/readyz":
            missing = self._readiness.missing()
            if self._readiness.ready:
                return 200, text, b"ok\n"
            return 503, text, f"not ready: {', '.join(missing) or 'starting'}\n".encode()
        if path == "/metrics":
            if not self._spec().instrumentation.prometheus_export:
                return 404, text, b"metrics not exported: instrumentation.prometheusExport is off\n"
            from prometheus_client.exposition import choose_encoder

            encoder, content_type = choose_encoder(_header(scope, b"accept"))
            registry = metrics.enable().REGISTRY  # enabled already with prometheusExport on
            return 200, [(b"content-type", content_type.encode())], encoder(registry)
        return 404, text, b"not found; try /metrics, /healthz or /readyz\n"


def _unchanged(applied: bool) -> None:
    pass


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return ""


__all__ = ["READ_TIMEOUT", "HttpService"]
