"""Bearer-token credentials, including a token file that the kubelet rotates under us."""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path

import attrs
import httpx

from nri_resmgr.errors import ConfigError


@attrs.frozen
class StaticToken:
    """A token written into a kubeconfig; kept out of ``repr`` so it never reaches a log."""

    token: str = attrs.field(repr=False)

    def current(self) -> str:
        return self.token

    def refresh(self) -> bool:
        return False


@attrs.define
class TokenFile:
    """A token read from a file and re-read whenever the file changes.

    Projected service-account tokens are rotated by swapping a symlink, so the identity of the
    file (inode, size, mtime) is compared on every request; reading happens only on a change.
    """

    path: Path
    _token: str = attrs.field(init=False, default="", repr=False)
    _stamp: tuple[int, int, int] | None = attrs.field(init=False, default=None)

    def current(self) -> str:
        stamp = self._stat()
        if stamp != self._stamp:
            self._token = self._read()
            self._stamp = stamp
        return self._token

    def refresh(self) -> bool:
        """Forces a re-read; True when the token changed (worth retrying a refused request)."""
        old = self._token
        self._stamp = None
        return self.current() != old

    def _stat(self) -> tuple[int, int, int]:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise ConfigError(f"token file {self.path}: {exc.strerror}") from exc
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _read(self) -> str:
        try:
            token = self.path.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"token file {self.path}: {exc.strerror}") from exc
        if not token:
            raise ConfigError(f"token file {self.path} is empty")
        return token


TokenSource = StaticToken | TokenFile


class BearerAuth(httpx.Auth):
    """Adds the current token; on a 401 re-reads a token file once and retries if it changed."""

    def __init__(self, source: TokenSource) -> None:
        self._source = source

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self._source.current()}"
        response = yield request
        if response.status_code == 401 and self._source.refresh():
            request.headers["Authorization"] = f"Bearer {self._source.current()}"
            yield request
