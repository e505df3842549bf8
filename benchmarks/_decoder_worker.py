"""One decoder case of one library, driven by `decoder_fusion.py` over `_worker.py`'s JSON lines protocol.

    <python> benchmarks/_decoder_worker.py     # then, one JSON object per line:
    {"cmd": "setup", "library": "ours"|"adapters", "model": GGUF_FILE|FOLDER, "kind": "bare"|"adapter"|"fusion",
     "n": 8, "pieces": DIR, "decode_batches": [1, 8], "prompt": 16, "new_tokens": 32, "prefill_batch": 8,
     "prefill_seq": 128, "threads": 2, "seed": 0, "device": "cpu"|"cuda"}
    {"cmd": "run", "repeats": 1}   -> {"ms": {"decode_b1": [ms per decoded token], "prompt_b1": [ms], ...,
                                               "prefill_b8": [ms]}}
    {"cmd": "quit"}

Ours draws its adapter and fusion weights from `seed` and exports them in AdapterHub's format into `pieces`; the
adapters worker of the same case loads them from there, so both libraries run the same weights on the same base
model (each dequantises the same GGUF file, or loads the same float32 folder). Runs under both venvs: only torch and
transformers at top level. On CUDA the clock synchronises the device before each stamp.

Timing: a logits processor stamps the clock at every generation step. The first stamp ends the prompt's forward
(prefill of the short prompt, reported as prompt_b*); the stamps after it are one decoded token each, so
(last − first) / (new_tokens − 1) is the time per decoded token without the prefill. prefill_b* is one forward
over prefill_batch × prefill_seq random tokens with the KV cache built and logits of the last position only, as
generate's first step computes them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch
import transformers
from _worker import _release_and_reset_peak, _status_kib, serve

REDUCTION_FACTOR = 16
NOISE = 0.02  # added to every adapter and fusion weight, so that no up-projection is zero and V is not exactly I


def load_decoder(path: str, device: str = "cpu") -> Any:
    """The decoder in float32 on `device`: a GGUF file dequantised (transformers reads GGUF through the `gguf`
    package), or a transformers folder."""
    model: Any  # a PreTrainedModel; its .to() is typed by a decorator mypy reads as taking a model
    if path.endswith(".gguf"):
        folder, file = os.path.split(path)
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=file)
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    dtypes = {p.dtype for p in model.parameters()}
    if dtypes != {torch.float32}:
        raise RuntimeError(f"{path} loaded as {dtypes}, expected float32 only")
    return model.to(device).eval()


TORCH_LANE = "-torch-lane"  # a kind's suffix (decoder_fusion.py --torch-lanes): ours with ADAPTERFUSION_TRITON=0


def build_ours(spec: dict) -> tuple[Any, dict]:
    import adapterfusion as af
    from adapterfusion.interop import export_adapterhub

    model = af.wrap(load_decoder(spec["model"], spec["device"]))
    names = [f"a{i}" for i in range(spec["n"])]
    for name in names:
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=REDUCTION_FACTOR))
    if spec["kind"] == "fusion":
        model.add_fusion("f", names, af.FusionConfig.dynamic())
    generator = torch.Generator().manual_seed(spec["seed"])
    with torch.no_grad():
        for site in model.sites:
            for p in [*site.adapters.parameters(), *site.fusions.parameters()]:
                p.add_(torch.randn(p.shape, generator=generator).to(p.device) * NOISE)
    pieces = Path(spec["pieces"])
    for name in names:
        export_adapterhub(model, "adapter", name, pieces / name)
    if spec["kind"] == "fusion":
        export_adapterhub(model, "fusion", "f", pieces / "fusion")
        model.activate(fusion="f")
    elif spec["kind"] == "adapter":
        model.activate(adapter="a0")
    model.eval()
    return model, {"version": af.__version__, "active": str(model.active_fusion or model.active_adapter)}


def build_adapters(spec: dict) -> tuple[Any, dict]:
    import adapters
    from adapters.composition import Fuse

    model = load_decoder(spec["model"])  # to the device once its adapters are loaded: they load onto the CPU
    adapters.init(model)  # before any forward: a Llama run once before init keeps running its original layers
    pieces = Path(spec["pieces"])
    names = [model.load_adapter(str(pieces / f"a{i}"), use_safetensors=True) for i in range(spec["n"])]
    if spec["kind"] == "fusion":
        model.load_adapter_fusion(str(pieces / "fusion"), use_safetensors=True)
        model.set_active_adapters(Fuse(*names))
    elif spec["kind"] == "adapter":
        model.set_active_adapters(names[0])
    model.to(spec["device"]).eval()
    return model, {"version": adapters.__version__, "active": str(model.active_adapters)}


def now(device: str) -> float:
    """The wall clock once the device has finished what was queued (CUDA runs asynchronously)."""
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()


class StepClock(transformers.LogitsProcessor):
    """Stamps the time each generation step hands its scores over; changes nothing."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.stamps: list[float] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.stamps.append(now(self.device))
        return scores


class DecoderCase:
    def __init__(self, spec: dict):
        if spec["kind"].endswith(TORCH_LANE):  # ours without the lane kernels (read when its lanes are built)
            os.environ["ADAPTERFUSION_TRITON"] = "0"
            spec = {**spec, "kind": spec["kind"].removesuffix(TORCH_LANE)}
        torch.set_num_threads(spec["threads"])
        torch.manual_seed(spec["seed"])
        build = build_ours if spec["library"] == "ours" else build_adapters
        self.model, self.info = build(spec)
        self.ours = spec["library"] == "ours"
        self.device = spec["device"]
        self.new_tokens = spec["new_tokens"]
        self.cache = {"cache_implementation": "static"} if spec.get("cache") == "static" else {}
        self.decode_batches = spec["decode_batches"]
        generator = torch.Generator().manual_seed(spec["seed"])

        def ids(shape: tuple[int, int]) -> dict[str, torch.Tensor]:
            vocab = (self.model.model if self.ours else self.model).config.vocab_size
            high = min(20000, vocab)  # ids clear of the special ones: 1000..20000 on SmolLM2
            input_ids = torch.randint(high // 20, high, shape, generator=generator)
            return {
                "input_ids": input_ids.to(self.device),
                "attention_mask": torch.ones_like(input_ids).to(self.device),
            }

        self.prompt = ids((max(self.decode_batches), spec["prompt"]))
        self.prefill_batch = spec["prefill_batch"]
        self.prefill = ids((self.prefill_batch, spec["prefill_seq"]))
        # What both libraries should agree on: last-position logits of the prefill batch (first 64 of the vocabulary)
        # and batch 1's greedy tokens (adapters 1.3.0's empty KV cache on Llama makes its tokens drift).
        logits = self._prefill()
        tokens, _ = self._generate(1)
        self.info.update(
            logits_sample=logits[:, -1, :64].tolist(),
            tokens_b1=tokens[0, spec["prompt"] :].tolist(),
            torch=torch.__version__,
            device=torch.cuda.get_device_name() if self.device == "cuda" else "cpu",
            transformers=transformers.__version__,
            threads=torch.get_num_threads(),
        )
        self.baseline_kib = _release_and_reset_peak()

    def _prefill(self) -> torch.Tensor:
        with self.model.inference_cache() if self.ours else torch.no_grad():
            return self.model(**self.prefill, use_cache=True, logits_to_keep=1).logits

    def _generate(self, batch: int) -> tuple[torch.Tensor, list[float]]:
        clock = StepClock(self.device)
        inputs = {key: value[:batch] for key, value in self.prompt.items()}
        start = now(self.device)
        with torch.no_grad():  # ours' generate opens inference_cache itself
            tokens = self.model.generate(
                **inputs,
                max_new_tokens=self.new_tokens,
                min_new_tokens=self.new_tokens,
                do_sample=False,
                pad_token_id=0,
                logits_processor=transformers.LogitsProcessorList([clock]),
                **self.cache,
            )
        if len(clock.stamps) != self.new_tokens:
            raise RuntimeError(f"{len(clock.stamps)} generation steps, expected {self.new_tokens}")
        return tokens, [start, *clock.stamps]

    def run(self, repeats: int) -> dict[str, list[float]]:
        times: dict[str, list[float]] = {}
        for _ in range(repeats):
            for batch in self.decode_batches:
                _, stamps = self._generate(batch)
                times.setdefault(f"prompt_b{batch}", []).append((stamps[1] - stamps[0]) * 1000)
                per_token = (stamps[-1] - stamps[1]) / (len(stamps) - 2) * 1000
                times.setdefault(f"decode_b{batch}", []).append(per_token)
            start = now(self.device)
            self._prefill()
            times.setdefault(f"prefill_b{self.prefill_batch}", []).append((now(self.device) - start) * 1000)
        return times

    def peak_mib(self) -> float:
        return (_status_kib("VmHWM") - self.baseline_kib) / 1024


if __name__ == "__main__":
    serve(DecoderCase)
