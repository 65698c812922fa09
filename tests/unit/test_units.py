import pytest

from kvstack.errors import InputError
from kvstack.units import fmt_bw, fmt_bytes, fmt_ms, fmt_pct, fmt_tokens, parse_bytes, parse_tokens


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("32768", 32768), ("32k", 32768), ("128K", 131072), ("1m", 1048576), ("1.5k", 1536), (4096, 4096)],
)
def test_parse_tokens_accepts_model_card_forms(text: str | int, tokens: int) -> None:
    assert parse_tokens(text) == tokens


@pytest.mark.parametrize("text", ["", "abc", "-5", "0", "12q", "1e9"])
def test_parse_tokens_rejects_with_hint(text: str) -> None:
    with pytest.raises(InputError) as info:
        parse_tokens(text, "--context")
    assert "--context" in info.value.message
    assert info.value.hint


def test_parse_bytes_binary_and_decimal() -> None:
    assert parse_bytes("64GiB") == 64 * 1024**3
    assert parse_bytes("500GB") == 500 * 10**9
    assert parse_bytes("1.5g") == int(1.5 * 1024**3)
    with pytest.raises(InputError):
        parse_bytes("12 parsecs")


def test_formatting() -> None:
    assert fmt_bytes(80 * 1024**3) == "80.0 GiB"
    assert fmt_bytes(512) == "512 B"
    assert fmt_bytes(None) == "unknown"
    assert fmt_bw(6.5e9) == "6.5 GB/s"
    assert fmt_bw(5.2e8) == "520 MB/s"
    assert fmt_tokens(131072) == "128K"
    assert fmt_tokens(1048576) == "1M"
    assert fmt_tokens(1536) == "1.5K"


def test_milliseconds_and_shares() -> None:
    assert fmt_ms(1.2345) == "1,234 ms"  # from 10 ms up: whole milliseconds
    assert fmt_ms(0.00234) == "2.3 ms"  # below: one decimal
    assert fmt_ms(1.2345, 1, unit=False) == "1,234.5"
    assert fmt_ms(1.2345, 1, unit=False, sep=False) == "1234.5"
    assert fmt_ms(None) == "-"
    assert fmt_pct(0.5) == "50.0%"
    assert fmt_pct(0.123, 0) == "12%"
    assert fmt_pct(None) == "-"
