"""A short stable hash of what makes stored KV reusable, used to namespace cache directories.

KV blocks written by one configuration are garbage to another: different weights (a dummy-weights
test run versus the real checkpoint), KV dtype, engine version, TP layout or chunk/page size all
change the bytes. Cache directories live under ``<cache_root>/<model>-<fingerprint>/`` so that
such runs can never read each other's blocks.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from pathlib import PurePosixPath

_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class KvIdentity:
    model: str  # local directory or hub id, as the engine is given it
    weights: str  # "dummy" or "real"
    config_sha256: str | None  # of config.json when the model is local
    model_dtype: str
    kv_cache_dtype: str
    engine: str
    engine_version: str | None
    connector: str
    connector_version: str | None
    tensor_parallel_size: int
    block_tokens: int  # LMCache chunk size or SGLang page size: the unit KV is stored in


def fingerprint(identity: KvIdentity) -> str:
    """12 hex digits of sha256 over the canonical JSON of ``identity``."""
    canonical = json.dumps(asdict(identity), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]


def namespace(model_name: str, fp: str) -> str:
    """Directory name for one identity: readable model slug plus the fingerprint."""
    slug = _SLUG.sub("-", PurePosixPath(model_name).name or model_name).strip("-.") or "model"
    return f"{slug[:48]}-{fp}"
