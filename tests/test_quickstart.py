"""End to end on the shipped MiniLM: the README's main example runs and reports what it promises."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import adapterfusion as af

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_quickstart_runs_on_the_shipped_encoder_and_data() -> None:
    try:
        af.default_encoder_path()
    except af.DefaultModelMissingError as error:
        pytest.skip(str(error))
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "quickstart.py"),
            "--adapter-steps",
            "2",
            "--fusion-steps",
            "2",
            "--train-examples",
            "16",
            "--dev-examples",
            "16",
            "--batch-size",
            "8",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert re.search(r"dev accuracy, ST-A: [01]\.\d{3}", result.stdout)
    assert re.search(r"dev accuracy, Fusion w/ ST-A: [01]\.\d{3}", result.stdout)
    rows = re.findall(r"^\s+(\d)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", result.stdout, flags=re.MULTILINE)
    assert [int(r[0]) for r in rows] == list(range(6))  # one row per MiniLM layer
    for row in rows:
        assert abs(sum(float(v) for v in row[1:]) - 1.0) < 2e-3  # attention over adapters sums to one


def test_the_readme_lists_the_setups_list_setups_returns() -> None:
    from adapterfusion.training import list_setups

    listed = re.search(r"# list_setups\(\): (.+)\n", (ROOT / "README.md").read_text())
    assert listed is not None, "README.md's training example shows what list_setups() returns"
    assert listed.group(1).split(", ") == list_setups()
