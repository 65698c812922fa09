"""A measured candidate's figures and their noise: bootstrap draws stratified in time, and paired
differences between two candidates replayed on the same requests."""

from __future__ import annotations

import numpy as np
import pytest

from kvstack.tune.noise import better, block_length, measure, paired, worse


def test_a_replay_whose_windows_hold_equal_figures_has_no_noise() -> None:
    # A trace's progression (later turns longer) is the same in every rerun: a draw keeps it. Twelve
    # levels, each filling one whole window of consecutive requests: nothing moves.
    n = 144
    assert block_length(n) == 12
    x = np.repeat(np.arange(1, 13) * 0.01, 12)
    st = measure(x.tolist())
    for iv in (st.p50, st.p90, st.mean):
        assert iv.low == iv.value == iv.high and iv.noise == 0.0
    assert st.p50.value == pytest.approx(np.percentile(x, 50))


def test_the_noise_grows_with_the_jitter_and_holds_the_figure() -> None:
    rng = np.random.default_rng(1)
    base = np.repeat(np.arange(1, 11) * 0.01, 10)
    quiet = measure((base + rng.normal(0, 0.0005, len(base))).tolist())
    loud = measure((base + rng.normal(0, 0.005, len(base))).tolist())
    assert 0 < quiet.p50.noise < loud.p50.noise and 0 < quiet.p90.noise < loud.p90.noise
    for st in (quiet, loud):
        for iv in (st.p50, st.p90, st.mean):
            assert iv.low <= iv.value <= iv.high


def test_goodput_is_the_share_within_the_slo() -> None:
    st = measure([0.01] * 30 + [0.5] * 10, slo_s=0.1)
    assert st.goodput is not None and st.goodput.value == 0.75
    assert measure([0.01, 0.02]).goodput is None


def test_a_paired_difference_shares_the_draws_of_both() -> None:
    # The same requests, one layout 5 ms slower on each: exactly +5 ms, whatever the mix drawn.
    rng = np.random.default_rng(2)
    a = rng.uniform(0.01, 0.2, 100)
    diff = paired((a + 0.005).tolist(), a.tolist(), "p50")
    assert diff.value == pytest.approx(0.005) and diff.low == pytest.approx(0.005)
    assert worse(diff) and not better(diff)
    # Within the noise: neither.
    jitter = paired((a + rng.normal(0, 0.01, 100)).tolist(), a.tolist(), "p90")
    assert jitter.low < 0 < jitter.high and not worse(jitter) and not better(jitter)
    # Goodput: higher is better.
    good = paired([0.01] * 40, [0.01] * 20 + [0.5] * 20, "goodput", slo_s=0.1)
    assert good.value == 0.5 and better(good, higher_is_better=True)
    with pytest.raises(ValueError, match="same requests"):
        paired([0.1], [0.1, 0.2], "p50")
