"""Fixtures for `kvstack top`: a real redis-server on loopback (tests/support/redis.py)."""

from __future__ import annotations

from tests.support.redis import RedisFactory, RedisServer, redis_factory, redis_server

__all__ = ["RedisFactory", "RedisServer", "redis_factory", "redis_server"]
