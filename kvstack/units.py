"""Parsing and formatting of sizes and token counts (``32k``, ``1m``, ``64GiB``)."""

from __future__ import annotations

import re
from decimal import Decimal

from kvstack.errors import InputError

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30

_TOKEN_SUFFIX = {"": 1, "k": 1024, "m": 1024 * 1024}
_BYTE_SUFFIX = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1000,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1024**4,
    "tb": 1000**4,
    "tib": 1024**4,
}


def parse_tokens(text: str | int, what: str = "--context") -> int:
    """``32768``, ``32k``, ``128K``, ``1m`` -> tokens (k = 1024, as model cards use)."""
    if isinstance(text, int):
        value = text
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*", text)
        if not m:
            raise InputError(
                f"{what} must be a token count like 32768, 32k or 1m, not {text!r}",
                hint=f"e.g. {what} 128k",
            )
        value = int(Decimal(m.group(1)) * _TOKEN_SUFFIX[m.group(2).lower()])  # exact for big counts
    if value <= 0:
        raise InputError(f"{what} must be positive, not {value}", hint=f"e.g. {what} 32k")
    return value


def parse_bytes(text: str, what: str = "size") -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _BYTE_SUFFIX:
        raise InputError(
            f"{what} must be a size like 64GiB or 500GB, not {text!r}", hint=f"e.g. {what} 64GiB"
        )
    return int(Decimal(m.group(1)) * _BYTE_SUFFIX[m.group(2).lower()])


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def fmt_bw(n: float | None) -> str:
    """Bandwidth in decimal GB/s, the unit disk and PCIe data sheets use."""
    if n is None:
        return "unknown"
    if n >= 1e9:
        return f"{n / 1e9:.1f} GB/s"
    return f"{n / 1e6:.0f} MB/s"


def fmt_ms(seconds: float | None, digits: int | None = None, *, unit: bool = True, sep: bool = True) -> str:
    """Seconds as milliseconds: ``digits`` decimals (None: none from 10 ms up, one below), with the
    unit and thousands separators unless told otherwise; "-" for no figure."""
    if seconds is None:
        return "-"
    ms = seconds * 1000
    places = digits if digits is not None else (0 if seconds >= 0.01 else 1)
    text = f"{ms:,.{places}f}" if sep else f"{ms:.{places}f}"
    return f"{text} ms" if unit else text


def fmt_ms_cell(seconds: float | None, *, sep: bool = True) -> str:
    """Seconds as a table cell in milliseconds: one decimal, no unit (the column says ms)."""
    return fmt_ms(seconds, 1, unit=False, sep=sep)


def in_ms(seconds: float | None) -> float | None:
    """Seconds as milliseconds, a number (a plot's axis); None for no figure."""
    return None if seconds is None else float(seconds) * 1000


def fmt_pct(share: float | None, digits: int = 1) -> str:
    """A share (0.5) as a percentage ("50.0%"); "-" for no figure."""
    return "-" if share is None else f"{share * 100:.{digits}f}%"


def fmt_pct_of(part: float, whole: float, digits: int = 1) -> str:
    """``part`` as a percentage of ``whole`` ("-" when it is 0). Not fmt_pct(part / whole):
    100 * part / whole rounds once, and the tables keep its digits."""
    return f"{100 * part / whole:.{digits}f}%" if whole else "-"


def fmt_tokens(n: int | None) -> str:
    if n is None:
        return "unknown"
    if n >= 1024 * 1024 and n % (1024 * 1024) == 0:
        return f"{n // (1024 * 1024)}M"
    if n >= 1024:
        return f"{n / 1024:.0f}K" if n % 1024 == 0 else f"{n / 1024:.1f}K"
    return str(n)
