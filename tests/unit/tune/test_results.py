"""results.json's typed model (tune/results.py) is what the writer writes: every document a tune
writes validates, comes back unchanged, and a key the model does not know is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from kvstack.tune.results import TuneResults
from kvstack.tune.tune import rank_inputs
from tests.unit.tune.helpers import StandIn, options, read, tune


def _round_trip(doc: dict[str, object]) -> dict[str, object]:
    return TuneResults.of(doc).model_dump(mode="json", by_alias=True, exclude_unset=True)


def test_a_ranking_and_a_measured_tune_are_the_models_documents(tmp_path: Path) -> None:
    opts = options(tmp_path, 32, replay_requests=24, objective="goodput", slo_ms=70.0)
    _, typed_ranking, _, _ = rank_inputs(opts, read(opts))
    ranked = typed_ranking.document()
    assert _round_trip(ranked) == ranked and "predicted_winner" not in ranked  # set only when measuring
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
    _, typed, _, _ = rank_inputs(opts, read(opts))
    doc = typed.document()
    with pytest.raises(ValidationError, match="surprise"):
        TuneResults.of({**doc, "surprise": 1})
    with pytest.raises(ValidationError):
        TuneResults.of({**doc, "candidates": [{**doc["candidates"][0], "rank": "first"}]})


def test_a_results_json_the_kvstack_before_the_typed_writer_wrote_loads_unchanged() -> None:
    """A tune that measured its costs, written at 1a1c99d (the writer built dicts then): --resume
    and --calibration DIR read it back, and the typed writer writes the same document."""
    from kvstack.tune.calibration import from_results
    from kvstack.tune.prove import previous_proof

    path = Path(__file__).resolve().parents[2] / "fixtures" / "results" / "tune-1a1c99d.json"
    written = path.read_text()
    typed = TuneResults.of(json.loads(written))
    assert json.dumps(typed.document(), indent=2) + "\n" == written  # byte for byte
    assert typed.measured is not None and typed.calibration_replays is not None
    proof = previous_proof(typed.measured, 600.0)
    assert [m.label for m in proof.measured] == [c.label for c in typed.measured.candidates]
    assert proof.measured[0].baseline and proof.measured[0].stats is not None and proof.replay is not None
    assert [m.document() for m in proof.measured] == list(typed.measured.candidates)
    cal = from_results(typed.calibration)
    assert (cal.plain_layout, cal.offload_layout) == ("none", "lmcache-mp")


def test_a_copy_sets_what_it_changes_and_leaves_the_rest_as_it_was(tmp_path: Path) -> None:
    opts = options(tmp_path, 32)
    _, typed, _, _ = rank_inputs(opts, read(opts))
    before = typed.document()
    ranked = typed.ranked("none")
    doc = ranked.document()
    # What ranked() assigns is now set (document() writes it), the rest is the original's.
    assert doc["predicted_winner"] == "none" and doc["winner"] is None
    assert {k: v for k, v in doc.items() if k not in ("predicted_winner", "winner")} == {
        k: v for k, v in before.items() if k != "winner"
    }
    assert "predicted_winner" not in typed.document()  # the original is unchanged
    chosen = ranked.with_winner("lmcache-mp")
    assert chosen.document()["winner"] == "lmcache-mp" and ranked.winner is None
