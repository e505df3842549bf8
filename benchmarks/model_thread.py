"""Which thread the server's model runs on, and which thread loaded it (issue #24's serving on a CPU).

    .venv/bin/python benchmarks/model_thread.py [--rounds 5] [--batches 12] [--threads 2]

`adapterfusion serve` runs every forward on one worker thread (serving/app.py). torch's OpenMP gives each thread that
runs a parallel operator its own pool of worker threads, and a pool stays for the life of the process. The cases,
each in a process of its own, all running the server's own `Predictor.predict` on the load test's mixed batches
(serve_load.py's setup: the shipped MiniLM, the zoo's adapters and heads, two fusions; 16 one-input requests a batch,
the 11 choices in turn):
- "main thread": loaded and run on the main thread, as an offline script does;
- "worker, loaded on main": loaded on the main thread, run on a worker thread (how `serve` ran before);
- "worker, loaded on it": loaded and run on the same worker thread (`model_executor`, what `serve` does now).
The processes take turns, one batch set each per round (the others idle), so the paired per-round ratios to "main
thread" see the same machine load (_stats.py). Absolute times depend on the machine; compare ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import torch
from _stats import paired_ratio

CASES = {"main": "main thread", "after-main": "worker, loaded on main", "own": "worker, loaded on it"}
PER_BATCH = 16


class _Inline(Executor):
    """Runs a call on the calling thread (the "main thread" case)."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        future: Future[Any] = Future()
        future.set_result(fn(*args, **kwargs))
        return future


def worker(case: str, folder: str, batches: int, threads: int) -> None:
    """One case's process: load the setup as the case says, then time one pass over the batches per 'run' line."""
    import serve_load

    from adapterfusion.serving import ServeConfig
    from adapterfusion.serving.app import model_executor
    from adapterfusion.serving.catalog import Catalog
    from adapterfusion.serving.contract import parse_predict
    from adapterfusion.serving.predictor import Predictor
    from adapterfusion.serving.server import load_setup

    torch.set_num_threads(threads)
    runner: Executor = model_executor() if case != "main" else _Inline()
    if case != "main":
        runner.submit(torch.set_num_threads, threads).result()
    loader = runner if case == "own" else _Inline()
    model, tokenizer = loader.submit(load_setup, folder).result()
    predictor = Predictor(model, tokenizer)
    choices = json.loads(Path(folder).with_name("choices.json").read_text())
    bodies = serve_load.bodies_for(choices, serve_load.demo_inputs(40), PER_BATCH * batches)
    catalog, config = Catalog.of(model), ServeConfig()
    encoded = [predictor.encode(parse_predict(body, catalog, config)) for body in bodies]
    sets = [encoded[start : start + PER_BATCH] for start in range(0, len(encoded), PER_BATCH)]

    def one_pass() -> float:
        start = time.perf_counter()
        for batch in sets:
            predictor.predict(batch)
        return time.perf_counter() - start

    runner.submit(one_pass).result()  # warm-up: folds, stacks, first allocations
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        print(json.dumps({"seconds": runner.submit(one_pass).result()}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--worker", choices=list(CASES), help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.folder, args.batches, args.threads)
        return
    import serve_load

    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch, "setup")
        choices = serve_load.build_setup(folder)
        Path(scratch, "choices.json").write_text(json.dumps(choices))
        processes = {}
        for case in CASES:
            command = [sys.executable, __file__, "--worker", case, "--folder", str(folder)]
            command += ["--batches", str(args.batches), "--threads", str(args.threads)]
            process = processes[case] = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
            assert process.stdout is not None
            while (line := process.stdout.readline()) and line.strip() != "ready":
                pass  # one at a time: a process loading must not share the cores with another's warm-up
        seconds: dict[str, list[float]] = {case: [] for case in CASES}
        try:
            for index in range(args.rounds):
                order = list(CASES) if index % 2 == 0 else list(reversed(CASES))
                for case in order:
                    process = processes[case]
                    assert process.stdin is not None and process.stdout is not None
                    process.stdin.write("run\n")
                    process.stdin.flush()
                    seconds[case].append(json.loads(process.stdout.readline())["seconds"])
        finally:
            for process in processes.values():
                if process.stdin is not None:
                    process.stdin.close()
                process.wait(60)
    inputs = PER_BATCH * args.batches
    print(
        f"\nServer forwards by thread: {args.batches} batches of {PER_BATCH} mixed requests ({inputs} inputs), "
        f"{args.threads} torch threads, {args.rounds} rounds, torch {torch.__version__}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs\n"
    )
    print("| case | ms per input (median) | / main thread (95 % CI) |")
    print("|---|---:|---|")
    for case, title in CASES.items():
        per_input = sorted(value / inputs * 1000 for value in seconds[case])[len(seconds[case]) // 2]
        ratio = paired_ratio(seconds[case], seconds["main"])
        print(f"| {title} | {per_input:.2f} | {ratio.median:.2f}× [{ratio.low:.2f}–{ratio.high:.2f}] |")


if __name__ == "__main__":
    main()
