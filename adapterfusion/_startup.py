"""Ctrl-C while the `adapterfusion` command imports torch and transformers (seconds, before cli.main can catch
anything) printed a KeyboardInterrupt traceback from deep inside an import. Run as that command, the package's first
import sets a SIGINT handler that ends the process quietly; cli.main puts Python's own handler back, and from then on
its `except KeyboardInterrupt` speaks. Imported as a library (a notebook, a script), nothing changes."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from adapterfusion.errors import ConfigError  # light: no torch, run before the package's other imports

COMMAND = "adapterfusion"  # the console script's name (pyproject.toml [project.scripts])
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a process ended by Ctrl-C


def _is_the_command() -> bool:
    """Whether this process is the `adapterfusion` command: not a worker it spawned, which inherits its argv and
    imports it as its main module while it starts. sys.argv may be empty or missing where Python is embedded."""
    argv = getattr(sys, "argv", None) or [""]
    return (
        Path(str(argv[0])).name == COMMAND
        # a spawned child is named (SpawnProcess-1) before it imports its parent's main module, and has a
        # parent_process() only after that import
        and multiprocessing.current_process().name == "MainProcess"
        and multiprocessing.parent_process() is None
    )


def quiet_interrupt_while_importing() -> None:
    """Set the quiet SIGINT handler when this process is the `adapterfusion` command (a worker it spawned answers its
    Ctrl-C with its own code), and not where SIGINT is ignored (a background job of a non-interactive shell)."""
    if _is_the_command() and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _exit_quietly)


def restore_interrupt() -> None:
    """Python's own SIGINT handler again (KeyboardInterrupt), where the quiet one was set."""
    if signal.getsignal(signal.SIGINT) is _exit_quietly:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def terminate_as_interrupt() -> None:
    """SIGTERM (`kill PID`, a batch scheduler's stop) raises KeyboardInterrupt, so a command ends as on Ctrl-C: the
    runner marks its running job interrupted and says how to resume. Left alone where SIGTERM already has a handler
    (an application embedding the CLI) or off the main thread, where no handler can be set."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _exit_quietly(signum: int, frame: FrameType | None) -> None:
    # Only imports have run: nothing is written yet, so nothing needs unwinding (os._exit skips half-imported
    # modules' finalizers, which could raise again).
    sys.stderr.write("interrupted while starting\n")
    sys.stderr.flush()
    os._exit(EXIT_INTERRUPTED)


# Read as numbers when their packages are imported (huggingface_hub with transformers, datasets when data first
# loads), failing there with a bare ValueError traceback: name -> (what it must be, its package, the reader).
NUMERIC_VARIABLES: dict[str, tuple[str, str, type]] = {
    "HF_HUB_ETAG_TIMEOUT": ("a whole number of seconds", "huggingface_hub (imported with transformers)", int),
    "HF_HUB_DOWNLOAD_TIMEOUT": ("a whole number of seconds", "huggingface_hub (imported with transformers)", int),
    "HF_DATASETS_IN_MEMORY_MAX_SIZE": ("a number of bytes", "datasets (imported to load task data)", float),
}


def hub_environment_problem() -> str | None:
    """What is wrong with those variables, before their package's import meets it."""
    for name, (wanted, package, reader) in NUMERIC_VARIABLES.items():
        value = os.environ.get(name)
        if value is None:
            continue
        try:
            reader(value)
        except ValueError:
            return (
                f"the environment variable {name}={value!r} is not {wanted}, which {package} needs it to be; set "
                f"it to one (e.g. {name}={10 if reader is int else 0}) or unset it"
            )
    return None


def check_hub_environment() -> None:
    """Refuse a bad Hub variable now: as the `adapterfusion` command with one line and exit status 2, as the CLI
    refuses any bad input; imported as a library, with the library's ConfigError."""
    problem = hub_environment_problem()
    if problem is None:
        return
    if _is_the_command():
        sys.stderr.write(f"error: {problem}\n")
        sys.stderr.flush()
        raise SystemExit(2)
    raise ConfigError(problem)


quiet_interrupt_while_importing()  # on import: the package imports this module before anything else
check_hub_environment()
