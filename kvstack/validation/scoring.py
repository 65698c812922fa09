"""Teacher-forced scoring: what recompute thinks of every token a cached request generated.

The correctness gate does not compare two free-running generations (after one near-tie flip they
part ways and nothing later can be judged). It takes the tokens the cached request generated and
has the engine score them as a recompute would: the prompt plus those tokens as one prompt, with
the log-probabilities of every prompt position, computed from scratch.

A guaranteed recompute, per engine (read in the installed code):
- vLLM 0.32: a request with ``prompt_logprobs`` skips reading the prefix cache and the KV
  connector (``SamplingParams.skip_reading_prefix_cache`` defaults to True when prompt_logprobs is
  set; ``Scheduler.schedule`` zeroes the connector's matched tokens for it). A fresh
  ``cache_salt`` is sent too: vLLM keys every cached block and LMCache's cache server every chunk
  by it, so an engine without that rule cannot match anything either.
- SGLang 0.5.23: the native ``/generate`` with ``return_logprob`` and ``logprob_start_len=0``
  limits the radix-cache match to 0 tokens (``Req.init_next_round_input``: ``max_prefix_len =
  min(max_prefix_len, logprob_start_len)``), so every position is computed.

The answer per position: the served token's log-probability, its rank, and the best candidate's.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

import httpx

from kvstack.clients.streaming import RequestResult
from kvstack.connectors.engines import ENGINE_SPECS, VLLM, EngineSpec
from kvstack.jsonvalue import JsonObject

SCORE_TIMEOUT_S = 300.0
# Each scoring request's fresh cache_salt starts so: its chunks are keyed apart from every prompt's.
SCORE_SALT_PREFIX = "kvstack-score-"
# What a served request the gate will judge asks for beyond an ordinary one (validation and bench):
# its token ids (what recompute scores) and the served path's own log-probability of each token
# (``logprobs: 1``; validation/noise.py compares it with recompute's).
CHECKED_EXTRA_BODY: JsonObject = {"return_token_ids": True}
CHECKED_LOGPROBS = 1


@dataclass(frozen=True)
class PositionScore:
    token: int  # the served token
    logprob: float  # recompute's log-probability of the served token
    rank: int  # its rank among recompute's candidates (1 = recompute's own choice)
    best: int  # recompute's own choice there
    best_logprob: float

    @property
    def deficit(self) -> float:
        """How far below recompute's choice the served token is, in nats (0 when it is the choice)."""
        return max(0.0, self.best_logprob - self.logprob)


def vllm_body(model: str, ids: list[int], top_k: int) -> JsonObject:
    return {
        "model": model,
        "prompt": ids,
        "max_tokens": 1,
        "temperature": 0.0,
        "prompt_logprobs": top_k,
        "cache_salt": f"{SCORE_SALT_PREFIX}{secrets.token_hex(16)}",
    }


def sglang_body(ids: list[int], top_k: int) -> JsonObject:
    return {
        "input_ids": ids,
        "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
        "return_logprob": True,
        "logprob_start_len": 0,
        "top_logprobs_num": top_k,
    }


def _vllm_position(entry: Any, token: int) -> PositionScore | None:
    """One element of vLLM's ``prompt_logprobs``: {"<id>": {"logprob", "rank", "decoded_token"}}."""
    if not isinstance(entry, dict):
        return None
    cands: dict[int, tuple[float, int]] = {}
    for key, value in entry.items():
        if isinstance(value, dict) and isinstance(value.get("logprob"), int | float):
            rank = value.get("rank")
            cands[int(key)] = (float(value["logprob"]), int(rank) if isinstance(rank, int) else 0)
    if token not in cands:
        return None
    best = max(cands, key=lambda t: cands[t][0])
    logprob, rank = cands[token]
    return PositionScore(token, logprob, rank or _rank(cands, token), best, cands[best][0])


def _rank(cands: dict[int, tuple[float, int]], token: int) -> int:
    return 1 + sum(lp > cands[token][0] for lp, _ in cands.values())


def parse_vllm(data: Any, start: int, served: list[int]) -> list[PositionScore] | str:
    try:
        plp = data["choices"][0]["prompt_logprobs"]
    except (KeyError, IndexError, TypeError):
        return "the scoring response has no prompt_logprobs"
    if not isinstance(plp, list) or len(plp) < start + len(served):
        covered = len(plp) if isinstance(plp, list) else 0
        return f"the scoring response covers {covered} prompt positions, not {start + len(served)}"
    out = []
    for j, token in enumerate(served):
        pos = _vllm_position(plp[start + j], token)
        if pos is None:
            return f"the scoring response has no log-probability for served token {j + 1}"
        out.append(pos)
    return out


def parse_sglang(data: Any, start: int, served: list[int], top_k: int) -> list[PositionScore] | str:
    """SGLang's meta_info: ``input_token_logprobs`` [(logprob, id, text)], ``input_top_logprobs``
    [[(logprob, id, text), ...] per position]."""
    try:
        meta = data["meta_info"]
        chosen, tops = meta["input_token_logprobs"], meta["input_top_logprobs"]
    except (KeyError, TypeError):
        return "the scoring response has no input_token_logprobs"
    if len(chosen) < start + len(served) or len(tops) < start + len(served):
        return f"the scoring response covers {len(chosen)} prompt positions, not {start + len(served)}"
    out = []
    for j, token in enumerate(served):
        own, top = chosen[start + j], tops[start + j] or []
        if own is None or own[0] is None or not top:
            return f"the scoring response has no log-probability for served token {j + 1}"
        cands = {int(c[1]): float(c[0]) for c in top if c and c[0] is not None}
        logprob = float(own[0])
        best = max(cands, key=lambda t: cands[t])
        rank = 1 + sum(lp > logprob for t, lp in cands.items() if t != token)
        if token not in cands and rank <= top_k:
            rank = top_k + 1  # outside the listed top-k, whatever its log-probability
        out.append(PositionScore(token, logprob, rank, best, max(cands[best], logprob)))
    return out


async def _post(
    client: httpx.AsyncClient,
    base_url: str,
    path: str,
    body: JsonObject,
    headers: dict[str, str],
    what: str,
) -> Any:
    """The JSON answer to one POST, or why there was none (``what`` names the request)."""
    try:
        resp = await client.post(
            base_url.rstrip("/") + path, json=body, headers=headers, timeout=SCORE_TIMEOUT_S
        )
    except httpx.HTTPError as exc:
        return f"{what} (POST {path}) failed: {type(exc).__name__}"
    if resp.status_code != 200:
        return f"{what} (POST {path}) answered HTTP {resp.status_code}: {resp.text[:160]}"
    try:
        return resp.json()
    except ValueError:
        return f"{what} (POST {path}) did not answer JSON"


def _spec(engine: str) -> EngineSpec:
    """``engine``'s spec; vLLM's routes for an engine kvstack has none for (the OpenAI ones)."""
    return ENGINE_SPECS.get(engine, VLLM)


async def score(
    client: httpx.AsyncClient,
    base_url: str,
    headers: dict[str, str],
    engine: str,
    model: str,
    prompt_ids: list[int],
    served_ids: list[int],
    top_k: int,
) -> list[PositionScore] | str:
    """Recompute's view of each served token, or why it could not be had."""
    ids = prompt_ids + served_ids
    on_generate = _spec(engine).scoring == "generate"
    if on_generate:
        path, body = "/generate", sglang_body(ids, top_k)
    else:
        path, body = "/v1/completions", vllm_body(model, ids, top_k)
    data = await _post(client, base_url, path, body, headers, "the scoring request")
    if isinstance(data, str):
        return data
    if on_generate:
        return parse_sglang(data, len(prompt_ids), served_ids, top_k)
    return parse_vllm(data, len(prompt_ids), served_ids)


async def recompute_answer(
    client: httpx.AsyncClient,
    base_url: str,
    headers: dict[str, str],
    engine: str,
    model: str,
    prompt_ids: list[int],
    tokens: int,
) -> RequestResult | str:
    """The prompt answered greedily (``tokens`` tokens, their ids and own log-probabilities) by a
    recompute that reads no cache, or why it could not be had. vLLM: ``prompt_logprobs`` skips
    reading the prefix cache and the connector, and a fresh ``cache_salt`` keys it apart (the rule
    above). SGLang's completions take no ``prompt_logprobs``: not available there."""
    spec = _spec(engine)
    if not spec.uncached_answer:
        return f"{spec.title}'s completions cannot be asked to read no cache"
    body = vllm_body(model, prompt_ids, 0)
    body.update(max_tokens=tokens, logprobs=1, return_token_ids=True, ignore_eos=True)
    path = "/v1/completions"
    data = await _post(client, base_url, path, body, headers, "the recompute's answer")
    if isinstance(data, str):
        return data
    try:
        choice = data["choices"][0]
        ids = [int(t) for t in choice["token_ids"]]
        own = [float(x) if isinstance(x, int | float) else None for x in choice["logprobs"]["token_logprobs"]]
    except (KeyError, IndexError, TypeError, ValueError):
        return f"the recompute's answer (POST {path}) has no token ids or log-probabilities"
    return RequestResult(ok=True, status=200, token_ids=ids, prompt_token_ids=prompt_ids, token_logprobs=own)
