"""Side-by-side speed and memory: adapterfusion vs AdapterHub `adapters`, same machine, one invocation.

    bash benchmarks/setup_adapters_venv.sh                  # once: benchmarks/.venv-adapters
    .venv/bin/python benchmarks/fusion_speed.py --quick     # MiniLM, batch 8, N in {2, 16}, 3 repeats
    .venv/bin/python benchmarks/fusion_speed.py [--models minilm bert-base] [--batches 32 8] [--sizes 2 4 8 16]
        [--modes inference train] [--repeats 5] [--inference-repeats 7] [--threads 2] [--seq 128]
        [--adapters-python PATH] [--json PATH]

Every (library, case, mode) runs in its own worker process (`_worker.py`; ours under this interpreter, adapters
under its own venv), so peak memory is per case. Workers of one (model, batch, mode) group stay alive and are
driven round-robin: each round runs every case once in both libraries (the library order alternates between
rounds), after one discarded warm-up round; the table shows medians. Ratios from one run are the result;
absolute times depend on whatever else the machine is doing. The targets are judged on per-round paired ratios
with a bootstrap 95 % interval (`_stats.py`): met or missed only when the whole interval says so.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from _stats import paired_ratio, verdict

HERE = Path(__file__).resolve().parent
WORKER = HERE / "_worker.py"
DEFAULT_ADAPTERS_PYTHON = HERE / ".venv-adapters" / "bin" / "python"
LIBRARIES = ("ours", "adapters")


@dataclass
class Worker:
    library: str
    case: tuple[str, int]
    process: subprocess.Popen[str]
    times: list[float] = field(default_factory=list)
    info: dict = field(default_factory=dict)
    peak_mib: float = float("nan")

    def ask(self, request: dict) -> dict:
        self.send(request)
        return self.receive()

    def send(self, request: dict) -> None:
        """Send without waiting, so several workers can work at once (see receive)."""
        assert self.process.stdin is not None  # started with stdin piped
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()

    def receive(self) -> dict:
        assert self.process.stdout is not None  # started with stdout piped
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"{self.library} worker for {self.case} died (see its stderr above)")
        reply = json.loads(line)
        if "error" in reply:
            raise SystemExit(f"{self.library} worker for {self.case}: {reply['error']}")
        return reply

    def close(self) -> None:
        try:
            self.ask({"cmd": "quit"})
        except SystemExit:
            pass
        self.process.wait(timeout=60)


def case_name(case: tuple[str, int]) -> str:
    kind, n = case
    return {"bare": "bare encoder", "adapter": "one adapter"}.get(kind, f"fusion N={n}")


def run_group(args, pythons: dict[str, str], model: str, path: str, batch: int, mode: str) -> list[Worker]:
    """Start one worker per (library, case), set them up, then time them round-robin."""
    cases = [("bare", 0), ("adapter", 1)] + [("fusion", n) for n in args.sizes]
    workers = [
        Worker(
            library,
            case,
            subprocess.Popen(
                [pythons[library], str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
            ),
        )
        for case in cases
        for library in LIBRARIES
    ]
    try:
        for worker in workers:  # imports already ran in parallel; model building is sequential
            worker.info = worker.ask(
                {
                    "cmd": "setup",
                    "library": worker.library,
                    "model": model,
                    "path": path,
                    "kind": worker.case[0],
                    "n": worker.case[1],
                    "mode": mode,
                    "batch": batch,
                    "seq": args.seq,
                    "threads": args.threads,
                    "seed": args.seed,
                    "fast_dropout": not args.no_fast_dropout,
                }
            )["info"]
        repeats = args.inference_repeats if mode == "inference" else args.repeats
        for round_index in range(1 + repeats):
            for case in cases:
                order = LIBRARIES if round_index % 2 == 0 else LIBRARIES[::-1]
                for library in order:
                    worker = next(w for w in workers if w.library == library and w.case == case)
                    ms = worker.ask({"cmd": "run", "repeats": 1})["ms"]
                    if round_index > 0:
                        worker.times.extend(ms)
            print(f"  {model} b{batch} {mode}: round {round_index}/{repeats} done", file=sys.stderr)
        for worker in workers:
            worker.peak_mib = worker.ask({"cmd": "memory"})["peak_mib"]
    finally:
        for worker in workers:
            worker.close()
    return workers


def table(results: dict, args) -> tuple[list[str], list[str]]:
    lines = [
        "| model | batch | mode | case | ours ms | adapters ms | ours tok/s | adapters tok/s | ours peak MiB "
        "| adapters peak MiB | ours / our bare | adapters / ours (time) | adapters / ours (memory) |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    checks = []
    for (model, batch, mode), workers in results.items():
        med = {(w.library, w.case): statistics.median(w.times) for w in workers}
        mem = {(w.library, w.case): w.peak_mib for w in workers}
        tokens = batch * args.seq
        bare = med[("ours", ("bare", 0))]
        for case in dict.fromkeys(w.case for w in workers):
            ours, theirs = med[("ours", case)], med[("adapters", case)]
            lines.append(
                f"| {model} | {batch} | {mode} | {case_name(case)} | {ours:.0f} | {theirs:.0f} "
                f"| {tokens / ours * 1000:.0f} | {tokens / theirs * 1000:.0f} | {mem[('ours', case)]:.0f} "
                f"| {mem[('adapters', case)]:.0f} | {ours / bare:.2f} | {theirs / ours:.2f} "
                f"| {mem[('adapters', case)] / max(mem[('ours', case)], 1e-9):.2f} |"
            )
        group = f"{model} b{batch} {mode}"
        times = {(w.library, w.case): w.times for w in workers}
        top = ("fusion", max(args.sizes))
        if top in {w.case for w in workers} and max(args.sizes) == 16:
            speed = med[("adapters", top)] / med[("ours", top)]
            if mode == "inference":
                fused = paired_ratio(times[("ours", top)], times[("ours", ("bare", 0))])
                for bound in (1.5, 1.25):
                    checks.append(
                        f"{group}: fusion N=16 ≤ {bound}× bare encoder: {fused} → {verdict(fused, bound, True)}"
                    )
            checks.append(
                f"{group}: ≥ 3× faster than adapters at N=16: {speed:.2f}× → {'met' if speed >= 3 else 'MISSED'}"
            )
            if mode == "train":
                share = mem[("ours", top)] / mem[("adapters", top)]
                checks.append(
                    f"{group}: peak memory at N=16 ≤ 1/3 of adapters': {share:.2f} of adapters' → "
                    f"{'met' if share <= 1 / 3 else 'MISSED'}"
                )
        one = ("adapter", 1)
        if mode == "inference":
            r = med[("ours", one)] / bare
            checks.append(
                f"{group}: one adapter adds ≤ 5 % over bare encoder: {(r - 1) * 100:+.1f} % → "
                f"{'met' if r <= 1.05 else 'MISSED'}"
            )
        never_slower = paired_ratio(times[("adapters", one)], times[("ours", one)])
        checks.append(
            f"{group}: one adapter never slower than adapters (adapters / ours ≥ 1): {never_slower} → "
            f"{verdict(never_slower, 1.0, False)}"
        )
    return lines, checks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="MiniLM, batch 8, N in {2, 16}, 3 training / 5 inference repeats"
    )
    parser.add_argument("--models", nargs="+", choices=["minilm", "bert-base"], default=["minilm", "bert-base"])
    parser.add_argument("--batches", type=int, nargs="+", default=[32, 8])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--modes", nargs="+", choices=["inference", "train"], default=["inference", "train"])
    parser.add_argument("--repeats", type=int, default=5, help="timed training steps per case")
    parser.add_argument(
        "--inference-repeats",
        type=int,
        default=7,
        help="timed forwards per case (cheaper, and noisier on a shared machine)",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-fast-dropout",
        action="store_true",
        help="train ours with torch's own dropout masks (our trainer's default is TrainingConfig.fast_dropout=True)",
    )
    parser.add_argument("--minilm-path", help="folder of the MiniLM encoder (default: the shipped one)")
    parser.add_argument(
        "--adapters-python",
        default=str(DEFAULT_ADAPTERS_PYTHON),
        help="python of a venv with adapters==1.3.0 (benchmarks/setup_adapters_venv.sh)",
    )
    parser.add_argument("--json", type=Path, help="also write raw times, memory and worker info here")
    args = parser.parse_args()
    if args.quick:
        args.models, args.batches, args.sizes, args.repeats, args.inference_repeats = ["minilm"], [8], [2, 16], 3, 5
    if not Path(args.adapters_python).exists():
        raise SystemExit(
            f"{args.adapters_python} does not exist: run `bash benchmarks/setup_adapters_venv.sh` "
            "or pass --adapters-python"
        )
    path = args.minilm_path
    if path is None:
        import adapterfusion as af

        path = str(af.default_encoder_path())
    pythons = {"ours": sys.executable, "adapters": args.adapters_python}

    started = time.time()
    results = {}
    for batch in args.batches:
        for model in args.models:
            for mode in args.modes:
                results[(model, batch, mode)] = run_group(args, pythons, model, path, batch, mode)
            lines, checks = table({(model, batch, mode): results[(model, batch, mode)] for mode in args.modes}, args)
            print("\n".join(lines[2:] + [f"  target: {c}" for c in checks]), file=sys.stderr, flush=True)
    lines, checks = table(results, args)
    any_worker = next(iter(results.values()))
    info = {w.library: w.info for w in any_worker}
    print(
        f"{time.strftime('%Y-%m-%d')}: batch × {args.seq} tokens, {args.threads} threads, Pfeiffer/seq_bn rf 16, "
        f"dynamic fusion, median of {args.inference_repeats} forwards / {args.repeats} training steps "
        f"(after 1 warm-up), interleaved; "
        f"ours {info['ours']['version']} (transformers {info['ours']['transformers']}), "
        f"adapters {info['adapters']['version']} (transformers {info['adapters']['transformers']}), "
        f"torch {info['ours']['torch']}; wall {time.time() - started:.0f} s"
    )
    print("\n".join(lines))
    print()
    print("Targets:")
    for check in checks:
        print(f"- {check}")
    if args.json:
        args.json.write_text(
            json.dumps(
                [
                    {
                        "model": m,
                        "batch": b,
                        "mode": mode,
                        "library": w.library,
                        "case": case_name(w.case),
                        "ms": w.times,
                        "peak_mib": w.peak_mib,
                        "info": w.info,
                    }
                    for (m, b, mode), workers in results.items()
                    for w in workers
                ],
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
