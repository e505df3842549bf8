"""huggingface_hub reads HF_HUB_ETAG_TIMEOUT and HF_HUB_DOWNLOAD_TIMEOUT as whole numbers when transformers imports
it (datasets its HF_DATASETS_IN_MEMORY_MAX_SIZE as a number when task data first loads); a value that is none ended
`import adapterfusion` and every `adapterfusion` command (or a run, at its data) with a ValueError traceback.
The package's first import now names the variable: one line and exit status 2 as the command,
the library's ConfigError when imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

COMMAND = "from adapterfusion.cli import main\nimport sys\nsys.exit(main(['info']))\n"


def _run(script: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("HF_HUB_") or k == "HF_HUB_OFFLINE"}
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env={**environment, **variables}
    )


@pytest.mark.parametrize(
    ("name", "value", "wanted"),
    [
        ("HF_HUB_ETAG_TIMEOUT", "abc", "is not a whole number of seconds, which huggingface_hub"),
        ("HF_HUB_DOWNLOAD_TIMEOUT", "", "is not a whole number of seconds, which huggingface_hub"),
        ("HF_DATASETS_IN_MEMORY_MAX_SIZE", "2GB", "is not a number of bytes, which datasets"),
    ],
)
def test_the_command_names_a_numeric_variable_that_is_no_number(
    tmp_path: Path, name: str, value: str, wanted: str
) -> None:
    script = tmp_path / "adapterfusion"  # the console script's name: sys.argv[0]
    script.write_text(COMMAND)
    done = _run(script, **{name: value})
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    line = done.stderr.strip()
    assert line.startswith(f"error: the environment variable {name}={value!r} {wanted}") and "\n" not in line
    assert line.endswith("or unset it"), line


def test_a_library_import_raises_the_librarys_error_and_a_number_passes(tmp_path: Path) -> None:
    script = tmp_path / "notebook.py"
    script.write_text(
        "try:\n    import adapterfusion\nexcept Exception as error:\n    print(type(error).__name__, error)\n"
        "else:\n    print('imported')\n"
    )
    refused = _run(script, HF_HUB_ETAG_TIMEOUT="1.5")
    assert refused.stdout.startswith("ConfigError the environment variable HF_HUB_ETAG_TIMEOUT='1.5'"), refused
    assert _run(script, HF_HUB_ETAG_TIMEOUT=" 20 ").stdout.strip() == "imported"  # int() takes it, as the Hub's does
