"""The store on Redis (or Valkey): ``--state redis://HOST:PORT/DB``.

Every key starts with the prefix and has a TTL. One request's start is
one pipeline: the limits' Lua script (``ADMIT``: check and count in one
step, so two replicas cannot both take the last slot), and the learned
facts and rests of its rows that are not fresh in the local cache. Its
end is one more, sent without the request waiting on it. Keys::

    PREFIX learned:ROW:MODEL   a hash of Learned's fields    (LEARNED_TTL)
    PREFIX rest:ROW            wall time the row rests until (the rest)
    PREFIX req:TENANT:MINUTE   requests counted this minute  (2 minutes)
    PREFIX tok:TENANT:MINUTE   tokens counted this minute    (2 minutes)
    PREFIX flight:TENANT       requests in flight, a sorted set by expiry

The client's timeouts are short (``TIMEOUT``): a store that does not
answer is a store that is down, and the request goes on without it.
"""

from __future__ import annotations

import time
from typing import Any

from .store import (
    IN_FLIGHT_TTL,
    LEARNED_TTL,
    WINDOW,
    Admission,
    Began,
    Begin,
    End,
    StoreDown,
)

#: Seconds the client waits to connect or for an answer.
TIMEOUT = 0.5

#: KEYS: requests, tokens, in flight. ARGV: now (ms), rpm, tpm, tokens,
#: max_concurrent, this request's entry, the entry's TTL (ms), the
#: windows' TTL (s). Returns {refused (0 none, 1 requests, 2 tokens,
#: 3 concurrency), requests, tokens, in flight}.
ADMIT = """
local now = tonumber(ARGV[1])
local rpm, tpm = tonumber(ARGV[2]), tonumber(ARGV[3])
local tokens, mc = tonumber(ARGV[4]), tonumber(ARGV[5])
local req = tonumber(redis.call('GET', KEYS[1]) or '0')
local tok = tonumber(redis.call('GET', KEYS[2]) or '0')
local flight = 0
if mc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  flight = redis.call('ZCARD', KEYS[3])
end
if rpm > 0 and req + 1 > rpm then return {1, req, tok, flight} end
if tpm > 0 and tok > 0 and tok + tokens > tpm then return {2, req, tok, flight} end
if mc > 0 and flight + 1 > mc then return {3, req, tok, flight} end
redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[8])
if tokens > 0 then
  redis.call('INCRBY', KEYS[2], tokens)
  redis.call('EXPIRE', KEYS[2], ARGV[8])
end
if mc > 0 then
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[7]), ARGV[6])
  redis.call('PEXPIRE', KEYS[3], ARGV[7])
  flight = flight + 1
end
return {0, req + 1, tok + tokens, flight}
"""

REFUSALS = {0: None, 1: "requests", 2: "tokens", 3: "concurrency"}


class RedisStore:
    shared = True

    def __init__(self, url: str, prefix: str = "streamfix:", timeout: float = TIMEOUT) -> None:
        try:
            import redis.asyncio as aioredis
        except ImportError as exc:  # pragma: no cover - the extra is missing
            extra = "pip install 'streamfix[state]'"
            raise RuntimeError(f"--state needs the state extra: {extra}") from exc
        self.prefix = prefix
        self.client: Any = aioredis.Redis.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry_on_timeout=False,
            health_check_interval=0,
        )
        self._admit = self.client.register_script(ADMIT)
        self._errors = _errors()

    def _key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    async def begin(self, ask: Begin) -> Began:
        async with self.client.pipeline(transaction=False) as pipe:
            return await self._begin(pipe, ask)

    async def _begin(self, pipe: Any, ask: Begin) -> Began:
        window = int(ask.now // WINDOW)
        if ask.limits:
            lim = ask.limits
            keys = [
                self._key("req", ask.tenant, str(window)),
                self._key("tok", ask.tenant, str(window)),
                self._key("flight", ask.tenant),
            ]
            args: list[int | str] = [
                int(ask.now * 1000),
                lim.rpm,
                lim.tpm,
                ask.tokens,
                lim.max_concurrent,
                ask.member,
                IN_FLIGHT_TTL * 1000,
                2 * WINDOW,
            ]
            await self._admit(keys=keys, args=args, client=pipe)
        for fact in ask.facts:
            pipe.hgetall(self._key("learned", fact))
        for row in ask.rests:
            pipe.get(self._key("rest", row))
        try:
            out = await pipe.execute()
        except self._errors as exc:
            raise StoreDown(f"{type(exc).__name__}: {exc}") from exc
        admission = None
        if ask.limits:
            code, req, tok, flight = (int(x) for x in out.pop(0))
            admission = Admission(REFUSALS.get(code), window, req, tok, flight)
        facts: list[dict[str, str] | None] = []
        for raw in out[: len(ask.facts)]:
            facts.append({k.decode(): v.decode() for k, v in raw.items()} if raw else None)
        rests = [float(r) if r else None for r in out[len(ask.facts) :]]
        return Began(admission, facts, rests)

    async def end(self, told: End) -> None:
        async with self.client.pipeline(transaction=False) as pipe:
            await self._end(pipe, told)

    async def _end(self, pipe: Any, told: End) -> None:
        if told.member is not None:
            pipe.zrem(self._key("flight", told.tenant), told.member)
            if told.tokens:
                key = self._key("tok", told.tenant, str(told.window))
                pipe.incrby(key, told.tokens)
                pipe.expire(key, 2 * WINDOW, xx=True)
        for fact, fields in told.learned:
            key = self._key("learned", fact)
            pipe.hset(key, mapping=fields)
            pipe.expire(key, LEARNED_TTL)
        for row, seconds in told.rested:
            until = repr(time.time() + seconds)
            pipe.set(self._key("rest", row), until, ex=max(1, int(seconds) + 1))
        for row in told.recovered:
            pipe.delete(self._key("rest", row))
        try:
            await pipe.execute()
        except self._errors as exc:
            raise StoreDown(f"{type(exc).__name__}: {exc}") from exc

    async def ping(self) -> None:
        try:
            await self.client.ping()
        except self._errors as exc:
            raise StoreDown(f"{type(exc).__name__}: {exc}") from exc

    async def close(self) -> None:
        await self.client.aclose()


def _errors() -> tuple[type[BaseException], ...]:
    """What a store that is down raises (the client's errors, the socket's)."""
    import redis.exceptions

    return (redis.exceptions.RedisError, OSError, TimeoutError, ValueError)
