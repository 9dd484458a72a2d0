"""``instrumentation.httpEndpoint``: ``host:port`` as Go's net.Listen takes it (``:8891``
listens on every address; ``[::1]:8891`` is IPv6); empty means no HTTP server, as upstream."""

from __future__ import annotations

import socket

import attrs

from nri_resmgr.errors import ConfigError

KEY = "spec.instrumentation.httpEndpoint"


@attrs.frozen
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_endpoint(text: str) -> Endpoint | None:
    if not text:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{KEY}: {text[:80]!r} is not host:port with a port 0-65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return Endpoint(host or "0.0.0.0", int(port))


def bind(endpoint: Endpoint) -> socket.socket:
    """A listening socket, or a ConfigError naming the key and the OS's reason."""
    try:
        infos = socket.getaddrinfo(
            endpoint.host, endpoint.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except OSError as exc:
        raise ConfigError(f"{KEY}: cannot resolve {endpoint.host!r}: {exc}") from exc
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(64)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"{KEY}: cannot listen on {endpoint}: {exc.strerror or exc}") from exc
    sock.setblocking(False)
    return sock


__all__ = ["KEY", "Endpoint", "bind", "parse_endpoint"]
