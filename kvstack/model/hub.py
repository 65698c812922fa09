"""Hugging Face ids (``org/name``): the local cache first, then only the small files a plan needs.

``huggingface_hub`` is imported inside the functions that reach the cache or the hub, so that
``kvstack --help`` and plans of local directories and catalog names never load it. Its settings
(HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE, HF_ENDPOINT) are read from the environment at each call
and passed explicitly: ``huggingface_hub.constants`` freezes them when the module is first imported.
The engine inherits the same environment, so it resolves the same id to the same snapshot.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from kvstack.errors import HubError
from kvstack.model.checkpoint import has_weights
from kvstack.redact import redact_text

# The hub's own rule (huggingface_hub.utils.validate_repo_id): [\w.-], no "--" or "..", <= 96 chars.
_REPO_ID = re.compile(r"[A-Za-z0-9_][\w.-]*/[A-Za-z0-9_][\w.-]*")
_TRUE = frozenset({"1", "ON", "YES", "TRUE"})
DEFAULT_ENDPOINT = "https://huggingface.co"
# One bounded try per request: huggingface_hub's own fallback retries for minutes without a cache.
# HF_HUB_ETAG_TIMEOUT, huggingface_hub's timeout for metadata requests, overrides it.
TIMEOUT_S = 3.0
CONFIG = "config.json"
SAFETENSORS_INDEX = "model.safetensors.index.json"
SINGLE_SAFETENSORS = "model.safetensors"


@dataclass(frozen=True)
class Snapshot:
    """One commit of a hub repository in the local cache (``.../snapshots/<commit>``)."""

    repo_id: str
    revision: str | None  # as asked (None: the default branch)
    commit: str
    path: Path
    fetched: bool = False  # True: its config.json was fetched from the hub just now
    weight_bytes: int | None = None  # the hub's size of the weight file, when it is not in the cache


def is_hub_id(spec: str) -> bool:
    """``org/name`` as the hub spells ids (not a path: no leading ``/``, ``.`` or ``~``)."""
    return (
        len(spec) <= 96
        and _REPO_ID.fullmatch(spec) is not None
        and "--" not in spec
        and ".." not in spec
        and not spec.endswith((".", "-"))
    )


def cache_dir() -> Path:
    """The hub cache, by huggingface_hub's rules: HF_HUB_CACHE, else HF_HOME/hub, else XDG/~."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(os.path.expandvars(explicit)).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    home = os.environ.get("HF_HOME") or os.path.join(xdg, "huggingface")
    return Path(os.path.expandvars(home)).expanduser() / "hub"


def offline_variable() -> str | None:
    """The variable that puts the hub offline (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE), if any."""
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(name, "").strip().upper() in _TRUE:
            return name
    return None


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def timeout_s() -> float:
    try:
        value = float(os.environ.get("HF_HUB_ETAG_TIMEOUT") or TIMEOUT_S)
    except ValueError:
        return TIMEOUT_S
    return value if value > 0 else TIMEOUT_S


def download_command(repo_id: str, revision: str | None = None) -> str:
    return f"hf download {repo_id}" + (f" --revision {revision}" if revision else "")


def token() -> str | None:
    """HF_TOKEN, else the hub's own login (``hf auth login``); a secret, never printed."""
    from huggingface_hub import get_token

    return get_token()


def _repo_dir(repo_id: str) -> Path:
    return cache_dir() / ("models--" + repo_id.replace("/", "--"))


def cached_refs(repo_id: str) -> list[str]:
    """The branches and tags the cache knows for ``repo_id`` (its refs/ files), sorted."""
    refs = _repo_dir(repo_id) / "refs"
    try:
        return sorted(str(p.relative_to(refs)) for p in refs.rglob("*") if p.is_file())
    except OSError:
        return []


def cached(repo_id: str, revision: str | None = None) -> Snapshot | None:
    """The cached snapshot holding ``repo_id``'s config.json at ``revision``; no network, never raises."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, CONFIG, cache_dir=str(cache_dir()), revision=revision)
    except (OSError, ValueError):
        return None
    if not isinstance(found, str):  # None (not cached) or the hub's "known not to exist" marker
        return None
    path = Path(found).parent
    return Snapshot(repo_id=repo_id, revision=revision, commit=path.name, path=path)


def _where(repo_id: str, revision: str | None) -> str:
    return repo_id + (f" at revision {revision!r}" if revision else "")


def require_online(repo_id: str, revision: str | None, weightless: bool = False) -> None:
    """Raise the offline error (one line, the download command) when the hub may not be asked.

    ``weightless``: the snapshot is cached, but without the weight files the engine needs.
    """
    variable = offline_variable()
    if variable is None:
        return
    refs = cached_refs(repo_id)
    where = f"the Hugging Face cache {cache_dir()}"
    if weightless:
        missing = f"{_where(repo_id, revision)} has no weight files in {where}"
    elif refs and revision:
        missing = f"{repo_id} is in {where} but not at revision {revision!r} (cached: {', '.join(refs)})"
    else:
        missing = f"{_where(repo_id, revision)} is not in {where}"
    raise HubError(
        f"{missing}, and {variable}=1 forbids fetching it; download it with: "
        f"{download_command(repo_id, revision)}",
        hint=f"run that without {variable}=1, or point HF_HOME (or HF_HUB_CACHE) at the cache that holds it",
    )


def fetch(repo_id: str, revision: str | None = None) -> Snapshot:
    """Online: config.json and, when the repo has one, the safetensors index into the cache.

    Every request is bounded by ``timeout_s()`` and the first one is tried once, so an unreachable
    hub fails in seconds. Errors become one HubError naming the cause; the token is never shown.
    """
    require_online(repo_id, revision)
    secret = _quiet_client()
    try:
        return _fetch(repo_id, revision, secret or False)
    except Exception as exc:  # the boundary: huggingface_hub's and its HTTP client's errors
        _raise_translated(exc, repo_id, revision, secret, endpoint())


def _quiet_client() -> str | None:
    """The token (or None), with telemetry and progress bars off for this process.

    Telemetry's user agent first asks the hub for its agent registry (up to 3 s more against a hub
    out of reach); kvstack's few requests go without it, and without progress bars for two small
    files. Both settings hold for this process only, not the engine's.
    """
    from huggingface_hub import constants
    from huggingface_hub.utils.tqdm import disable_progress_bars

    constants.HF_HUB_DISABLE_TELEMETRY = True
    disable_progress_bars()
    return token()


def _head_config(repo_id: str, revision: str | None, auth: str | bool) -> None:
    """One HEAD of config.json, tried once: a hub out of reach ends here, not in minutes of retries."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    base = endpoint()
    url = hf_hub_url(repo_id, CONFIG, revision=revision, endpoint=base)
    get_hf_file_metadata(url, token=auth, timeout=timeout_s(), endpoint=base)


def _remote_missing(exc: Exception) -> bool:
    """The hub answered that a file does not exist (not: the cache lacks it after a network error)."""
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    return isinstance(exc, EntryNotFoundError) and not isinstance(exc, LocalEntryNotFoundError)


def require_weights(repo_id: str, revision: str | None = None) -> None:
    """Before a launch: the engine will find ``repo_id``'s weights, in the cache or on the hub.

    A snapshot kvstack fetched for a plan holds config.json and the index only, and a catalog id
    may not be cached at all: offline, the engine would fail minutes later (or load nothing).
    Offline this raises the one-line error with the download command; online it asks the hub
    once (bounded, seconds), since the engine downloads the weights itself.
    """
    snapshot = cached(repo_id, revision)
    if snapshot is not None and has_weights(snapshot.path):
        return
    require_online(repo_id, revision, weightless=snapshot is not None)
    secret = _quiet_client()
    try:
        _head_config(repo_id, revision, secret or False)
    except Exception as exc:  # the boundary: huggingface_hub's and its HTTP client's errors
        _raise_translated(exc, repo_id, revision, secret, endpoint())


def _fetch(repo_id: str, revision: str | None, auth: str | bool) -> Snapshot:
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url

    base, cache, bound = endpoint(), str(cache_dir()), timeout_s()
    _head_config(repo_id, revision, auth)

    def download(filename: str) -> Path:
        return Path(
            hf_hub_download(
                repo_id,
                filename,
                revision=revision,
                cache_dir=cache,
                endpoint=base,
                token=auth,
                etag_timeout=bound,
            )
        )

    config = download(CONFIG)
    commit = config.parent.name
    weight_bytes: int | None = None
    try:
        download(SAFETENSORS_INDEX)  # its total_size is the checkpoint's size
    except Exception as exc:
        if not _remote_missing(exc):
            raise
        # One weight file: the hub knows its size without a download.
        single = hf_hub_url(repo_id, SINGLE_SAFETENSORS, revision=commit, endpoint=base)
        try:
            weight_bytes = get_hf_file_metadata(single, token=auth, timeout=bound, endpoint=base).size
        except Exception as missing:
            if not _remote_missing(missing):
                raise
    return Snapshot(
        repo_id=repo_id,
        revision=revision,
        commit=commit,
        path=config.parent,
        fetched=True,
        weight_bytes=weight_bytes,
    )


def _raise_translated(
    exc: Exception, repo_id: str, revision: str | None, secret: str | None, base: str
) -> NoReturn:
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    page = f"{base}/{repo_id}"
    login = "set HF_TOKEN or run `hf auth login`"
    the_token = "the Hugging Face token (HF_TOKEN or hf auth login)"
    if isinstance(exc, GatedRepoError):
        if secret is None:
            message = f"{repo_id} is a gated model and no Hugging Face token is set (HF_TOKEN)"
            hint = f"accept its terms at {page}, then {login}"
        else:
            message = f"{repo_id} is a gated model and {the_token} cannot read it"
            hint = f"accept its terms at {page} with that token's account, or set HF_TOKEN to one with access"
    elif isinstance(exc, RevisionNotFoundError):
        message = f"{repo_id} has no revision {revision!r} on the Hugging Face Hub"
        hint = "give a branch, tag or commit that exists, or drop --revision"
    elif isinstance(exc, RepositoryNotFoundError):
        if secret is None:
            message = f"the Hugging Face Hub has no model {repo_id} (or it is private and no token is set)"
            hint = f"check the id; for a private model {login}"
        else:
            message = f"the Hugging Face Hub has no model {repo_id} that {the_token} can read"
            hint = "check the id, or set HF_TOKEN to a token with access"
    elif _remote_missing(exc):
        message = f"{_where(repo_id, revision)} has no config.json on the Hugging Face Hub"
        hint = "kvstack plans from a transformers config.json: give a local directory or a catalog name"
    elif isinstance(exc, HfHubHTTPError) and exc.response is not None:
        message = f"the Hugging Face Hub answered {exc.response.status_code} for {_where(repo_id, revision)}"
        hint = f"try again later, or download it with: {download_command(repo_id, revision)}"
    else:
        why = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
        message = f"cannot reach the Hugging Face Hub at {base} for {_where(repo_id, revision)} ({why})"
        hint = (
            f"download it where the hub is reachable ({download_command(repo_id, revision)}), "
            "or set HF_HUB_OFFLINE=1 to use only the local cache"
        )
    secrets = [secret] if secret else []
    raise HubError(redact_text(message, secrets), hint=redact_text(hint, secrets)) from exc
