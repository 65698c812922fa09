"""The serve the canary's e2e tests share, one per module (tests/e2e/test_canary.py, test_canary_disk.py):
the real model with both tiers under a load, and what the tests read of it. One module's serve is
stopped before the next starts: two engines and a load on two cores start an engine in minutes.
"""

from __future__ import annotations

import asyncio
import glob
import json
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from kvstack.clients.control import read_control_token
from kvstack.validation.correctness import CorrectnessCheck, judge
from kvstack.validation.noise import NoiseFloor
from kvstack.validation.prompts import Prompt
from kvstack.validation.report import ValidationTarget
from kvstack.validation.server_api import ServerApi
from kvstack.validation.thresholds import DEFAULT_TOKENS
from tests.e2e.conftest import (
    ServeSession,
    start_serve,
    stop,
    wait_http_ready,
    wait_no_engine,
    wait_serving,
)
from tests.support.deps import ROOT, missing
from tests.support.kv_tamper import L1_POOL_GLOB
from tests.support.load import BackgroundLoad

REAL_MODEL = ROOT / ".models" / "smollm2-135m-instruct"
MODEL = "smollm2-135m-instruct"
INTERVAL_S = 2
CLEAN_CHECKS = 12
SERVE_ARGS = (
    "--model", str(REAL_MODEL), "--offload", "lmcache-mp", "--no-validate",
    "--context", "4096", "--prompt-tokens", "1024",
    "--canary-interval", str(INTERVAL_S), "--canary-budget", "100%",
    "--", "--num-gpu-blocks-override", "40",
)  # fmt: skip
# Not eager (--enforce-eager): its KV differs from the compiled recompute's by more than the canary's
# 0.05-nat gate under load (a clean run failed a check at 0.053 nats, 8 of 16 positions over).
T = TypeVar("T")


def canaried(tmp: Path) -> ServeSession:
    if not (REAL_MODEL / "model.safetensors").is_file():
        missing(
            "the real-model fixture (.models/smollm2-135m-instruct)",
            "scripts/test builds it (ensure_real_model)",
        )
    session = start_serve(tmp, *SERVE_ARGS)
    try:
        wait_http_ready(session)
        wait_serving(session)
    except BaseException:
        ended(session)  # a serve that never came up must not outlive the test
        raise
    return session


@contextmanager
def loaded(tmp: Path) -> Iterator[ServeSession]:
    """A canaried serve with two streams of fresh 512-token prompts in flight, stopped on exit."""
    session = canaried(tmp)
    try:
        with BackgroundLoad(session.base_url, streams=2, prompt_tokens=512):
            yield session
    finally:
        ended(session)


def ended(session: ServeSession) -> None:
    if session.proc.poll() is None:
        stop(session)
    wait_no_engine(session.port)


def events(session: ServeSession, kind: str) -> list[dict[str, Any]]:
    path = session.run_dir / "events.jsonl"
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r["kind"] == kind]


def state(session: ServeSession) -> dict[str, Any]:
    return json.loads((session.run_dir / "canary.json").read_text())


def wait_for(
    session: ServeSession,
    what: str,
    get: Callable[[], T | None],
    timeout_s: float = 240,
    explain: Callable[[], str] = lambda: "",
) -> T:
    """``get()`` once it is truthy; ``explain()`` adds what the test saw to a timeout's message."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = get()
        if value:
            return value
        assert session.proc.poll() is None, session.output()[-4000:]
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s\n{explain()}\n{session.output()[-3000:]}")
        time.sleep(0.5)


def canary_story(session: ServeSession, t0: float) -> str:
    """What the canary did from ``t0``: its state and each check, for a failed wait's message."""
    rows = [
        f"  +{c['asked_at'] - t0:.1f}s {c['probe']} age {c['age_s']} s: {c['served_from']} {c['hit_tokens']} "
        f"{c['verdict']} {c.get('typical')} nats against {c.get('gate')} (in flight {c.get('in_flight')})"
        + (f": {c['detail']}" if c.get("detail") else "")
        for c in events(session, "canary-check")
        if c["asked_at"] >= t0 - 30
    ]
    try:
        now = state(session)
        head = f"canary: {now.get('status')} {now.get('waiting_for') or ''}".rstrip()
    except (OSError, ValueError) as exc:
        head = f"canary.json unreadable: {exc}"
    return "\n".join([head, "checks from 30 s before the tamper:", *rows])


def metrics(session: ServeSession, token: str | None) -> httpx.Response:
    url = state(session)["metrics_url"]
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(url, headers=headers, timeout=10)


def series(session: ServeSession) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    resp = metrics(session, read_control_token(session.run_dir))
    assert resp.status_code == 200, resp.text
    out = {}
    for family in text_string_to_metric_families(resp.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def at_least(rows: list[dict[str, Any]], n: int) -> list[dict[str, Any]] | None:
    return rows if len(rows) >= n else None


def checks_after(session: ServeSession, t0: float) -> list[dict[str, Any]]:
    return [c for c in events(session, "canary-check") if c["asked_at"] >= t0]


def first_fail_after(session: ServeSession, t0: float) -> tuple[int, dict[str, Any]] | None:
    after = checks_after(session, t0)
    return next(((i, c) for i, c in enumerate(after) if c["verdict"] == "fail"), None)


def greedy(session: ServeSession, prompt: str) -> list[int]:
    body: dict[str, Any] = {"model": MODEL, "prompt": prompt, "max_tokens": 16, "temperature": 0.0}
    body["return_token_ids"] = True
    resp = httpx.post(session.base_url + "/v1/completions", json=body, timeout=120)
    assert resp.status_code == 200, resp.text
    return list(resp.json()["choices"][0]["token_ids"])


def judged(session: ServeSession, text: str, gate: float) -> CorrectnessCheck:
    """The server's greedy answer to ``text`` judged against a recompute by validation's gate."""

    async def run() -> CorrectnessCheck:
        async with ServerApi(ValidationTarget(base_url=session.base_url, model=MODEL), None) as api:
            prompt = Prompt(nonce="witness", text=text, tokens=0)
            served = await api.send(prompt, generate=True)
            scores = await api.score(prompt, served, "vllm")
        noise = NoiseFloor(method="the canary's gate", threshold=gate)
        return judge(served, scores, DEFAULT_TOKENS, noise)

    return asyncio.run(run())


def witness_prompt() -> str:
    nonce = secrets.token_hex(6)
    return f"Witness-{nonce} " + " ".join(str(100 + (i * 37) % 900) for i in range(600))


def cache_server_pid(session: ServeSession) -> int:
    pids = {p.pid for p in psutil.Process(session.proc.pid).children(recursive=True)}
    owned = [int(p.rsplit("-", 1)[1]) for p in glob.glob(L1_POOL_GLOB) if int(p.rsplit("-", 1)[1]) in pids]
    assert len(owned) == 1, (owned, glob.glob(L1_POOL_GLOB))
    return owned[0]


def served_from_tiers(session: ServeSession) -> bool:
    return "kv-transfer-config" in (session.run_dir / "launch.json").read_text()


def assert_fallback(session: ServeSession, tier: str) -> dict[str, Any]:
    """The fallback happened and every place an operator looks says so."""
    (event,) = wait_for(session, "the fallback event", lambda: events(session, "wrong-kv-fallback"))
    assert event["served_from"] == tier and event["tiers_off"] == ["cpu", "disk"] and event["restarted"] == 1
    wait_for(session, "serving again", lambda: "serving without the offload tiers" in session.output())
    out = session.output()
    assert "warning: wrong KV: canary probe" in out and f"served from '{tier}'" in out
    assert not served_from_tiers(session), "launch.json still has the connector"
    assert state(session)["status"] == "fallback"
    s = series(session)
    assert s[("kvstack_offload_enabled", ())] == 0.0 and s[("kvstack_canary_wrong_kv", ())] == 1.0
    assert s[("kvstack_canary_checks_total", (("served_from", tier), ("verdict", "fail")))] >= 1
    wait_http_ready(session)
    return event
