"""One exception tree for kvstack.

Every error a user can cause or meet derives from ``KvstackError``. The CLI maps the tree to
exit codes in exactly one place (``kvstack.cli.app``): ``InputError`` -> 2, everything else -> 1.
Third-party errors are translated at the boundary that meets them, with ``raise ... from exc``.
"""

from __future__ import annotations


class KvstackError(Exception):
    """Base of every kvstack error. ``hint`` says what to do next."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


# --- bad usage or input: exit 2 -------------------------------------------------------------


class InputError(KvstackError):
    """The user asked for something malformed or impossible. Exit code 2."""

    exit_code = 2


class SnapshotError(InputError):
    """A hardware snapshot file is missing, not JSON, or has a field of the wrong type."""


class ModelConfigError(InputError):
    """A model directory, config.json or catalog name is unusable."""


class MissingConfigKey(ModelConfigError):
    """config.json lacks a key kvstack's reader needs (the engine may know the model without it)."""


class HubError(ModelConfigError):
    """A Hugging Face id cannot be resolved: not cached while offline, gated, missing, hub unreachable."""


class WorkloadError(InputError):
    """A workload profile is missing or malformed."""


class UnsupportedError(InputError):
    """The request is well-formed but this hardware or software cannot run it."""


class PathError(InputError):
    """A path the user gave cannot be used (not writable, tmpfs, unsafe permissions, too small)."""


class NetworkTargetError(InputError):
    """A port, URL or remote store the user named is malformed, busy or unreachable."""


class MissingProgramError(InputError):
    """A program or optional Python package kvstack needs is not installed."""


# --- runtime failures: exit 1 ---------------------------------------------------------------


class PlanInfeasible(KvstackError):
    """The plan cannot be satisfied on this hardware (e.g. the weights do not fit)."""


class ProbeError(KvstackError):
    """A probe failed hard (most probes fail soft and never raise this)."""


class EngineError(KvstackError):
    """The engine or a helper server failed to start, died, or never became ready."""


class WrongKvServed(KvstackError):
    """The canary found an answer served from a cache that recompute does not give (--on-wrong-kv stop)."""


class ValidationFailed(KvstackError):
    """The validation pass ran and at least one applicable step failed."""


class Interrupted(KvstackError):
    """kvstack received SIGINT or SIGTERM and stopped what it started."""

    exit_code = 130
