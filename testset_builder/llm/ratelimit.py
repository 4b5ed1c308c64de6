"""Token buckets for requests per minute and tokens per minute, shared by every call of a client."""

from __future__ import annotations

import asyncio
import time


class TokenBucket:
    """Refills at ``per_minute / 60`` units a second and holds ``burst_seconds`` of that; ``acquire(n)`` waits until
    n units are there. Providers enforce per-minute limits over short windows, and requests reach them with jitter,
    so the default burst is a tenth of a second's worth: calls go out evenly paced instead of in clumps that draw
    429s. A request larger than the bucket is let through when the bucket is full, so it cannot wait forever.
    """

    def __init__(self, per_minute: float | None, burst_seconds: float = 0.1, clock=time.monotonic) -> None:
        self.rate = float(per_minute) / 60.0 if per_minute else None
        self.capacity = max(self.rate * burst_seconds, 1.0) if self.rate else None
        self._clock = clock
        self._level = self.capacity or 0.0
        self._updated = clock()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._level = min(self.capacity, self._level + (now - self._updated) * self.rate)
        self._updated = now

    async def acquire(self, units: float = 1.0) -> None:
        if self.capacity is None:
            return
        units = min(units, self.capacity)
        async with self._lock:
            while True:
                self._refill()
                if self._level >= units:
                    self._level -= units
                    return
                await asyncio.sleep((units - self._level) / self.rate)


class RateLimiter:
    def __init__(self, requests_per_minute: float | None = None, tokens_per_minute: float | None = None) -> None:
        self.requests = TokenBucket(requests_per_minute)
        self.tokens = TokenBucket(tokens_per_minute)

    async def acquire(self, estimated_tokens: int) -> None:
        await self.requests.acquire(1)
        await self.tokens.acquire(estimated_tokens)
