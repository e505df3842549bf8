"""Ctrl-C while the `adapterfusion` command is still importing torch and transformers ends it with one line and exit
status 130, not a KeyboardInterrupt traceback from inside an import; imported as a library, SIGINT stays Python's."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="sends itself a POSIX SIGINT")

# Sends itself SIGINT as the first `import torch` starts: after the package's first import set its handler, while
# the imports run (as a user's Ctrl-C during the seconds they take would).
INTERRUPTED_IMPORT = """
import builtins, os, signal, sys
real_import = builtins.__import__
def interrupting(name, *args, **kwargs):
    if name == "torch":
        os.kill(os.getpid(), signal.SIGINT)
    return real_import(name, *args, **kwargs)
builtins.__import__ = interrupting
from adapterfusion.cli import main
sys.exit(main(["info"]))
"""


def _as_from_a_terminal() -> None:
    """SIGINT as a command started from a terminal has it: a test run in the background (nohup, `&` in a script, as
    CI may) ignores SIGINT, and its children would inherit that (Python then keeps it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _run(script: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, preexec_fn=_as_from_a_terminal
    )


def test_ctrl_c_while_the_command_imports_ends_it_quietly(tmp_path: Path) -> None:
    script = tmp_path / "adapterfusion"  # the console script's name: sys.argv[0]
    script.write_text(INTERRUPTED_IMPORT)
    done = _run(script)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.strip() == "interrupted while starting"


def test_a_library_import_leaves_sigint_to_python(tmp_path: Path) -> None:
    script = tmp_path / "notebook.py"
    script.write_text(
        "import signal, adapterfusion\nprint(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    )
    done = _run(script)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr


def test_once_main_runs_ctrl_c_is_the_commands_own_answer(tmp_path: Path) -> None:
    """After the imports, main's `except KeyboardInterrupt` answers (exit 130, its own line), as before."""
    script = tmp_path / "adapterfusion"
    script.write_text(
        "import os, signal, sys\n"
        "import adapterfusion.cli as cli\n"
        "def interrupted(args):\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    signal.pause()\n"
        "cli._info = interrupted\n"  # what `info` runs, looked up when main builds its parser
        "sys.exit(cli.main(['info']))\n"
    )
    done = _run(script)
    assert done.returncode == 130 and "interrupted at" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_worker_the_command_spawns_keeps_pythons_sigint(tmp_path: Path) -> None:
    """A spawned worker (the process executor's) inherits the command's argv and imports its main module, and so the
    package, while it starts: it must not take the quiet handler there, which would end a job with os._exit on
    Ctrl-C, skipping its cleanup (the process executor's workers answer Ctrl-C themselves: executors.py)."""
    script = tmp_path / "adapterfusion"
    script.write_text(
        "import multiprocessing, signal\n"
        "import adapterfusion\n"  # as the console script imports the package: in the worker too, while it starts
        "def probe():\n"
        "    return signal.getsignal(signal.SIGINT) is signal.default_int_handler\n"
        "if __name__ == '__main__':\n"
        "    print(signal.getsignal(signal.SIGINT).__name__)\n"
        "    with multiprocessing.get_context('spawn').Pool(1) as pool:\n"
        "        print(pool.apply(probe))\n"
    )
    done = _run(script)
    assert done.returncode == 0 and done.stdout.split() == ["_exit_quietly", "True"], done.stderr


def test_an_empty_or_missing_argv_imports() -> None:
    for setup in ("sys.argv = []", "del sys.argv"):
        code = f"import sys; {setup}; import adapterfusion; print('ok')"
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert done.stdout.strip() == "ok", done.stderr


def test_sigterm_ends_a_command_as_ctrl_c_does(tmp_path: Path) -> None:
    """`kill PID` (a scheduler's stop) ended a run with status -15 and no word on resuming; it is answered as Ctrl-C
    is (exit 130, the interrupted line), except by `serve`, which drains on SIGTERM (tests/serving)."""
    script = tmp_path / "adapterfusion"
    script.write_text(
        "import os, signal, sys\n"
        "import adapterfusion.cli as cli\n"
        "def terminated(args):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    signal.pause()\n"
        "cli._info = terminated\n"
        "sys.exit(cli.main(['info']))\n"
    )
    done = _run(script)
    assert done.returncode == 130 and "interrupted at" in done.stderr and "Traceback" not in done.stderr, done.stderr
