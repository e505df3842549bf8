"""A fork server for the kill test: imports the library once (five seconds), then forks one child per request, and
each child runs `adapterfusion.cli.main(argv)` exactly as `python -m adapterfusion.cli` would. Twenty-odd restarts
then cost milliseconds each instead of an interpreter start each. Nothing has run torch code before a fork, and the
test sets OMP_NUM_THREADS=1, so no thread pool is copied into a child.

Protocol, one line each: in `{"argv": [...], "log": "<file>"}`; out `pid <n>` when the child starts, then
`exit <n> <wait status>` when it has ended (killed or not). `ready` once the imports are done."""

from __future__ import annotations

import json
import os
import sys
import traceback

import datasets  # noqa: F401 - everything a run imports, so children start warm
import transformers.models.bert.modeling_bert  # noqa: F401
import transformers.trainer  # noqa: F401

import adapterfusion.experiments.figures  # noqa: F401
import adapterfusion.training  # noqa: F401
from adapterfusion.cli import main


def _child(request: dict) -> None:
    code = 1
    try:
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        code = main(request["argv"])
    except BaseException:  # noqa: BLE001 - reported in the child's log; the exit code says it failed
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve() -> None:
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        print(f"pid {pid}", flush=True)
        _, status = os.waitpid(pid, 0)
        print(f"exit {pid} {status}", flush=True)


if __name__ == "__main__":
    serve()
