"""One benchmark case of one library, driven by `fusion_speed.py` over JSON lines on stdin/stdout.

    <python> benchmarks/_worker.py        # then, one JSON object per line:
    {"cmd": "setup", "library": "ours"|"adapters", "model": "minilm"|"bert-base", "path": ..., "kind": "bare"|
     "adapter"|"fusion", "n": 16, "mode": "inference"|"train", "batch": 8, "seq": 128, "threads": 2, "seed": 0}
    {"cmd": "run", "repeats": 1}   -> {"ms": [..]}
    {"cmd": "memory"}              -> {"peak_mib": ..}
    {"cmd": "quit"}

`serve` also drives `_decoder_worker.py` (decoder_fusion.py), whose cases time generation instead.

Runs under our venv (library "ours") and under the AdapterHub venv (library "adapters"), so it imports only
torch and transformers at top level; each library is imported inside its own builder. One process holds one
(library, case, mode), so its peak memory is its own: after building the model we reset the kernel's resident
high-water mark (VmHWM, via /proc/self/clear_refs) and report VmHWM minus the resident size at that moment.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

import torch
import transformers

LEARNING_RATE = 1e-4
REDUCTION_FACTOR = 16


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        match = re.search(rf"^{field}:\s+(\d+) kB", status.read(), re.MULTILINE)
    assert match is not None, f"/proc/self/status has no {field} line"
    return int(match.group(1))


def _release_and_reset_peak() -> int:
    """Return freed heap to the OS, reset the resident high-water mark, and return the resident size (KiB)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")
    return _status_kib("VmRSS")


def _encoder_config(model: str):
    if model != "bert-base":
        raise ValueError(f"unknown random model {model!r}")
    return transformers.BertConfig()  # BERT-base defaults: hidden 768, 12 layers, 12 heads, FFN 3072


def build_ours(spec: dict):
    from transformers import AutoModel

    import adapterfusion as af

    if spec["model"] == "minilm":
        encoder = AutoModel.from_pretrained(spec["path"])
    else:
        encoder = AutoModel.from_config(_encoder_config(spec["model"]))
    model = af.wrap(encoder)
    names = [f"a{i}" for i in range(spec["n"] if spec["kind"] == "fusion" else 1)]
    for name in names:
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=REDUCTION_FACTOR))
    model.add_head("h", af.ClassificationHead(num_labels=2))
    if spec["kind"] == "fusion":
        model.add_fusion("f", names, af.FusionConfig.dynamic())  # score_dropout is 0 by default
    train = spec["mode"] == "train"
    if spec["kind"] == "fusion":
        model.train_fusion("f", head="h") if train else model.activate(fusion="f", head="h")
    elif spec["kind"] == "adapter":
        model.train_adapter("a0", head="h") if train else model.activate(adapter="a0", head="h")
    else:
        model.train_head("h") if train else model.activate(head="h")
    info = {
        "attn_implementation": getattr(encoder.config, "_attn_implementation", None),
        "version": af.__version__,
        "active": str(model.active_fusion or model.active_adapter),
    }
    return model, (lambda out: out.loss), info


def build_adapters(spec: dict):
    import adapters
    from adapters import AutoAdapterModel, BertAdapterModel
    from adapters.composition import Fuse

    if spec["model"] == "minilm":
        model = AutoAdapterModel.from_pretrained(spec["path"])
    else:
        model = BertAdapterModel(_encoder_config(spec["model"]))
    names = [f"a{i}" for i in range(spec["n"] if spec["kind"] == "fusion" else 1)]
    for name in names:
        model.add_adapter(name, config=adapters.SeqBnConfig(reduction_factor=REDUCTION_FACTOR))
    model.add_classification_head("h", num_labels=2)  # 2 layers, tanh: same layout as our ClassificationHead
    train = spec["mode"] == "train"
    if spec["kind"] == "fusion":
        setup = Fuse(*names)
        model.add_adapter_fusion(setup, "dynamic")
        # adapters' fusion score dropout is `dropout_prob or attention_probs_dropout_prob` (0.0 falls back to
        # 0.1), so the only way to turn it off, as ours is, is to set the built modules' p to 0.
        for module in model.modules():
            if type(module).__name__ == "BertFusion":
                module.dropout.p = 0.0
        model.train_adapter_fusion(setup) if train else model.set_active_adapters(setup)
    elif spec["kind"] == "adapter":
        model.train_adapter("a0") if train else model.set_active_adapters("a0")
    else:
        model.freeze_model(True)  # head only on the frozen encoder, like our train_head
        model.set_active_adapters(None)
    model.active_head = "h"

    def loss(out):
        # AdapterTrainer adds the fusion value regulariser to the loss; ours adds it inside forward.
        reg = model.base_model.get_fusion_regularization_loss() if spec["kind"] == "fusion" else None
        return out.loss if reg is None else out.loss + reg

    info = {
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        "version": adapters.__version__,
        "active": str(model.active_adapters),
    }
    return model, loss, info


class Case:
    def __init__(self, spec: dict):
        torch.set_num_threads(spec["threads"])
        torch.manual_seed(spec["seed"])
        self._open_contexts = contextlib.ExitStack()
        build = build_ours if spec["library"] == "ours" else build_adapters
        self.model, self.loss, self.info = build(spec)
        self.train = spec["mode"] == "train"
        generator = torch.Generator().manual_seed(spec["seed"])
        shape = (spec["batch"], spec["seq"])
        self.inputs = {
            "input_ids": torch.randint(1000, 20000, shape, generator=generator),
            "attention_mask": torch.ones(shape, dtype=torch.long),
        }
        self.labels = torch.randint(0, 2, (spec["batch"],), generator=generator)
        if self.train:
            self.model.train()
            trainable = [p for p in self.model.parameters() if p.requires_grad]
            self.info["trainable_parameters"] = sum(p.numel() for p in trainable)
            self.optimizer = torch.optim.AdamW(trainable, lr=LEARNING_RATE)
            # Ours trains as our trainer does by default (TrainingConfig.fast_dropout): dropout masks via rand >= p.
            self.info["fast_dropout"] = spec["library"] == "ours" and spec.get("fast_dropout", True)
            if self.info["fast_dropout"]:
                from adapterfusion.training.fast_dropout import fast_dropout

                self._open_contexts.enter_context(fast_dropout())
        else:
            self.model.eval()
            if hasattr(self.model, "inference_cache"):  # ours: fold fusion weights once, as serving code would
                # Held open for the worker's life. (A bare `inference_cache().__enter__()` is not: the unreferenced
                # context manager is collected at once and its exit drops the cache, which until 2026-11-23 made
                # every timed forward refold the weights.)
                self._open_contexts.enter_context(self.model.inference_cache())
        self.info.update(
            torch=torch.__version__, transformers=transformers.__version__, threads=torch.get_num_threads()
        )
        self.baseline_kib = _release_and_reset_peak()

    def step(self) -> None:
        if self.train:
            out = self.model(**self.inputs, labels=self.labels)
            self.loss(out).backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        else:
            with torch.no_grad():
                self.model(**self.inputs)

    def run(self, repeats: int) -> list[float]:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            self.step()
            times.append((time.perf_counter() - start) * 1000)
        return times

    def peak_mib(self) -> float:
        return (_status_kib("VmHWM") - self.baseline_kib) / 1024


class Served(Protocol):
    """What `serve` drives: `Case` here, `DecoderCase` in _decoder_worker.py."""

    info: dict

    def run(self, repeats: int) -> Any: ...

    def peak_mib(self) -> float: ...


DRIVER_ENDS_WORKERS = "ADAPTERFUSION_BENCH_DRIVER_ENDS_WORKERS"  # set by a driver that stops its workers itself


def _set_up(case: Served | None) -> Served:
    """The case a 'setup' request made; the driver always sends one first."""
    if case is None:
        raise RuntimeError("no case set up: send a 'setup' request before 'run' or 'memory'")
    return case


def main() -> None:
    serve(Case)


def serve(make_case: Callable[[dict], Served]) -> None:
    """Answer the driver's JSON lines (setup, run, memory, quit) for the one case `make_case` builds from setup."""
    # A step limit's SIGTERM reaches the whole process group. A driver that ends its workers itself when cut short
    # (decoder_fusion.py: it reports the rounds they finished) says so; a worker whose driver died reads the end of
    # its stdin and stops. Other drivers' workers end with the signal.
    if os.environ.get(DRIVER_ENDS_WORKERS) == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # library prints and warnings must not corrupt the protocol stream
    sys.stdout = sys.stderr
    case: Served | None = None
    for line in sys.stdin:
        request = json.loads(line)
        cmd = request["cmd"]
        reply: dict[str, Any]
        try:
            if cmd == "setup":
                case = make_case(request)
                reply = {"info": case.info}
            elif cmd == "run":
                reply = {"ms": _set_up(case).run(int(request.get("repeats", 1)))}
            elif cmd == "memory":
                reply = {"peak_mib": _set_up(case).peak_mib()}
            elif cmd == "quit":
                break
            else:
                reply = {"error": f"unknown cmd {cmd!r}"}
        except Exception as error:  # reported to the driver, which stops with the message
            reply = {"error": f"{type(error).__name__}: {error}"}
        protocol.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    main()
