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
