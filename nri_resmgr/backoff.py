"""Exponential backoff with jitter, for tasks that retry recoverable failures."""

from __future__ import annotations

import random

import attrs
import trio


@attrs.define
class Backoff:
    """Delays that grow from ``initial`` by ``factor`` up to ``maximum``; ``reset()`` after success.

    Jitter spreads retries of many nodes so they do not hit a recovering server together.
    """

    initial: float = 0.1
    maximum: float = 30.0
    factor: float = 2.0
    jitter: float = 0.2
    _next: float = attrs.field(init=False, default=0.0)
    attempts: int = attrs.field(init=False, default=0)

    def __attrs_post_init__(self) -> None:
        self._next = self.initial

    def reset(self) -> None:
        self._next = self.initial
        self.attempts = 0

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self.maximum, self._next * self.factor)
        self.attempts += 1
        spread = delay * self.jitter
        return max(0.0, delay + random.uniform(-spread, spread))

    async def sleep(self) -> float:
        delay = self.next_delay()
        await trio.sleep(delay)
        return delay
