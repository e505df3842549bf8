"""Load test of `adapterfusion serve` (issue #24 item 5): many adapters and fusions behind one server, on loopback.

    .venv/bin/python benchmarks/serve_load.py [--requests 2000] [--clients 32] [--client-processes 1] [--rounds 4]
        [--device cpu] [--max-wait-ms 5] [--max-batch-tokens 4096] [--time-limit 900] [--json results.json]

The setup: the shipped MiniLM with every adapter of the shipped zoo (12), the heads of its 9 classification tasks and
two fusions made here (not trained: their weights are the initial ones, which costs the same to run): nli_fusion over
mnli, snli, sick, rte, cb (answered with the mnli head) and zoo_fusion over all 12 (sst2 head). It is saved with
save_pretrained and served by `adapterfusion serve` in a separate process, as a user would run it. The requests hold
one input each, a text pair from the demo data (MNLI, RTE, MRPC, CB, SICK) or an SST-2 sentence for the single-text
tasks, and go, one after another, to the 11 servable choices (9 adapters with their heads, 2 fusions).

Three loads, each `--requests` requests from `--clients` concurrent clients (asyncio + httpx, keep-alive), spread
over `--client-processes` processes: one Python process of httpx clients sends a few hundred requests a second at
most, so on a fast server one process measures the clients (the table's CPU columns show which side is busy):
- mixed: the 11 choices in turn, on a server batching up to 32 inputs and --max-batch-tokens padded tokens per
  forward (--max-wait-ms);
- single: the same inputs, all to the mnli adapter and head, on the same server;
- per-request: the mixed load on a second server with --max-batch-size 1 (one request per forward).
They run interleaved in --rounds rounds (each load's requests split among them), so the paired per-round ratios
(_stats.py) see the same machine load. Every answer is checked against the offline prediction of the same setup
(loaded here, each input run alone with its choice: label, and scores to the float32 tolerance 1e-4); none may be
lost or fail. Targets: mixed throughput >= 0.9x single, and >= 4x per-request. The loads are bounded in count and
by --time-limit seconds in all.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import itertools
import json
import multiprocessing
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import torch
from _stats import paired_ratio, verdict
from transformers import AutoModel, AutoTokenizer

import adapterfusion as af
from adapterfusion.defaults import default_encoder_path
from adapterfusion.io.atomic import atomic_write_json
from adapterfusion.tasks import get_task
from adapterfusion.zoo import load_zoo_adapter, zoo_tasks

DEMO = Path(af.__file__).parent / "demo_data"
PAIR_SOURCES = {"mnli": "validation_matched", "rte": "validation", "mrpc": "validation", "cb": "validation"}
PAIR_SOURCES["sick"] = "validation"
SINGLE = "single"
FUSIONS = {"nli_fusion": (["mnli", "snli", "sick", "rte", "cb"], "mnli"), "zoo_fusion": (None, "sst2")}
ONE_ADAPTER = "mnli"
TOLERANCE = 1e-4  # float32 through a whole encoder, as tests/tolerances.py


@dataclass
class Load:
    name: str
    server: str
    pid: int
    bodies: list[dict[str, Any]]
    latencies: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)  # per round
    done: list[int] = field(default_factory=list)  # requests per round
    sent: list[int] = field(default_factory=list)  # of those the round had to send
    rows_per_forward: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    checked: int = 0
    server_cpu: list[float] = field(default_factory=list)  # CPU seconds per round
    client_cpu: list[float] = field(default_factory=list)


def build_setup(folder: Path) -> list[tuple[dict[str, str] | None, str, str]]:
    """Save the served setup to `folder`; the servable choices as (choice, head, input kind)."""
    model = af.wrap(AutoModel.from_pretrained(default_encoder_path()))
    choices: list[tuple[dict[str, str] | None, str, str]] = []
    for task in zoo_tasks():
        spec = get_task(task)
        served = spec.kind in ("single", "pair")
        load_zoo_adapter(model, task, head=served)
        if served:
            choices.append(({"adapter": task}, task, spec.kind))
    torch.manual_seed(0)
    for name, (adapters, head) in FUSIONS.items():
        model.add_fusion(name, adapters or zoo_tasks())
        choices.append(({"fusion": name}, head, get_task(head).kind))
    model.save_pretrained(folder)
    return choices


def demo_inputs(per_source: int) -> dict[str, list[Any]]:
    """Text pairs from the demo data's pair tasks and SST-2 sentences, `per_source` of each source."""
    pairs: list[Any] = []
    for task, split in PAIR_SOURCES.items():
        fields = get_task(task).text_fields
        with gzip.open(DEMO / task / f"{split}.jsonl.gz", "rt") as rows:
            pairs += [[row[fields[0]], row[fields[1]]] for row in map(json.loads, itertools.islice(rows, per_source))]
    with gzip.open(DEMO / "sst2" / "validation.jsonl.gz", "rt") as rows:
        singles = [json.loads(row)["sentence"] for row in itertools.islice(rows, per_source * len(PAIR_SOURCES))]
    return {"pair": pairs, SINGLE: singles}


def bodies_for(choices: list[tuple[dict[str, str] | None, str, str]], inputs: dict[str, list[Any]], count: int):
    """`count` one-input predict bodies cycling through `choices` and, per kind, the inputs."""
    used = {kind: 0 for kind in inputs}
    bodies = []
    for index in range(count):
        choice, head, kind = choices[index % len(choices)]
        kind = "pair" if kind == "pair" else SINGLE
        text = inputs[kind][used[kind] % len(inputs[kind])]
        used[kind] += 1
        bodies.append({"inputs": [text], **(choice or {}), "head": head})
    return bodies


def key(body: dict[str, Any]) -> str:
    return json.dumps(body, sort_keys=True)


def offline_predictions(folder: Path, bodies: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Softmax scores of each distinct body, its input run alone through the saved setup with its choice."""
    tokenizer = AutoTokenizer.from_pretrained(default_encoder_path())
    model = af.AdaptedModel.from_pretrained(default_encoder_path(), folder).eval()
    expected: dict[str, list[float]] = {}
    for body in bodies:
        if key(body) in expected:
            continue
        text = body["inputs"][0]
        pair = (text, None) if isinstance(text, str) else tuple(text)
        with (
            model.activated(adapter=body.get("adapter"), fusion=body.get("fusion"), head=body["head"]),
            torch.no_grad(),
        ):
            logits = model(**tokenizer(*pair, truncation=True, max_length=512, return_tensors="pt")).logits[0]
        expected[key(body)] = logits.softmax(-1).tolist()
    return expected


def check(answer: dict[str, Any], expected: list[float]) -> str | None:
    """None if the prediction is the offline one (label, and scores within TOLERANCE), else what differs."""
    (prediction,) = answer["predictions"]
    gap = max(abs(a - b) for a, b in zip(prediction["scores"], expected, strict=True))
    ranked = sorted(expected, reverse=True)
    tie = len(ranked) > 1 and ranked[0] - ranked[1] <= TOLERANCE
    if gap > TOLERANCE or (prediction["label"] != max(range(len(expected)), key=expected.__getitem__) and not tie):
        return f"scores {prediction['scores']} against offline {expected} (max gap {gap:.2e})"
    return None


_EXPECTED: dict[str, list[float]] = {}  # each client process's copy of the offline predictions


def _remember(expected: dict[str, list[float]]) -> None:
    _EXPECTED.update(expected)


def client_share(server: str, bodies: list[dict[str, Any]], clients: int, seconds_left: float) -> dict[str, Any]:
    """Send `bodies` to `server` from `clients` concurrent asyncio clients (in a client process); what happened."""
    result: dict[str, Any] = {"latencies": [], "failures": [], "checked": 0, "sent": 0}
    queue = list(reversed(bodies))
    deadline = time.monotonic() + seconds_left
    cpu = time.process_time()

    async def send() -> None:
        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
        async with httpx.AsyncClient(base_url=server, limits=limits, timeout=120) as client:

            async def worker() -> None:
                while queue and time.monotonic() < deadline:
                    body = queue.pop()
                    result["sent"] += 1
                    start = time.perf_counter()
                    try:
                        response = await client.post("/v1/predict", json=body)
                    except httpx.HTTPError as error:
                        result["failures"].append(f"{type(error).__name__}: {error}")
                        continue
                    result["latencies"].append(time.perf_counter() - start)
                    if response.status_code != 200:
                        result["failures"].append(f"HTTP {response.status_code}: {response.text[:200]}")
                        continue
                    problem = check(response.json(), _EXPECTED[key(body)])
                    if problem:
                        result["failures"].append(problem)
                    result["checked"] += 1

            await asyncio.gather(*(worker() for _ in range(clients)))

    asyncio.run(send())
    result["cpu"] = time.process_time() - cpu
    return result


def run_round(
    load: Load, bodies: list[dict[str, Any]], clients: int, pool: ProcessPoolExecutor, parts: int, deadline: float
) -> None:
    """Send `bodies` from `clients` concurrent clients spread over `parts` client processes; record latencies, the
    round's time, the answers' checks and the CPU time both sides spent."""
    before, server_cpu = forwards(load.server), cpu_seconds(load.pid)
    start = time.perf_counter()
    seconds_left = deadline - time.monotonic()
    futures = [
        pool.submit(client_share, load.server, bodies[part::parts], len(range(part, clients, parts)), seconds_left)
        for part in range(parts)
    ]
    shares = [future.result() for future in futures]
    load.seconds.append(time.perf_counter() - start)
    load.server_cpu.append(cpu_seconds(load.pid) - server_cpu)
    load.client_cpu.append(sum(share["cpu"] for share in shares))
    load.done.append(sum(share["sent"] for share in shares))
    load.sent.append(len(bodies))
    for share in shares:
        load.latencies += share["latencies"]
        load.failures += share["failures"]
        load.checked += share["checked"]
    after = forwards(load.server)
    load.rows_per_forward.append((after[0] - before[0]) / max(after[1] - before[1], 1))


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (Linux /proc; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14 and 15


def forwards(server: str) -> tuple[float, float]:
    """(inputs run, forwards run) so far, from the server's /metrics."""
    text = httpx.get(server + "/metrics", timeout=30).text
    values = dict(
        line.rsplit(" ", 1) for line in text.splitlines() if line.startswith("adapterfusion_serve_batch_rows_")
    )
    return float(values["adapterfusion_serve_batch_rows_sum"]), float(values["adapterfusion_serve_batch_rows_count"])


def sample_file(args: argparse.Namespace, number: int) -> Path:
    """Where py-spy's sample of load `number` goes: beside --json, else in the working folder."""
    return (Path(args.json).parent if args.json else Path(".")) / f"py_spy_load{number}.txt"


def sample_server(args: argparse.Namespace, load: Load, number: int) -> subprocess.Popen[bytes] | None:
    """With --py-spy, sample the server's Python stacks for the first seconds of `load`'s first round (collapsed
    stacks, one file per load beside --json): where a server process bound at one core spends it, on any device."""
    if args.py_spy is None:
        return None
    out = sample_file(args, number)
    command = [args.py_spy, "record", "--pid", str(load.pid), "--duration", str(args.py_spy_seconds), "--rate", "250"]
    command += ["--format", "raw", "--nonblocking", "--output", str(out)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def sampled_leaves(path: Path, top: int = 8) -> list[tuple[str, float]]:
    """The functions a py-spy sample (collapsed stacks: 'frame;frame;... count') found running most: share of
    samples by the innermost frame, idle ones included (a waiting event loop is where an idle server sits)."""
    counts: dict[str, int] = {}
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        leaf = stack.rsplit(";", 1)[-1].split(" (")[0]
        counts[leaf] = counts.get(leaf, 0) + int(count)
    total = sum(counts.values()) or 1
    return [(leaf, n / total) for leaf, n in sorted(counts.items(), key=lambda item: -item[1])[:top]]


def start_server(folder: Path, args: argparse.Namespace, max_batch: int) -> tuple[subprocess.Popen[str], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "adapterfusion.cli", "serve", str(folder), "--port", str(port)]
    command += ["--device", args.device, "--max-batch-size", str(max_batch), "--max-wait-ms", str(args.max_wait_ms)]
    command += ["--max-queue", str(4 * args.clients), "--max-batch-tokens", str(args.max_batch_tokens)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited: {process.stderr.read() if process.stderr else ''}")
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit("the server did not start within 300 s")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def throughput(load: Load, rounds: list[int]) -> list[float]:
    return [load.done[index] / load.seconds[index] for index in rounds]


def complete_rounds(loads: list[Load]) -> list[int]:
    """The rounds every load finished: a round cut by --time-limit has no pair for the ratios."""
    ran = min(len(load.done) for load in loads)
    return [index for index in range(ran) if all(load.done[index] == load.sent[index] for load in loads)]


def machine(args: argparse.Namespace) -> str:
    cpu = platform.processor() or platform.machine()
    if args.device.startswith("cuda") and torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} (server), {os.cpu_count()} CPU cores"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{cpu}, {os.cpu_count()} CPU cores, load average {load} at the end"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per load (default 2000)")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument(
        "--client-processes", type=int, default=1, help="processes the clients are spread over (a client-bound load)"
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--device", default="cpu", help="the server's torch device")
    parser.add_argument("--max-wait-ms", type=float, default=5.0)
    parser.add_argument("--max-batch-tokens", type=int, default=4096, help="the server's (0: no limit)")
    parser.add_argument("--py-spy", help="a py-spy executable: sample the server during each load's first round")
    parser.add_argument("--py-spy-seconds", type=int, default=8, help="how long each sample lasts")
    parser.add_argument("--time-limit", type=float, default=900.0, help="seconds for all the loads together")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()
    if args.requests < args.rounds or args.rounds < 1 or args.clients < 1 or args.client_processes < 1:
        raise SystemExit("need --rounds, --clients, --client-processes >= 1 and at least one request per round")

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "setup"
        choices = build_setup(folder)
        inputs = demo_inputs(per_source=20)
        mixed = bodies_for(choices, inputs, args.requests)
        single = [{**body, "adapter": ONE_ADAPTER, "head": ONE_ADAPTER} for body in mixed]
        for body in single:
            body.pop("fusion", None)
        print(f"{len(choices)} servable choices; computing offline predictions ...", flush=True)
        expected = offline_predictions(folder, mixed + single)
        batching, batching_url = start_server(folder, args, max_batch=32)
        per_request, per_request_url = start_server(folder, args, max_batch=1)
        loads = [
            Load("mixed (11 choices)", batching_url, batching.pid, mixed),
            Load(f"single adapter ({ONE_ADAPTER})", batching_url, batching.pid, single),
            Load("mixed, one request per forward", per_request_url, per_request.pid, mixed),
        ]
        parts = min(args.client_processes, args.clients)
        spawn = multiprocessing.get_context("spawn")  # no fork of a process holding torch's threads
        try:
            with ProcessPoolExecutor(parts, mp_context=spawn, initializer=_remember, initargs=(expected,)) as pool:
                deadline = time.monotonic() + args.time_limit
                for load in loads:  # warm-up, not counted: also starts the client processes
                    warm = Load(load.name, load.server, load.pid, [])
                    run_round(warm, load.bodies[:64], args.clients, pool, parts, deadline)
                share = args.requests // args.rounds
                for index in range(args.rounds):
                    part = slice(index * share, args.requests if index == args.rounds - 1 else (index + 1) * share)
                    for number, load in enumerate(loads):
                        sampler = sample_server(args, load, number) if index == 0 else None
                        run_round(load, load.bodies[part], args.clients, pool, parts, deadline)
                        if sampler is not None:
                            sampler.wait(30)
                    print(f"round {index + 1}/{args.rounds} done", flush=True)
        finally:
            for process in (batching, per_request):
                process.send_signal(signal.SIGTERM)
                process.wait(60)

    print(
        f"\nadapterfusion serve load test: {args.requests} requests per load, {args.clients} clients in "
        f"{parts} process(es), one input per request, {args.rounds} interleaved rounds; max batch tokens "
        f"{args.max_batch_tokens}; "
        f"server on {args.device}; {machine(args)}\n"
    )
    print(
        "| load | requests done | failed or wrong | throughput (req/s) | p50 latency (ms) | p99 latency (ms) "
        "| inputs per forward | server CPU (cores) | clients' CPU (cores) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for load in loads:
        done = sum(load.done)
        rate = done / sum(load.seconds)
        row = {
            "load": load.name,
            "requests": len(load.bodies),
            "done": done,
            "checked": load.checked,
            "failed": len(load.failures),
            "throughput": rate,
            "p50_ms": 1000 * percentile(load.latencies, 0.5),
            "p99_ms": 1000 * percentile(load.latencies, 0.99),
            "rows_per_forward": statistics.mean(load.rows_per_forward),
            "server_cpu_cores": sum(load.server_cpu) / sum(load.seconds),
            "client_cpu_cores": sum(load.client_cpu) / sum(load.seconds),
        }
        rows.append(row)
        print(
            f"| {load.name} | {done}/{len(load.bodies)} | {len(load.failures)} | {rate:.1f} | {row['p50_ms']:.0f} | "
            f"{row['p99_ms']:.0f} | {row['rows_per_forward']:.1f} | {row['server_cpu_cores']:.2f} | "
            f"{row['client_cpu_cores']:.2f} |"
        )
    rounds = complete_rounds(loads)
    if not rounds:
        raise SystemExit("no round finished within --time-limit: raise it, or send fewer --requests")
    versus_single = paired_ratio(throughput(loads[0], rounds), throughput(loads[1], rounds))
    versus_one = paired_ratio(throughput(loads[0], rounds), throughput(loads[2], rounds))
    print(
        f"\nmixed / single-adapter throughput: {versus_single}; target >= 0.9: "
        f"{verdict(versus_single, 0.9, at_most=False)}"
    )
    print(
        f"mixed / one-request-per-forward throughput: {versus_one}; target >= 4: "
        f"{verdict(versus_one, 4.0, at_most=False)}"
    )
    lost = sum(len(load.bodies) - sum(load.done) for load in loads)
    failures = [failure for load in loads for failure in load.failures]
    print(f"lost (not sent before the time limit): {lost}; failed or wrong answers: {len(failures)}")
    for failure in failures[:5]:
        print(f"  {failure}")
    for number, load in enumerate(loads):
        sample = sample_file(args, number)
        if args.py_spy is not None and sample.is_file():
            leaves = ", ".join(f"{leaf} {share:.0%}" for leaf, share in sampled_leaves(sample))
            print(f"server samples, {load.name} (innermost frames): {leaves}")
    if args.json:
        atomic_write_json(
            args.json,
            {
                "args": vars(args),
                "machine": machine(args),
                "loads": rows,
                "mixed_vs_single": versus_single._asdict(),
                "mixed_vs_per_request": versus_one._asdict(),
                "lost": lost,
                "failures": failures[:50],
            },
        )
    if lost or failures:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
