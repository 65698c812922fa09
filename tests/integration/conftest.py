"""Real local servers for integration tests: a real redis-server (tests/support/redis.py)."""

from tests.support.redis import RedisFactory, RedisServer, free_port, redis_factory, redis_server

__all__ = ["RedisFactory", "RedisServer", "free_port", "redis_factory", "redis_server"]
