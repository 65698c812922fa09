"""CI's end-to-end run and scripts/e2e-sweeps split the e2e tests between them: every e2e test is
picked by exactly one, and CI's run names the ones it leaves out (docs/development.md)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support.deps import ROOT


def selection(script: str) -> str:
    """The -m expression of the script's end-to-end pytest run."""
    text = (ROOT / "scripts" / script).read_text()
    found = re.findall(r'pytest"? -m "(e2e[^"]*)"', text)
    assert len(found) == 1, (script, found)
    return found[0]


def collected(expression: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider", "-m", expression,
         "tests/e2e"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode in (0, 5), done.stdout[-2000:] + done.stderr[-2000:]  # 5: none selected
    return {line for line in done.stdout.splitlines() if "::" in line}


def test_every_e2e_test_runs_in_ci_or_in_the_sweep_script_and_none_in_both() -> None:
    ci, sweeps = selection("test"), selection("e2e-sweeps")
    assert ci == "e2e and not sweep" and sweeps == "e2e and sweep"
    everything, in_ci, swept = collected("e2e"), collected(ci), collected(sweeps)
    assert in_ci and swept, "each run selects some tests"
    assert in_ci | swept == everything and not in_ci & swept


def test_ci_names_what_it_leaves_to_the_sweep_script() -> None:
    text = (ROOT / "scripts" / "test").read_text()
    assert '--collect-only -m "e2e and sweep"' in text and "scripts/e2e-sweeps" in text
