import pytest

from kvstack.redact import MASK, redact_argv, redact_env, redact_text, redact_url


def test_url_password_masked_user_kept() -> None:
    assert redact_url("redis://alice:s3cret@cache:6379/0") == f"redis://alice:{MASK}@cache:6379/0"
    assert redact_url("rediss://:s3cret@cache:6380") == f"rediss://:{MASK}@cache:6380"
    assert redact_url("redis://cache:6379") == "redis://cache:6379"


def test_credentials_of_a_url_without_scheme_separator_are_masked() -> None:
    # A typo in the scheme ("redis//") must not put the password into the error that names it.
    assert redact_url("redis//:pw-9@cache:6379") == "***@cache:6379"
    assert redact_url("cache.local:6379") == "cache.local:6379"


def test_argv_secret_flags_masked_in_both_forms() -> None:
    argv = ["vllm", "serve", "--api-key", "sk-live-123", "--api-key=sk-live-123", "--port", "8000"]
    out = redact_argv(argv)
    assert "sk-live-123" not in " ".join(out)
    assert out[:4] == ["vllm", "serve", "--api-key", MASK]
    assert out[4] == f"--api-key={MASK}"
    assert out[5:] == ["--port", "8000"]


def test_env_names_that_look_secret_are_masked() -> None:
    env = {
        "HF_TOKEN": "hf_abc",
        "MY_API_KEY": "k",
        "REDIS_PASSWORD": "p",
        "PATH": "/usr/bin",
        "EMPTY_KEY": "",
    }
    out = redact_env(env)
    assert out == {
        "HF_TOKEN": MASK,
        "MY_API_KEY": MASK,
        "REDIS_PASSWORD": MASK,
        "PATH": "/usr/bin",
        "EMPTY_KEY": "",
    }


def test_known_secret_values_and_url_credentials_masked_in_text() -> None:
    text = "connecting to redis://u:hunter22@h:1 with key sk-live-123"
    out = redact_text(text, ["sk-live-123"])
    assert "hunter22" not in out
    assert "sk-live-123" not in out
    assert f"redis://u:{MASK}@h:1" in out


# redis-py's from_url (LMCache's in-process Redis connector, kvstack's preflight) sends ?password=
# as AUTH; a token or key in a query string is as much a credential.
QUERY_PW = "q-s3cret%2Fpw"  # percent-encoded "/" as it must be written in a query


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"redis://h:6379/0?password={QUERY_PW}", f"redis://h:6379/0?password={MASK}"),
        (
            f"redis://u:{QUERY_PW}@h:6379/0?socket_timeout=5&password={QUERY_PW}&ssl_keyfile=/k.pem",
            f"redis://u:{MASK}@h:6379/0?socket_timeout=5&password={MASK}&ssl_keyfile=/k.pem",
        ),
        (f"redis-sentinel://s1:1,s2:2/m?token={QUERY_PW}", f"redis-sentinel://s1:1,s2:2/m?token={MASK}"),
        (f"http://h:8000/v1?api_key={QUERY_PW}&x=1", f"http://h:8000/v1?api_key={MASK}&x=1"),
        (f"redis://h:1?Auth={QUERY_PW}", f"redis://h:1?Auth={MASK}"),
        (f"redis://h:1?pass={QUERY_PW}", f"redis://h:1?pass={MASK}"),
        (f"redis://h:1?client_secret={QUERY_PW}", f"redis://h:1?client_secret={MASK}"),
        (f"redis://h:1?ssl_password={QUERY_PW}", f"redis://h:1?ssl_password={MASK}"),
        ("redis://h:1?db=2&ssl_cert_reqs=none", "redis://h:1?db=2&ssl_cert_reqs=none"),
    ],
)
def test_credentials_in_a_query_string_are_masked(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert redact_text(f"connecting to {url} now") == f"connecting to {shown} now"
    assert shown in " ".join(redact_argv(["lmcache", "--remote", url]))


def test_url_secrets_lists_each_credential_as_written_and_decoded() -> None:
    from kvstack.redact import has_url_secret, url_secrets  # (new: the one list of a URL's credentials)

    url = f"redis://u:pw-user%40x@h:6379/0?db=1&password={QUERY_PW}&token=t+k"
    assert set(url_secrets(url)) == {"pw-user%40x", "pw-user@x", QUERY_PW, "q-s3cret/pw", "t+k", "t k"}
    assert url_secrets("redis://u@h:6379/0?db=1&ssl_keyfile=/secret.pem") == []
    assert has_url_secret(f"redis://h:1?password={QUERY_PW}") and not has_url_secret("redis://h:1?db=0")
