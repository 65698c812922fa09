"""GET /v1/models: what an OpenAI-compatible server serves, and every way asking it can fail."""

from __future__ import annotations

from typing import Any

import httpx

from kvstack.clients.client import auth_headers, trusts_env
from kvstack.errors import NetworkTargetError
from kvstack.jsonvalue import JsonObject
from kvstack.redact import redact_url

PATH = "/v1/models"


def request_failed(exc: httpx.HTTPError, base_url: str) -> NetworkTargetError:
    """The error for a /v1/models request that got no answer."""
    shown = redact_url(base_url)
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return NetworkTargetError(
            f"nothing is listening at {shown}", hint="start the server (kvstack serve ...) or correct --url"
        )
    return NetworkTargetError(
        f"the server at {shown} did not answer {PATH} ({type(exc).__name__})",
        hint="check that --url points at an OpenAI-compatible server that is up",
    )


def model_cards(resp: httpx.Response, base_url: str) -> list[JsonObject]:
    """The model cards of a /v1/models answer (at least one, each with an ``id``)."""
    shown = redact_url(base_url)
    if resp.status_code in (401, 403):
        raise NetworkTargetError(
            f"the server at {shown} refused the API key (HTTP {resp.status_code})",
            hint="pass the server's key with --api-key-file FILE or KVSTACK_API_KEY",
        )
    data: Any = None
    if resp.status_code == 200:
        try:
            data = resp.json().get("data")
        except (ValueError, AttributeError):
            data = None
    cards = [d for d in data if isinstance(d, dict) and "id" in d] if isinstance(data, list) else []
    if not cards:
        raise NetworkTargetError(
            f"{shown} does not serve the OpenAI API ({PATH} answered HTTP {resp.status_code} with no model)",
            hint="point --url at a vLLM or SGLang server that is up",
        )
    return cards


def served_models(base_url: str, api_key: str | None, timeout_s: float = 10.0) -> list[JsonObject]:
    """The model cards ``base_url`` serves (one blocking request)."""
    try:
        with httpx.Client(trust_env=trusts_env(base_url), timeout=timeout_s) as client:
            resp = client.get(base_url + PATH, headers=auth_headers(api_key))
    except httpx.HTTPError as exc:
        raise request_failed(exc, base_url) from exc
    return model_cards(resp, base_url)
