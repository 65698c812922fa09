"""Secrets a deployment references and never holds: the API key and the Redis URL, from Kubernetes
Secrets; and the hash seed every pod pins, so pods sharing a tier hash alike (docs/shared-tier.md)."""

from __future__ import annotations

import yaml

from kvstack.export.bundle import ExportFile
from kvstack.remoteurl import RemoteURL

API_KEY_SECRET_KEY = "api-key"  # the key of the API key Secret (created by the user from a file)
REDIS_SECRET_KEY = "url"  # the key of the Redis Secret that holds the remote tier's whole URL
REDIS_SECRET_FILE = "redis-secret.yaml"
# PYTHONHASHSEED pinned in every pod: vLLM derives its block hashes' seed from it when set
# (vllm/v1/core/kv_cache_utils.py resolve_none_hash_seed), so two pods agree whatever their image sets.
HASH_SEED = "0"


def api_key_ref(name: str) -> dict[str, str]:
    """The secretKeyRef of a deployment's API key Secret (``<name>-api-key``, key ``api-key``)."""
    return {"name": f"{name}-api-key", "key": API_KEY_SECRET_KEY}


def pod_env(name: str) -> list[dict[str, object]]:
    """What every vLLM pod of a deployment gets: the pinned hash seed, and its API key from the Secret."""
    return [
        {"name": "PYTHONHASHSEED", "value": HASH_SEED},
        {"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": api_key_ref(name)}},
    ]


def api_key_note(name: str) -> str:
    return (
        f"create the API key Secret first: kubectl create secret generic {name}-api-key "
        f"--from-file={API_KEY_SECRET_KEY}=KEYFILE"
    )


def secret_manifest(name: str, url: str) -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "type": "Opaque",
        "stringData": {REDIS_SECRET_KEY: url},
    }
    header = f"# The KV remote tier's Redis URL, password included: kubectl apply -f {REDIS_SECRET_FILE}\n"
    return header + yaml.safe_dump(doc, sort_keys=False)


def redis_url_env(url: RemoteURL, secret_name: str) -> tuple[list[dict[str, object]], ExportFile | None]:
    """LMCache's remote URL variables; a URL with a credential goes whole into a Secret (written 0600,
    never printed) that the variable references."""
    env: list[dict[str, object]]
    secret = None
    if url.has_secret:
        ref = {"secretKeyRef": {"name": secret_name, "key": REDIS_SECRET_KEY}}
        env = [{"name": "LMCACHE_REMOTE_URL", "valueFrom": ref}]
        content = secret_manifest(secret_name, url.raw)
        secret = ExportFile(name=REDIS_SECRET_FILE, content=content, mode=0o600, secret=True)
    else:
        env = [{"name": "LMCACHE_REMOTE_URL", "value": url.raw}]
    env.append({"name": "LMCACHE_REMOTE_SERDE", "value": "naive"})
    return env, secret


def pod_redis_env(
    url: RemoteURL, name: str, files: list[ExportFile], notes: list[str]
) -> list[dict[str, object]]:
    """``redis_url_env`` for a pod: its Secret added to ``files``, and what to do said in ``notes``
    (create the Secret; a loopback URL is the pod itself)."""
    env, secret = redis_url_env(url, f"{name}-redis")
    if secret is not None:
        files.append(secret)
        notes.append(f"create the Redis URL secret ({name}-redis) first: kubectl apply -f {secret.name}")
    if url.is_loopback():
        notes.append(
            f"the remote URL {url.redacted()} is a loopback address, which inside a pod is the pod "
            "itself: point --remote at a Redis service the cluster can reach"
        )
    return env
