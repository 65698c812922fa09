"""A shared tier's writers agree on their KV, or a new one does not start (issue 44).

Before a launch on a remote tier, the tier's live writers (remote/writers.py) are compared with
what each engine of the launch would store (its TierKv, from rendering): one that differs is
refused, naming the field, its value on both sides, who set it and the fix, or, with
``--allow-mixed-tier``, served with a warning that its keys are its own. While serving, every engine
stays recorded (refreshed on a thread) and is removed when the run stops.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from kvstack.errors import InputError
from kvstack.remote.writers import REFRESH_S, TierRecords, TierRecordsError, TierWriter, instance_name
from kvstack.remoteurl import RemoteURL
from kvstack.runtime.specs import LaunchSpec
from kvstack.runtime.tier_kv import FIELDS, TierKv
from kvstack.serving.prepare import Launch

# What makes each field agree, said to the person whose start was refused.
FIXES: dict[str, str] = {
    "model": "serve the same model path (LMCache's keys hold it) on every writer",
    "revision": "serve the same checkpoint on every writer",
    "weights": "serve real weights on every writer",
    "kv_cache_dtype": "give every writer the same KV dtype (--kv-dtype)",
    "chunk_tokens": "give every writer the same chunk size (the same --tuned, or none)",
    "block_tokens": "give every writer the same --block-size after --, or none",
    "hash_algorithm": "run the same kvstack version on every writer",
    "hash_seed": "set the same PYTHONHASHSEED for every writer, or unset it on all",
    "tensor_parallel_size": "give every writer the same tensor-parallel size (--tp)",
    "connector": "give every writer the same --offload",
    "connector_version": "install the same LMCache version on every writer",
}


class TierKvMismatch(InputError):
    """A writer of the shared tier stores its KV otherwise."""


def writers_of(specs: list[LaunchSpec], run_dirs: list[str]) -> list[TierWriter]:
    now = datetime.now(UTC).timestamp()
    return [
        TierWriter(
            kv=spec.tier_kv,
            fingerprint=spec.tier_kv.fingerprint(),
            instance=instance_name(spec.base_url),
            run_dir=run_dir,
            pid=os.getpid(),
            since=now,
        )
        for spec, run_dir in zip(specs, run_dirs, strict=True)
        if spec.tier_kv is not None
    ]


def mismatch_line(mine: TierKv, theirs: TierWriter, shown_url: str) -> tuple[str, str]:
    """(the one-line problem, the fix) for a writer whose KV differs from ``mine``."""
    fields = mine.differences(theirs.kv)
    diff = "; ".join(f"{FIELDS[f]} {mine.shown(f)} here, {theirs.kv.shown(f)} there" for f in fields)
    problem = (
        f"the shared tier {shown_url} has a writer, {theirs.instance} (run {theirs.run_dir}), whose KV "
        f"does not match: {diff}: neither would read the other's keys"
    )
    fix = "; ".join(FIXES[f] for f in fields)
    # Only `kvstack serve` serves on a shared tier (bench and tune serve their layouts without one),
    # so the hint names the command that takes the flag.
    return problem, f"{fix}; or serve with keys of its own: kvstack serve --allow-mixed-tier"


def check_writers(
    url: RemoteURL | str, shown_url: str, specs: list[LaunchSpec], allow_mixed: bool
) -> list[str]:
    """Refuse (TierKvMismatch) a launch whose KV differs from a live writer's, or, with
    ``allow_mixed``, the warnings; its own engines' records (same host:port) are not compared."""
    mine = [s.tier_kv for s in specs if s.tier_kv is not None]
    if not mine:
        return []
    own = {instance_name(s.base_url) for s in specs}
    try:
        with TierRecords(url) as records:
            live = [w for w in records.writers() if w.instance not in own]
    except TierRecordsError as exc:
        return [f"{exc.message}: the tier's other writers were not compared"]
    warnings = []
    for theirs in live:
        if theirs.fingerprint == mine[0].fingerprint():
            continue
        problem, fix = mismatch_line(mine[0], theirs, shown_url)
        if not allow_mixed:
            raise TierKvMismatch(problem, hint=fix)
        warnings.append(f"{problem}; --allow-mixed-tier: this engine's hits on the shared tier are its own")
    return warnings


@contextmanager
def recorded(url: RemoteURL | str, writers: list[TierWriter], warn: Callable[[str], None]) -> Iterator[None]:
    """Every writer recorded on the tier, refreshed every REFRESH_S, removed on exit; the store
    failing to take them is a warning once (its reachability is watched elsewhere)."""
    if not writers:
        yield
        return
    stop = threading.Event()
    warned: list[str] = []

    def put() -> None:
        try:
            with TierRecords(url) as records:
                for w in writers:
                    records.register(w)
        except TierRecordsError as exc:
            if not warned:
                warned.append(exc.message)
                warn(exc.message)

    def loop() -> None:
        while not stop.wait(REFRESH_S):
            put()

    put()
    thread = threading.Thread(target=loop, name="kvstack-tier-writers", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
        try:
            with TierRecords(url) as records:
                for w in writers:
                    records.unregister(w.instance)
        except TierRecordsError:
            pass  # the records expire on their own


def _remote(launch: Launch) -> RemoteURL | None:
    first = launch.replicas[0]
    return first.options.remote if first.spec.tier_kv is not None else None


def check_launch(launch: Launch) -> list[str]:
    """check_writers for every engine of ``launch`` on its remote tier; nothing without one."""
    url = _remote(launch)
    if url is None:
        return []
    specs = [p.spec for p in launch.replicas]
    return check_writers(url, url.redacted(), specs, launch.request.allow_mixed_tier)


@contextmanager
def launch_recorded(launch: Launch, warn: Callable[[str], None]) -> Iterator[None]:
    """``launch``'s engines recorded on its remote tier while the block runs."""
    url = _remote(launch)
    if url is None:
        yield
        return
    specs = [p.spec for p in launch.replicas]
    with recorded(url, writers_of(specs, [str(p.run_dir) for p in launch.replicas]), warn):
        yield
