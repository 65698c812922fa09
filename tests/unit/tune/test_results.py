"""results.json's typed model (tune/results.py) is what the writer writes: every document a tune
writes validates, comes back unchanged, and a key the model does not know is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from kvstack.tune.command import rank_inputs
from kvstack.tune.results import TuneResults
from tests.unit.tune.helpers import StandIn, options, read, tune


def _round_trip(doc: dict[str, object]) -> dict[str, object]:
    return TuneResults.of(doc).model_dump(mode="json", by_alias=True, exclude_unset=True)


def test_a_ranking_and_a_measured_tune_are_the_models_documents(tmp_path: Path) -> None:
    opts = options(tmp_path, 32, replay_requests=24, objective="goodput", slo_ms=70.0)
    _, ranked, _, _ = rank_inputs(opts, read(opts))
    assert _round_trip(ranked) == ranked
    run = tune(opts, start=StandIn())
    written = (tmp_path / "tune" / "results.json").read_text()
    doc = json.loads(written)
    assert _round_trip(doc) == doc and doc == json.loads(json.dumps(run.doc))
    assert json.dumps(_round_trip(doc), indent=2) + "\n" == written  # byte for byte
    typed = run.results
    assert typed.measured is not None and typed.measured.verdict is not None
    assert typed.measured.verdict.winner == doc["winner"] and typed.measured.slo_ms == 70.0
    assert [c.label for c in typed.measured.candidates] == [m.label for m in run.proof.measured]  # type: ignore[union-attr]


def test_a_key_the_model_does_not_know_is_refused(tmp_path: Path) -> None:
    opts = options(tmp_path, 32)
    _, doc, _, _ = rank_inputs(opts, read(opts))
    with pytest.raises(ValidationError, match="surprise"):
        TuneResults.of({**doc, "surprise": 1})
    with pytest.raises(ValidationError):
        TuneResults.of({**doc, "candidates": [{**doc["candidates"][0], "rank": "first"}]})
