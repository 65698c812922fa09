from __future__ import annotations

import pytest
from redis.connection import parse_url as redis_parse_url

from kvstack.errors import InputError, NetworkTargetError, UnsupportedError
from kvstack.remote.url import REMOTE_CONNECTORS, require_remote_support
from kvstack.remoteurl import ACCEPTED_FORMS, parse_remote_url


@pytest.mark.parametrize(
    ("url", "scheme", "hosts", "user", "password", "db"),
    [
        ("redis://cache:6379", "redis", [("cache", 6379)], None, None, None),
        ("redis://alice:s3cret@cache:6379/2", "redis", [("cache", 6379)], "alice", "s3cret", 2),
        (
            "rediss://:s3cret@cache.example.com:6380/0",
            "rediss",
            [("cache.example.com", 6380)],
            None,
            "s3cret",
            0,
        ),
        ("redis://[::1]:7000", "redis", [("::1", 7000)], None, None, None),
        ("lm://10.0.0.9:65432", "lm", [("10.0.0.9", 65432)], None, None, None),
        (
            "redis-sentinel://u:pw@s1:26379,s2:26380/mymaster",
            "redis-sentinel",
            [("s1", 26379), ("s2", 26380)],
            "u",
            "pw",
            None,
        ),
    ],
)
def test_accepted_forms_parse(
    url: str,
    scheme: str,
    hosts: list[tuple[str, int]],
    user: str | None,
    password: str | None,
    db: int | None,
) -> None:
    parsed = parse_remote_url(url)
    assert (parsed.scheme, list(parsed.hosts), parsed.username, parsed.password, parsed.db) == (
        scheme,
        hosts,
        user,
        password,
        db,
    )
    assert "s3cret" not in repr(parsed)  # the dataclass repr hides the password


def test_sentinel_service_name_is_kept() -> None:
    assert parse_remote_url("redis-sentinel://s1:26379/mymaster").service == "mymaster"
    assert parse_remote_url("redis-sentinel://s1:26379").service is None


@pytest.mark.parametrize(
    "url",
    [
        "",
        "cache:6379",
        "http://cache:6379",
        "http://user:hunter22@cache:6379",
        "redis://cache",  # LMCache's parse_remote_url asserts a port
        "redis://cache:0",
        "redis://cache:70000",
        "redis://cache:port",
        "redis://cache:\u00b2",  # a digit to str.isdigit(), not to int()
        "redis://:6379",
        "redis://cache:6379/zero",
        "redis://a:1,b:2",
        "lm://user:hunter22@cache:1",
        "lm://cache:1/path",
        "redis://cache:6379#frag",
        "redis://[::1:6379",
    ],
)
def test_malformed_urls_are_input_errors_naming_the_forms(url: str) -> None:
    with pytest.raises(NetworkTargetError) as err:
        parse_remote_url(url)
    assert isinstance(err.value, InputError) and err.value.exit_code == 2
    assert err.value.hint is not None and ACCEPTED_FORMS in err.value.hint
    assert "hunter22" not in err.value.message


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        ("redis://cache:6379", "redis://cache:6379"),
        ("rediss://user:pw-secret@cache:6380/1", "rediss://user:***@cache:6380/1"),
        ("redis-sentinel://:pw-secret@s1:26379", "redis-sentinel://:***@s1:26379"),
        ("lm://lmcache-server:65432", "lm://lmcache-server:65432"),
    ],
)
def test_the_redacted_form_is_what_a_plan_keeps(url: str, redacted: str) -> None:
    assert parse_remote_url(url).redacted() == redacted


def test_redacted_hides_the_password_and_keeps_the_rest() -> None:
    for url in ("redis://alice:hunter22@cache:6379/1", "redis-sentinel://u:hunter22@s1:1,s2:2/m"):
        shown = parse_remote_url(url).redacted()
        assert "hunter22" not in shown
        assert shown.startswith(url.split("://")[0] + "://")
    assert parse_remote_url("redis://cache:6379").redacted() == "redis://cache:6379"


def test_with_endpoint_rewrites_only_the_host_and_keeps_credentials_and_query() -> None:
    url = parse_remote_url("redis://alice:hunter22@cache:6379/3?ssl_cert_reqs=none&password=q-pw")
    assert (
        url.with_endpoint("redis", 6379)
        == "redis://alice:hunter22@redis:6379/3?ssl_cert_reqs=none&password=q-pw"
    )
    assert (
        parse_remote_url("redis://cache:1?password=q-pw").with_endpoint("::1", 2)
        == "redis://[::1]:2?password=q-pw"
    )
    with pytest.raises(UnsupportedError):
        parse_remote_url("redis-sentinel://s1:1").with_endpoint("h", 1)


def test_a_password_in_the_query_is_a_secret_redacted_and_sent() -> None:
    url = parse_remote_url("redis://cache:6379/0?socket_timeout=5&password=hunter22%2Fq")
    assert url.password is None and url.has_secret
    assert set(url.secrets) == {"hunter22%2Fq", "hunter22/q"}
    assert url.redacted() == "redis://cache:6379/0?socket_timeout=5&password=***"
    assert "hunter22" not in repr(url)
    # What a Redis client sends: redis-py's own parse_url (from_url, which LMCache uses) decides.
    assert url.auth_password == "hunter22/q"
    for raw in (url.raw, "redis://:a%40b@cache:1?password=other", "redis://cache:1?db=0"):
        assert parse_remote_url(raw).auth_password == redis_parse_url(raw).get("password")
    assert not parse_remote_url("redis://cache:1?db=0").has_secret


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("redis://127.0.0.1:1", True),
        ("redis://localhost:1", True),
        ("redis://[::1]:1", True),
        ("redis://10.1.2.3:1", False),
    ],
)
def test_loopback(url: str, loopback: bool) -> None:
    assert parse_remote_url(url).is_loopback() is loopback


@pytest.mark.parametrize("connector", ["native", "hicache", "none"])
def test_connectors_without_a_remote_tier_are_refused_naming_those_with_one(connector: str) -> None:
    with pytest.raises(UnsupportedError) as err:
        require_remote_support(connector, parse_remote_url("redis://u:hunter22@cache:6379"))
    text = f"{err.value.message} {err.value.hint}"
    for name in REMOTE_CONNECTORS:
        assert name in text
    assert "hunter22" not in text


@pytest.mark.parametrize(
    "url", ["redis://c:1", "rediss://c:1/2", "redis-sentinel://s:1,t:2", "lm://c:1", "redis://u:p@c:1/0"]
)
def test_lmcache_in_process_takes_every_form(url: str) -> None:
    require_remote_support("lmcache", parse_remote_url(url))


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("redis://c:6379", True),
        ("redis://u:p@c:6379/0", True),
        ("redis://c:6379/1", False),  # the resp adapter has no database field
        ("rediss://c:6379", False),
        ("redis-sentinel://s:1", False),
        ("lm://c:1", False),
    ],
)
def test_lmcache_mp_resp_adapter_takes_plain_redis_only(url: str, ok: bool) -> None:
    if ok:
        require_remote_support("lmcache-mp", parse_remote_url(url))
    else:
        with pytest.raises(UnsupportedError):
            require_remote_support("lmcache-mp", parse_remote_url(url))
