"""`kvstack serve`'s use case: check the request, prepare the launch, then run it (or, for a dry run,
hand it back to be shown)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kvstack.errors import InputError
from kvstack.planning.predict.trace_sizing import SizingTrace
from kvstack.serving.lifecycle import ServeEvents, run
from kvstack.serving.prepare import Launch, prepare
from kvstack.serving.request import ServeRequest
from kvstack.serving.request_checks import check_request


def serve(
    request: ServeRequest,
    events: ServeEvents,
    trace: SizingTrace | None = None,
    dry_run: Callable[[Launch], None] | None = None,
) -> int:
    """Serve ``request`` until stopped and return the exit code; with ``dry_run``, prepare the
    launch, hand it to ``dry_run`` and start nothing."""
    if not request.validate_after_start and request.exit_after_validate:
        raise InputError("--no-validate and --exit-after-validate contradict each other", hint="drop one")
    if request.uses_demo_model:
        weights = (
            "seeded weights from scripts/make-demo-model"
            if (Path(request.model_spec()) / "model.safetensors").is_file()
            else "dummy weights: scripts/make-demo-model --weights generates real ones"
        )
        events.message(
            f"no --model given: serving the bundled demo model ({request.model_spec()}, {weights})"
        )
    for warning in check_request(request, dry_run=dry_run is not None):
        events.warning(warning)
    launch = prepare(request, trace=trace)
    if dry_run is not None:
        dry_run(launch)
        return 0
    return run(launch, events)  # the plan's warnings and the launch's notes follow its preflight
