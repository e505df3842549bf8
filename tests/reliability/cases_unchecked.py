"""Bad-input cases at one boundary, paths no sweep had checked: averaging adapters across dtypes, map_location, zoo
pulls offline, the server's generation limits at start, pipeline tasks a head cannot serve, evaluating a decoder's
run, and the analysis functions (heatmaps, pruning) given what they cannot draw or rank."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import huggingface_hub
import numpy as np
import torch
import transformers

import adapterfusion as af
from adapterfusion.analysis import FusionActivation
from adapterfusion.evaluation import evaluate_run
from adapterfusion.experiments.figures import plot_run_fusion_attention
from adapterfusion.interop import export_adapterhub
from adapterfusion.pruning import select_adapters
from adapterfusion.serving import ServeConfig
from adapterfusion.serving.app import create_app
from adapterfusion.serving.server import serve
from adapterfusion.zoo import ZooError, load_zoo_adapter
from catalogue import Action, BadInput, ModelTouched, cli, contents, in_hub, load_into, saved_piece
from hub_cache import cached_repo
from task_data import DATA_DIR
from tiny_decoders import tiny_decoder
from tiny_models import randomise, tiny_encoder

B = BadInput


# ---- averaging adapters -------------------------------------------------------------------------------------------
def _three_adapters() -> af.AdaptedModel:
    """A tiny float32 BERT with random adapters a, b, c of one config."""
    model = af.wrap(tiny_encoder("bert"))
    for name in "abc":
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
        with torch.no_grad():
            randomise(torch.nn.ModuleList(site.adapters[name] for site in model.sites_with_adapter(name)), std=0.3)
    return model


def _averaged(spoil: Callable[[af.AdaptedModel], None], adapters: list[str]) -> Callable[[Path], Action]:
    """model.average_adapters('avg', adapters) after spoil(model), which must leave the model as it was if it fails."""

    def prepare(folder: Path) -> Action:
        model = _three_adapters()
        spoil(model)

        def action() -> Any:
            before = contents(model)
            try:
                return model.average_adapters("avg", adapters)
            finally:
                if contents(model) != before:
                    raise ModelTouched(f"the failed average changed the model: {before} -> {contents(model)}")

        return action

    return prepare


def _cast(name: str, **to: Any) -> Callable[[af.AdaptedModel], None]:
    def spoil(model: af.AdaptedModel) -> None:
        for site in model.sites_with_adapter(name):
            site.adapters[name].to(**to)

    return spoil


def _nan_in_c(model: af.AdaptedModel) -> None:
    with torch.no_grad():
        model.sites_with_adapter("c")[-1].adapters["c"].up.bias[0] = float("nan")


def _mixed_dtypes(folder: Path) -> Action:
    """a float32, b bfloat16, c float64 averaged 0.2/0.3/0.5: compared with their float64 sum rounded once."""
    model = _three_adapters()
    _cast("b", dtype=torch.bfloat16)(model)
    _cast("c", dtype=torch.float64)(model)
    weighted = ((0.2, "a"), (0.3, "b"), (0.5, "c"))

    def action() -> str:
        model.average_adapters("avg", {"a": 0.2, "b": 0.3, "c": 0.5})
        exact = all(
            torch.equal(value, sum(w * site.adapters[n].state_dict()[key].double() for w, n in weighted).float())
            for site in model.sites_with_adapter("avg")
            for key, value in site.adapters["avg"].state_dict().items()
        )
        dtype = str(model.sites_with_adapter("avg")[0].adapters["avg"].up.weight.dtype).removeprefix("torch.")
        return (
            f"'avg' of a float32, a bfloat16 and a float64 adapter is {dtype} (the encoder's); equal to their float64 "
            f"sum rounded once: {exact}"
        )

    return action


# ---- where weights land -------------------------------------------------------------------------------------------
def _adapterhub_pickle_on_meta(folder: Path) -> Action:
    """An AdapterHub .bin whose tensors were pickled on the meta device (torch.load's map_location leaves them)."""
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    saved = export_adapterhub(model, "adapter", "a", folder / "hub", use_safetensors=False)
    path = saved / "pytorch_adapter.bin"
    torch.save({key: value.to("meta") for key, value in torch.load(path, weights_only=True).items()}, path)
    return load_into(af.wrap(tiny_encoder("bert")), "adapter", saved)


# ---- Hub ids without the network ----------------------------------------------------------------------------------
def _partly_cached(folder: Path) -> Action:
    """Offline, a cache holding org/adapter's adapter_config.json but not its weights (a download cut off after the
    first of load_adapter's two steps)."""
    piece = saved_piece(folder / "saved")
    cache = folder / "hf-cache"
    cached_repo(cache, "org/adapter", {"adapter_config.json": piece / "adapter_config.json"})
    load = load_into(af.wrap(tiny_encoder("bert")), "adapter", "org/adapter")  # type: ignore[arg-type]

    def action() -> Any:
        with mock.patch.object(huggingface_hub.constants, "HF_HUB_CACHE", str(cache)):
            return load()

    return in_hub(action, folder)


def _zoo_by_hub_id(folder: Path) -> Action:
    model = af.wrap(tiny_encoder("bert"))
    return in_hub(lambda: load_zoo_adapter(model, "rte", zoo="some-org/zoo"), folder)


# ---- serving ------------------------------------------------------------------------------------------------------
def _served_llama(**config: Any) -> Callable[[Path], Action]:
    """create_app for a tiny Llama with 64 positions over the shipped tokenizer."""

    def prepare(folder: Path) -> Action:
        tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
        model = af.wrap(tiny_decoder("llama", vocab_size=len(tokenizer), max_position_embeddings=64))
        return lambda: create_app(model, tokenizer, ServeConfig(**config))

    return prepare


# ---- pipelines ----------------------------------------------------------------------------------------------------
def _pipeline(task: Any, head: str, **settings: Any) -> Callable[[Path], Action]:
    """af.pipeline(task, ..., **settings) on a tiny encoder over the shipped tokenizer with a 3-topic classification
    head."""

    def prepare(folder: Path) -> Action:
        tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
        model = af.wrap(tiny_encoder("bert", vocab_size=len(tokenizer), max_position_embeddings=128))
        model.add_head("topic", af.ClassificationHead(num_labels=3, labels=["sports", "politics", "tech"]))
        return lambda: af.pipeline(task, model, tokenizer, head=head, **settings)

    return prepare


# ---- a finished run, scored again ---------------------------------------------------------------------------------
def _evaluated_decoder_run(folder: Path) -> Action:
    """An rte st-a run of a tiny Llama saved with the shipped (BERT) tokenizer, which makes token_type_ids and has
    no pad token here (as decoders' tokenizers: an eos only), scored again by evaluate_run."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
    tokenizer.eos_token, tokenizer.pad_token = "[SEP]", None
    tiny_decoder("llama", vocab_size=len(tokenizer)).save_pretrained(folder / "llama")
    tokenizer.save_pretrained(folder / "llama")
    settings = {"max_steps": 1, "batch_size": 4, "max_length": 32, "patience": None}
    run = af.training.train(
        "rte",
        "st-a",
        encoder=folder / "llama",
        output_dir=folder / "runs",
        store=folder / "store",
        data_dir=DATA_DIR,
        training_config=settings,
        max_examples={"train": 8, "validation": 4},
    )

    def action() -> str:
        result = evaluate_run(run.run_dir)
        same = result["metrics"]["accuracy"] == run.metrics["accuracy"]
        return f"scored {result['examples']} dev examples; accuracy as training recorded it: {same}"

    return action


# ---- analysis: heatmaps and pruning -------------------------------------------------------------------------------
_ACTIVATION = FusionActivation("f", ("a", "b"), (0, 1), np.array([[0.25, 0.75], [0.5, 0.5]]), 10)


CASES: tuple[BadInput, ...] = (
    B(
        "average-adapters-mixed-dtypes",
        "composition blocks",
        "model.average_adapters('avg', {'a': 0.2, 'b': 0.3, 'c': 0.5}) with b cast to bfloat16 and c to float64 (not "
        "an error; was: b's products rounded in bfloat16, the average off by 4e-4)",
        None,
        ("is float32 (the encoder's)", "rounded once: True"),
        _mixed_dtypes,
    ),
    B(
        "average-adapters-meta-source",
        "composition blocks",
        "model.average_adapters('avg', ['a', 'b']) with b moved to the meta device (was a RuntimeError from torch, "
        "with 'avg' already added)",
        af.ConfigError,
        ("adapter 'b' is on the meta device", "nothing to average"),
        _averaged(_cast("b", device="meta"), ["a", "b"]),
    ),
    B(
        "average-adapters-nan-source",
        "composition blocks",
        "model.average_adapters('avg', ['a', 'c']) with a NaN in c (was accepted: an adapter NaN at one site)",
        af.ConfigError,
        ("adapter 'c' holds 1 NaN", "up.bias", "leave it out"),
        _averaged(_nan_in_c, ["a", "c"]),
    ),
    B(
        "adapterhub-bin-meta-tensors",
        "saved pieces",
        "AdapterHub pytorch_adapter.bin whose tensors were saved on the meta device (map_location='cpu' leaves them "
        "there; was a RuntimeError 'Tensor.item() cannot be called on meta tensors')",
        af.SerializationError,
        ("is on the meta device", "no values", "Save the piece again"),
        _adapterhub_pickle_on_meta,
    ),
    B(
        "serve-device-without-backend",
        "encoders",
        "serve(setup, device='xpu') on a torch built without XPU (was accepted, then an AssertionError from model.to "
        "after loading)",
        af.ConfigError,
        ("device 'xpu'", "cannot place tensors on xpu", "--device cpu"),
        lambda folder: lambda: serve(str(folder), device="xpu"),
    ),
    B(
        "load-adapter-hub-partly-cached-offline",
        "encoders",
        "model.load_adapter('org/adapter') offline, the cache holding its adapter_config.json only (was: "
        "'adapter.safetensors is missing; the adapter was not saved completely', a path in the cache)",
        af.HubError,
        ("org/adapter is only partly in the local Hugging Face cache", "HF_HUB_OFFLINE", "local folder"),
        _partly_cached,
    ),
    B(
        "zoo-hub-id-offline",
        "encoders",
        "load_zoo_adapter(model, 'rte', zoo='some-org/zoo') offline (zoos are folders: fails at once, no look-up)",
        ZooError,
        ("'some-org/zoo'", "neither 'shipped' nor an existing AdapterStore folder", "never pulled from the Hub"),
        _zoo_by_hub_id,
    ),
    B(
        "serve-max-new-tokens-over-positions",
        "model calls",
        "create_app(<a Llama with 64 positions>, tokenizer, ServeConfig(max_new_tokens=64)) (was accepted: every "
        "request asking for 64 new tokens refused with 413)",
        af.ConfigError,
        ("max_new_tokens=64 leaves no room for a prompt", "max_position_embeddings=64", "--max-new-tokens 63"),
        _served_llama(max_new_tokens=64),
    ),
    B(
        "serve-max-new-tokens-over-max-length",
        "model calls",
        "ServeConfig(max_length=32, max_new_tokens=40) for a Llama with 64 positions (prompt and new tokens share "
        "max_length)",
        af.ConfigError,
        ("at most 32 tokens", "--max-length 32", "raise --max-length up to the model's 64"),
        _served_llama(max_length=32, max_new_tokens=40),
    ),
    B(
        "pipeline-zero-shot-without-entailment",
        "model calls",
        "af.pipeline('zero-shot-classification', model, tokenizer, head='topic'), labels sports/politics/tech "
        "(transformers read the last class as entailment)",
        af.ConfigError,
        ("zero-shot-classification", "'entailment'", "head 'topic'", "NLI task"),
        _pipeline("zero-shot-classification", "topic"),
    ),
    B(
        "pipeline-task-none",
        "model calls",
        "af.pipeline(None, model, tokenizer, head='topic') (transformers asked the Hub for a task)",
        af.ConfigError,
        ("needs a task", "text-classification"),
        _pipeline(None, "topic"),
    ),
    B(
        "pipeline-device-absent",
        "model calls",
        "af.pipeline('text-classification', model, tokenizer, head='topic', device='cuda:999') (torch's "
        "AssertionError 'Torch not compiled with CUDA enabled' from inside the pipeline's model.to())",
        af.ConfigError,
        ("device 'cuda:999'", "CUDA GPU"),
        _pipeline("text-classification", "topic", device="cuda:999"),
    ),
    B(
        "evaluate-decoder-run-bert-tokenizer",
        "model calls",
        "evaluate_run(<an st-a run of a Llama saved with a BERT tokenizer, eos but no pad token>) (not an error; was "
        "'LlamaModel.forward takes no token_type_ids' or 'the tokenizer has no pad token': `adapterfusion evaluate` "
        "and `prune` rebuilt the run with another tokenizer than training's)",
        None,
        ("scored 4 dev examples", "as training recorded it: True"),
        _evaluated_decoder_run,
    ),
    B(
        "analysis-heatmap-unknown-suffix",
        "output paths",
        "plot_run_fusion_attention(activation, 'heat.txt') from Python (was matplotlib's ValueError 'Format txt is "
        "not supported', after the drawing; the CLI checked it, the function did not)",
        af.ConfigError,
        ("heat.txt", "cannot be written as .txt", ".png"),
        lambda folder: lambda: plot_run_fusion_attention(_ACTIVATION, folder / "heat.txt"),
    ),
    B(
        "analysis-heatmap-onto-folder",
        "output paths",
        "plot_run_fusion_attention(activation, <an existing folder>) (was an IsADirectoryError after the drawing)",
        af.ConfigError,
        ("is a folder", "give a file path"),
        lambda folder: lambda: plot_run_fusion_attention(_ACTIVATION, folder),
    ),
    B(
        "analysis-empty-activation",
        "silent acceptances",
        "FusionActivation('f', (), (), np.zeros((0, 0)), 0) (was accepted: an empty table and an empty heatmap "
        "written as if fine)",
        af.ConfigError,
        ("0 adapters and 0 layers", "at least one of each"),
        lambda folder: lambda: FusionActivation("f", (), (), np.zeros((0, 0)), 0),
    ),
    B(
        "analysis-select-adapters-nan-share",
        "silent acceptances",
        "select_adapters({'a': nan, 'b': 0.5}, mass=0.5) (was accepted: a NaN never reaches the mass, so every "
        "adapter was kept without a word)",
        af.ConfigError,
        ("{'a': nan}", "not finite numbers >= 0", "measure them again"),
        lambda folder: lambda: select_adapters({"a": float("nan"), "b": 0.5}, mass=0.5),
    ),
    B(
        "cli-no-train-layer-norm-without-houlsby",
        "command line",
        "adapterfusion train-adapter --task rte --no-train-layer-norm (the default --setup st-a; was refused after "
        "the encoder loaded, as \"setup 'st-a' has no option 'train_layer_norm'\")",
        af.ConfigError,
        ("--no-train-layer-norm applies to --setup st-a-houlsby", "drop the flag"),
        lambda folder: (
            lambda: cli(
                "train-adapter",
                "--task",
                "rte",
                "--no-train-layer-norm",
                "--output-dir",
                str(folder / "runs"),
                "--store",
                str(folder / "store"),
            )
        ),
        cli=True,
    ),
)
