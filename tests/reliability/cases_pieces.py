"""Bad-input cases at one boundary, pieces and configs: what a saved or added adapter, fusion or head carries, and the
controls of a wrapped model."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModel, T5EncoderModel

import adapterfusion as af
from adapterfusion.heads.config import HEAD_KINDS
from adapterfusion.interop import export_adapterhub
from adapterfusion.piece import SETUP_FILE
from catalogue import Action, BadInput, edit_json, load_into, saved_piece
from tiny_decoders import tiny_decoder
from tiny_models import tiny_encoder

B = BadInput
NAN, INF = math.nan, math.inf
HUB = Path(__file__).resolve().parents[1] / "fixtures" / "adapterhub" / "bert"
FUSION_CONFIG = "adapter_fusion_config.json"


# ---- helpers -------------------------------------------------------------------------------------------------------
def _model(fused: bool = False) -> af.AdaptedModel:
    """A tiny BERT (2 layers); with `fused`, adapters a and b (as saved_piece makes them), fusion f and head h."""
    model = af.wrap(tiny_encoder("bert"))
    if fused:
        for name in ("a", "b"):
            model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
        model.add_fusion("f", ["a", "b"])
        model.add_head("h", af.ClassificationHead())
    return model


def _saved(kind: str, edit: Callable[[dict], None] | None = None, **load: Any) -> Callable[[Path], Action]:
    """A `kind` saved by saved_piece, its <kind>_config.json changed by `edit`, loaded into a model that has the
    adapters a saved fusion needs."""

    def prepare(folder: Path) -> Action:
        saved = saved_piece(folder, kind)
        if edit is not None:
            edit_json(saved / f"{kind}_config.json", edit)
        model = af.wrap(tiny_encoder("bert"))
        if kind == "fusion":
            for name in ("a", "b"):
                model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
        return load_into(model, kind, saved, **load)

    return prepare


def _loaded_twice() -> Action:
    model = af.wrap(AutoModel.from_pretrained(HUB / "base_model"))
    model.load_adapter(HUB / "adapters" / "pf")
    return lambda: model.load_adapter(HUB / "adapters" / "pf")


def _nul_paths(folder: Path) -> None:
    """Saving and loading through paths with a NUL in them: each must be the library's own error naming the NUL
    (the first two are checked here, the last one's error is the case's)."""
    calls = (
        lambda: _model().load_adapter(f"{folder}/a\x00b"),
        lambda: _model(fused=True).save_adapter("a", f"{folder}/a\x00b"),
    )
    for call in calls:
        try:
            call()
        except af.AdapterFusionError as error:
            assert "NUL character" in str(error), error
        else:
            raise AssertionError("a path with a NUL character was accepted")
    af.AdaptedModel.from_pretrained(tiny_encoder("bert"), f"{folder}/s\x00")


def _config(kind: str, **changes: Any) -> Callable[[Path], Action]:
    return _saved(kind, lambda document: document["config"].update(changes))


def _tensor_as(kind: str, dtype: torch.dtype) -> Callable[[Path], Action]:
    """A saved `kind` whose first tensor was rewritten as `dtype` (loading used to cast it without a word)."""

    def prepare(folder: Path) -> Action:
        saved = saved_piece(folder, kind)
        path = saved / f"{kind}.safetensors"
        tensors = load_file(path)
        key = sorted(tensors)[0]
        tensors[key] = tensors[key].to(dtype)
        save_file(tensors, path)
        return load_into(af.wrap(tiny_encoder("bert")), kind, saved)

    return prepare


def _adapterhub(
    edit: Callable[[dict], None] | None = None, dtype: torch.dtype | None = None
) -> Callable[[Path], Action]:
    """AdapterHub's adapter 'pf' (a 2-layer BERT fixture) with its config or first tensor changed."""

    def prepare(folder: Path) -> Action:
        copy = folder / "pf"
        shutil.copytree(HUB / "adapters" / "pf", copy)
        if edit is not None:
            edit_json(copy / "adapter_config.json", edit)
        if dtype is not None:
            tensors = load_file(copy / "adapter.safetensors")
            key = sorted(tensors)[0]
            tensors[key] = tensors[key].to(dtype)
            save_file(tensors, copy / "adapter.safetensors")
        return load_into(af.wrap(AutoModel.from_pretrained(HUB / "base_model")), "adapter", copy)

    return prepare


def _adapterhub_other(kind: str, edit: Callable[[dict], None]) -> Callable[[Path], Action]:
    """AdapterHub's head 'cls' or fusion 'dynamic' (into a model holding its adapters) with its config changed."""
    source, config = {"head": ("heads/cls", "head_config.json"), "fusion": ("fusions/dynamic", FUSION_CONFIG)}[kind]

    def prepare(folder: Path) -> Action:
        copy = folder / kind
        shutil.copytree(HUB / source, copy)
        edit_json(copy / config, edit)
        model = af.wrap(AutoModel.from_pretrained(HUB / "base_model"))
        if kind == "fusion":
            for name in json.loads((copy / config).read_text())["adapter_names"]:
                model.load_adapter(HUB / "adapters" / name)
        return load_into(model, kind, copy)

    return prepare


def _call(method: str, *args: Any, fused: bool = True, **kwargs: Any) -> Callable[[Path], Action]:
    """`model.<method>(*args, **kwargs)` on a tiny model (with adapters a, b, fusion f and head h if `fused`)."""

    def prepare(folder: Path) -> Action:
        model = _model(fused)
        return lambda: getattr(model, method)(*args, **kwargs)

    return prepare


def _construct(factory: Callable[..., Any], **kwargs: Any) -> Callable[[Path], Action]:
    return lambda folder: lambda: factory(**kwargs)


def _every_head_kind(**kwargs: Any) -> None:
    """Each head kind's config called with `kwargs`: each must refuse them as ConfigError naming its class (the
    others are checked here, TokenClassificationHead's error is the case's)."""
    kinds = sorted(HEAD_KINDS.values(), key=lambda kind: kind is af.TokenClassificationHead)
    for kind in kinds[:-1]:
        try:
            kind(**kwargs)
        except af.ConfigError as error:
            assert f"{kind.__name__}(...)" in str(error), error
        else:
            raise AssertionError(f"{kind.__name__}(**{kwargs}) was accepted")
    kinds[-1](**kwargs)


def _exported_query_norm_fusion(folder: Path) -> Action:
    """A fusion with FusionConfig(query_norm=True) exported to AdapterHub's format, whose fusion projects the raw
    query: written out, it would compute other weights when adapters loads it."""
    model = _model()
    for name in ("a", "b"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.add_fusion("f", ["a", "b"], af.FusionConfig.dynamic(query_norm=True))
    return lambda: export_adapterhub(model, "fusion", "f", folder / "hub")


def _after_unload(use: Callable[[af.AdaptedModel, Path], Any]) -> Callable[[Path], Action]:
    """A model that had adapter a and head h, unloaded, then used: it has no sites left, so an adapter added to it
    never ran (the output equalled the plain model's)."""

    def prepare(folder: Path) -> Action:
        model = _model(fused=True)
        model.save_adapter("a", folder / "a")
        model.unload()
        return lambda: use(model, folder)

    return prepare


def _with_saved(kind: str, act: Callable[[af.AdaptedModel, Path], Any]) -> Callable[[Path], Action]:
    """A model holding the pieces `_model(fused=True)` has, and `act(model, <a saved piece of kind>)`."""

    def prepare(folder: Path) -> Action:
        model = _model(fused=True)
        saved = {"adapter": model.save_adapter, "head": model.save_head}[kind](
            "a" if kind == "adapter" else "h", folder / kind
        )
        return lambda: act(model, saved)

    return prepare


def _fusion_over(saved_over: af.AdapterConfig, loaded_over: af.AdapterConfig) -> Callable[[Path], Action]:
    """A fusion saved from a tiny GPT-2 whose adapters a and b had `saved_over`, loaded into one whose a and b have
    `loaded_over` (another placement)."""

    def prepare(folder: Path) -> Action:
        models = [af.wrap(tiny_decoder("gpt2")) for _ in range(2)]
        for model, config in zip(models, (saved_over, loaded_over), strict=True):
            for name in ("a", "b"):
                model.add_adapter(name, config)
        models[0].add_fusion("f", ["a", "b"])
        return load_into(models[1], "fusion", models[0].save_fusion("f", folder / "f"))

    return prepare


def _setup_index(edit: Callable[[dict], None]) -> Callable[[Path], Action]:
    """A tiny GPT-2 setup (adapters a and b, fusion f, head h) whose adapterfusion_setup.json was changed by `edit`,
    loaded with from_pretrained onto the base saved in its folder."""

    def prepare(folder: Path) -> Action:
        tiny_decoder("gpt2").save_pretrained(folder / "base")
        model = af.wrap(tiny_decoder("gpt2"))
        for name in ("a", "b"):
            model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
        model.add_fusion("f", ["a", "b"])
        model.add_head("h", af.ClassificationHead(num_labels=2, pooling="last"))
        model.save_pretrained(folder / "setup")
        edit_json(folder / "setup" / SETUP_FILE, edit)
        return lambda: af.AdaptedModel.from_pretrained(folder / "base", folder / "setup")

    return prepare


def _setup_on_partial_base(model_type: str, save_part: Callable[[Any, Path], None]) -> Callable[[Path], Action]:
    """A tiny `model_type` setup (adapter a) saved on its *ForCausalLM / *ForConditionalGeneration, loaded with
    from_pretrained onto a base folder that `save_part` wrote from part of that model (the bare model, the encoder)."""

    def prepare(folder: Path) -> Action:
        whole = tiny_decoder(model_type)
        save_part(whole, folder / "base")
        model = af.wrap(whole)
        model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
        model.save_pretrained(folder / "setup")
        return lambda: af.AdaptedModel.from_pretrained(folder / "base", folder / "setup")

    return prepare


def _save_t5_encoder(whole: Any, folder: Path) -> None:
    """The encoder stack of a T5 alone, as T5EncoderModel saves it (its config.json says is_encoder_decoder=false)."""
    encoder = T5EncoderModel(whole.config)
    encoder.load_state_dict(whole.state_dict(), strict=False)
    encoder.save_pretrained(folder)


def _adapter_beyond_float16(folder: Path) -> Action:
    """A tiny GPT-2 adapter (float32) whose up-projection holds 1e5, loaded into the same GPT-2 in float16."""
    model = af.wrap(tiny_decoder("gpt2"))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".adapters.a." in name and name.endswith("up.weight"):
                parameter.fill_(1e5)
    saved = model.save_adapter("a", folder / "a")
    return load_into(af.wrap(tiny_decoder("gpt2", dtype=torch.float16)), "adapter", saved)


CASES: tuple[BadInput, ...] = (
    # ---- non-finite numbers in configs -------------------------------------------------------------------------
    B(
        "adapter-scaling-nan",
        "saved pieces",
        'adapter_config.json with "scaling": NaN (loaded without a word; every output became NaN)',
        af.ConfigError,
        ("adapter_config.json", "scaling=nan", "not a finite number"),
        _config("adapter", scaling=NAN),
    ),
    B(
        "adapter-init-std-inf",
        "saved pieces",
        'adapter_config.json with "init_std": Infinity',
        af.ConfigError,
        ("adapter_config.json", "init_std=inf", "not a finite number"),
        _config("adapter", init_std=INF),
    ),
    B(
        "fusion-regularization-weight-inf",
        "saved pieces",
        'fusion_config.json with "regularization_weight": Infinity (loaded; the training loss became inf)',
        af.ConfigError,
        ("fusion_config.json", "regularization_weight=inf", "not a finite number"),
        _config("fusion", regularization_weight=INF),
    ),
    B(
        "fusion-value-noise-nan",
        "model calls",
        "FusionConfig(value_init_noise=nan)",
        af.ConfigError,
        ("value_init_noise=nan", "not a finite number"),
        _construct(af.FusionConfig, value_init_noise=NAN),
    ),
    B(
        "adapter-reduction-factor-inf",
        "model calls",
        "AdapterConfig(reduction_factor=inf) (blamed the encoder: 'leaves no bottleneck for hidden size 32')",
        af.ConfigError,
        ("reduction_factor=inf", "not a finite number"),
        _construct(af.AdapterConfig, reduction_factor=INF),
    ),
    B(
        "adapterhub-scaling-nan",
        "saved pieces",
        'AdapterHub adapter_config.json with "scaling": NaN',
        af.ConfigError,
        ("adapter_config.json", "scaling=nan", "not a finite number"),
        _adapterhub(lambda document: document["config"].update(scaling=NAN)),
    ),
    # ---- tensors that are not weights ---------------------------------------------------------------------------
    B(
        "adapter-tensor-int64",
        "saved pieces",
        "adapter.safetensors with an int64 tensor (silently cast to float)",
        af.SerializationError,
        ("/a", "'layer.0.output.down.bias'", "dtype int64", "floating point"),
        _tensor_as("adapter", torch.int64),
    ),
    B(
        "adapter-tensor-bool",
        "saved pieces",
        "adapter.safetensors with a bool tensor (silently cast to 0.0/1.0)",
        af.SerializationError,
        ("'layer.0.output.down.bias'", "dtype bool", "floating point"),
        _tensor_as("adapter", torch.bool),
    ),
    B(
        "head-tensor-int8",
        "saved pieces",
        "head.safetensors with an int8 tensor",
        af.SerializationError,
        ("/h", "dtype int8", "floating point"),
        _tensor_as("head", torch.int8),
    ),
    B(
        "adapterhub-tensor-int64",
        "saved pieces",
        "AdapterHub adapter.safetensors with an int64 tensor",
        af.SerializationError,
        ("/pf", "dtype int64", "floating point"),
        _adapterhub(dtype=torch.int64),
    ),
    # ---- leave_out ------------------------------------------------------------------------------------------------
    B(
        "adapter-leave-out-every-layer",
        "saved pieces",
        "adapter_config.json with leave_out [0, 1] on a 2-layer encoder (an adapter with 0 parameters)",
        af.ConfigError,
        ("leave_out=[0, 1]", "covers every layer", "num_layers=2"),
        _config("adapter", leave_out=[0, 1]),
    ),
    B(
        "add-adapter-leave-out-every-layer",
        "model calls",
        "add_adapter('x', AdapterConfig(leave_out=(0, 1))) on a 2-layer encoder (was added, with 0 parameters)",
        af.ConfigError,
        ("'x'", "covers every layer", "num_layers=2"),
        _call("add_adapter", "x", af.AdapterConfig(leave_out=(0, 1)), fused=False),
    ),
    B(
        "adapterhub-leave-out-every-layer",
        "saved pieces",
        "AdapterHub adapter_config.json with leave_out [0, 1] on a 2-layer encoder",
        af.ConfigError,
        ("leave_out=[0, 1]", "covers every layer", "num_layers=2"),
        _adapterhub(lambda document: document["config"].update(leave_out=[0, 1])),
    ),
    B(
        "adapter-leave-out-duplicated",
        "saved pieces",
        "adapter_config.json with leave_out [0, 0]",
        af.ConfigError,
        ("adapter_config.json", "leave_out=[0, 0]", "twice"),
        _config("adapter", leave_out=[0, 0]),
    ),
    B(
        "adapter-leave-out-not-a-list",
        "model calls",
        "AdapterConfig(leave_out=5) (a TypeError from inside the config)",
        af.ConfigError,
        ("leave_out=5", "has type int", "list of layer indices"),
        _construct(af.AdapterConfig, leave_out=5),
    ),
    # ---- fields of the wrong type ---------------------------------------------------------------------------------
    B(
        "saved-base-model-hidden-size-string",
        "saved pieces",
        'adapter_config.json with base_model "hidden_size": "32" (blamed the encoder: '
        "\"saved for hidden_size='32', but this encoder has hidden_size=32\")",
        af.SerializationError,
        ("base_model.hidden_size='32'", "has type str", "expected an integer"),
        _saved("adapter", lambda document: document["base_model"].update(hidden_size="32")),
    ),
    B(
        "saved-base-model-not-object",
        "saved pieces",
        'adapter_config.json with "base_model": [1] (was not checked at all)',
        af.SerializationError,
        ("base_model has type list", "JSON object"),
        _saved("adapter", lambda document: document.update(base_model=[1])),
    ),
    B(
        "adapter-reduction-factor-string",
        "model calls",
        "AdapterConfig(reduction_factor='16')",
        af.ConfigError,
        ("reduction_factor='16'", "has type str", "expected a positive number"),
        _construct(af.AdapterConfig, reduction_factor="16"),
    ),
    B(
        "adapter-positions-int",
        "model calls",
        "AdapterConfig(positions=3) (a TypeError from inside the config)",
        af.ConfigError,
        ("positions=3", "has type int"),
        _construct(af.AdapterConfig, positions=3),
    ),
    B(
        "head-num-labels-string",
        "model calls",
        "ClassificationHead(num_labels='2')",
        af.ConfigError,
        ("num_labels='2'", "has type str", "expected an integer >= 1"),
        _construct(af.ClassificationHead, num_labels="2"),
    ),
    B(
        "head-labels-duplicated",
        "saved pieces",
        'head_config.json with "labels": ["a", "a"] (accepted: two outputs with one name)',
        af.ConfigError,
        ("head_config.json", "['a']", "twice"),
        _config("head", labels=["a", "a"]),
    ),
    B(
        "head-labels-string",
        "model calls",
        "ClassificationHead(labels='ab') (read as the labels 'a' and 'b')",
        af.ConfigError,
        ("labels='ab'", "has type str", "list of 2 label names"),
        _construct(af.ClassificationHead, labels="ab"),
    ),
    B(
        "saved-fusion-adapters-not-names",
        "saved pieces",
        'fusion_config.json with "adapters": [1, 2]',
        af.SerializationError,
        ("'adapters' is [1, 2]", "list of adapter names"),
        _saved("fusion", lambda document: document.update(adapters=[1, 2])),
    ),
    B(
        "adapterhub-scaling-list",
        "saved pieces",
        'AdapterHub adapter_config.json with "scaling": [1] (a TypeError from float())',
        af.ConfigError,
        ("adapter_config.json", "scaling=[1]", "has type list"),
        _adapterhub(lambda document: document["config"].update(scaling=[1])),
    ),
    B(
        "adapterhub-flag-string",
        "saved pieces",
        'AdapterHub adapter_config.json with "original_ln_before": "false" (read as true)',
        af.ConfigError,
        ("adapter_config.json", "original_ln_before='false'", "has type str", "true or false"),
        _adapterhub(lambda document: document["config"].update(original_ln_before="false")),
    ),
    # options we drop on import, or read loosely, of a type adapters itself fails on
    B(
        "adapterhub-dropout-string",
        "saved pieces",
        'AdapterHub adapter_config.json with "dropout": "0.1" (dropped unread; adapters fails in nn.Dropout)',
        af.ConfigError,
        ("adapter_config.json", "dropout='0.1'", "has type str", "from 0 to 1"),
        _adapterhub(lambda document: document["config"].update(dropout="0.1")),
    ),
    B(
        "adapterhub-stochastic-depth-null",
        "saved pieces",
        'AdapterHub adapter_config.json with "stochastic_depth": null (dropped unread; adapters fails comparing it)',
        af.ConfigError,
        ("adapter_config.json", "stochastic_depth=None", "expected a number"),
        _adapterhub(lambda document: document["config"].update(stochastic_depth=None)),
    ),
    B(
        "adapterhub-init-weights-unknown",
        "saved pieces",
        'AdapterHub adapter_config.json with "init_weights": "xavier" (read as "bert"; adapters fails on it)',
        af.ConfigError,
        ("adapter_config.json", "init_weights='xavier'", "bert, houlsby, mam_adapter"),
        _adapterhub(lambda document: document["config"].update(init_weights="xavier")),
    ),
    B(
        "adapterhub-scaling-int",
        "saved pieces",
        'AdapterHub adapter_config.json with "scaling": 2 (loaded as 2.0; adapters fails: "Unknown scaling type")',
        af.ConfigError,
        ("adapter_config.json", "scaling=2", "whole number", "write 2.0"),
        _adapterhub(lambda document: document["config"].update(scaling=2)),
    ),
    B(
        "adapterhub-leave-out-null",
        "saved pieces",
        'AdapterHub adapter_config.json with "leave_out": null (read as []; adapters fails on it)',
        af.ConfigError,
        ("adapter_config.json", "leave_out=None", "list of layer indices"),
        _adapterhub(lambda document: document["config"].update(leave_out=None)),
    ),
    B(
        "adapterhub-non-linearity-int",
        "saved pieces",
        'AdapterHub adapter_config.json with "non_linearity": 3 (called unsupported, not of the wrong type)',
        af.ConfigError,
        ("adapter_config.json", "non_linearity=3", "has type int", "relu"),
        _adapterhub(lambda document: document["config"].update(non_linearity=3)),
    ),
    B(
        "adapterhub-head-bias-null",
        "saved pieces",
        'AdapterHub head_config.json with "bias": null (read as a bias; adapters builds its output layer without one)',
        af.ConfigError,
        ("head_config.json", "bias=None", "without a bias"),
        _adapterhub_other("head", lambda document: document["config"].update(bias=None)),
    ),
    B(
        "adapterhub-head-label2id-string",
        "saved pieces",
        'AdapterHub head_config.json with "label2id": "x" (ignored; adapters fails on it)',
        af.ConfigError,
        ("head_config.json", "label2id='x'", "has type str", "label -> id"),
        _adapterhub_other("head", lambda document: document["config"].update(label2id="x")),
    ),
    B(
        "adapterhub-fusion-dropout-string",
        "saved pieces",
        'AdapterHub adapter_fusion_config.json with "dropout_prob": "0.1" (blamed our own score_dropout field)',
        af.ConfigError,
        ("adapter_fusion_config.json", "dropout_prob='0.1'", "has type str"),
        _adapterhub_other("fusion", lambda document: document["config"].update(dropout_prob="0.1")),
    ),
    # ---- names ------------------------------------------------------------------------------------------------------
    B(
        "load-adapter-name-empty",
        "saved pieces",
        "load_adapter(folder, name='') (the empty name was ignored: the saved one was used)",
        af.ConfigError,
        ("invalid adapter name ''", "letters, digits"),
        _saved("adapter", name=""),
    ),
    B(
        "load-fusion-name-empty",
        "saved pieces",
        "load_fusion(folder, name='')",
        af.ConfigError,
        ("invalid fusion name ''",),
        _saved("fusion", name=""),
    ),
    B(
        "adapter-name-module-attribute",
        "model calls",
        "add_adapter('training') (a KeyError from torch: \"attribute 'training' already exists\")",
        af.ConfigError,
        ("adapter name 'training'", "nn.Module", "choose another name"),
        _call("add_adapter", "training", fused=False),
    ),
    B(
        "head-name-module-attribute",
        "model calls",
        "add_head('state_dict', ClassificationHead())",
        af.ConfigError,
        ("head name 'state_dict'", "nn.Module"),
        _call("add_head", "state_dict", af.ClassificationHead(), fused=False),
    ),
    B(
        "saved-name-module-attribute",
        "saved pieces",
        'adapter_config.json with "name": "forward"',
        af.ConfigError,
        ("adapter_config.json", "'forward'", "nn.Module"),
        _saved("adapter", lambda document: document.update(name="forward")),
    ),
    # ---- model controls -------------------------------------------------------------------------------------------
    B(
        "fusion-step-negative",
        "model calls",
        "set_fusion_step(-5) (accepted)",
        af.ConfigError,
        ("fusion step=-5", "an integer >= 0"),
        _call("set_fusion_step", -5),
    ),
    B(
        "fusion-step-bool",
        "model calls",
        "set_fusion_step(True) (accepted as step 1)",
        af.ConfigError,
        ("fusion step=True", "has type bool"),
        _call("set_fusion_step", True),
    ),
    B(
        "activate-adapter-list",
        "model calls",
        "activate(adapter=['a', 'b']) (said \"no adapter named ['a', 'b'] is loaded; loaded adapters: ['a', 'b']\")",
        af.ConfigError,
        ("expected one adapter name", "list", "add_fusion"),
        _call("activate", adapter=["a", "b"]),
    ),
    B(
        "train-adapter-none",
        "model calls",
        "train_adapter(None)",
        af.ConfigError,
        ("expected one adapter name", "NoneType"),
        _call("train_adapter", None),
    ),
    B(
        "activate-skip-layers-int",
        "model calls",
        "activate(adapter='a', skip_layers=1) (a TypeError: 'int' object is not iterable)",
        af.ConfigError,
        ("skip_layers=1", "has type int", "list of layer indices"),
        _call("activate", adapter="a", skip_layers=1),
    ),
    B(
        "fusion-mask-string",
        "model calls",
        "set_fusion_mask('f', 'a') (a string read as a list of its characters)",
        af.ConfigError,
        ("keep='a'", "has type str", "keep=['a']"),
        _call("set_fusion_mask", "f", "a"),
    ),
    B(
        "fusion-mask-duplicate",
        "model calls",
        "set_fusion_mask('f', ['a', 'a'])",
        af.ConfigError,
        ("keep=['a', 'a']", "twice"),
        _call("set_fusion_mask", "f", ["a", "a"]),
    ),
    B(
        "add-fusion-adapters-none",
        "model calls",
        "add_fusion('g', None) (a TypeError: 'NoneType' object is not iterable)",
        af.ConfigError,
        ("fusion 'g'", "adapters=None", "has type NoneType", "list of adapter names"),
        _call("add_fusion", "g", None),
    ),
    B(
        "add-fusion-huge-integer-in-list",
        "model calls",
        "add_fusion('g', ['a', 10**5000]) (a raw ValueError from repr: Python's 4300-digit limit, advising "
        "sys.set_int_max_str_digits())",
        af.ConfigError,
        ("fusion 'g'", "an integer of about 5001 digits", "list of adapter names"),
        _call("add_fusion", "g", ["a", 10**5000]),
    ),
    # ---- a model after unload() -------------------------------------------------------------------------------------
    B(
        "unload-then-add-adapter",
        "model calls",
        "unload(), then add_adapter('c') and activate(adapter='c') on the AdaptedModel (the adapter had no effect)",
        af.ModelUnloadedError,
        ("this model was unloaded", "af.wrap"),
        _after_unload(lambda model, folder: (model.add_adapter("c"), model.activate(adapter="c"))),
    ),
    B(
        "unload-then-load-adapter",
        "model calls",
        "unload(), then load_adapter(<saved adapter>, name='c')",
        af.ModelUnloadedError,
        ("this model was unloaded", "af.wrap"),
        _after_unload(lambda model, folder: model.load_adapter(folder / "a", name="c")),
    ),
    B(
        "unload-then-add-head",
        "model calls",
        "unload(), then add_head('h2', ClassificationHead())",
        af.ModelUnloadedError,
        ("this model was unloaded", "af.wrap"),
        _after_unload(lambda model, folder: model.add_head("h2", af.ClassificationHead())),
    ),
    B(
        "unload-then-forward",
        "model calls",
        "unload(), then a forward of the AdaptedModel",
        af.ModelUnloadedError,
        ("this model was unloaded", "af.wrap"),
        _after_unload(lambda model, folder: model(input_ids=torch.tensor([[1, 2, 3]]))),
    ),
    # #21's second trial: what the first validators let through
    B(
        "get-head-unknown",
        "model calls",
        "get_head('zz') with no such head (was a KeyError from torch's ModuleDict)",
        af.NameNotFoundError,
        ("no head named 'zz'", "loaded heads"),
        lambda folder: lambda: _model(fused=True).get_head("zz"),
    ),
    B(
        "head-classification-one-label",
        "model calls",
        "ClassificationHead(num_labels=1) (was accepted: a cross-entropy over one class is always 0, so it learns "
        "nothing)",
        af.ConfigError,
        ("num_labels=1", "RegressionHead"),
        lambda folder: lambda: af.ClassificationHead(num_labels=1),
    ),
    B(
        "load-adapter-overwrite-string",
        "saved pieces",
        "load_adapter(folder, overwrite='no') over a loaded adapter of that name (was replaced: 'no' is truthy)",
        af.ConfigError,
        ("overwrite='no'", "str", "true or false"),
        _with_saved("adapter", lambda model, saved: load_into(model, "adapter", saved, overwrite="no")()),
    ),
    B(
        "load-head-labels-string",
        "saved pieces",
        "load_head(folder, labels='ab') (a string where a task's label names go; was loaded unchecked)",
        af.ConfigError,
        ("labels='ab'", "str", "label names"),
        _with_saved("head", lambda model, saved: load_into(model, "head", saved, name="h2", labels="ab")()),
    ),
    B(
        "save-pretrained-adapters-int",
        "model calls",
        "save_pretrained(folder, adapters=5) (was a TypeError: 'int' object is not iterable)",
        af.ConfigError,
        ("adapters=5", "int", "list of names"),
        lambda folder: lambda: _model(fused=True).save_pretrained(folder / "setup", adapters=5),
    ),
    B(
        "export-adapterhub-query-norm-fusion",
        "model calls",
        "export_adapterhub(model, 'fusion', 'f', folder) of a fusion with FusionConfig(query_norm=True)",
        af.ConfigError,
        ("query_norm=True", "cannot be exported to AdapterHub"),
        _exported_query_norm_fusion,
    ),
    # a misspelt keyword in a direct call of a config dataclass (its dict form and presets already named it)
    B(
        "fusion-config-keyword-typo",
        "model calls",
        "af.FusionConfig(temprature=2.0) (was a TypeError from the dataclass: unexpected keyword argument)",
        af.ConfigError,
        ("'temprature'", "FusionConfig(...)", "did you mean 'temperature'?", "known keys"),
        _construct(af.FusionConfig, temprature=2.0),
    ),
    B(
        "adapter-config-keyword-typo",
        "model calls",
        "af.AdapterConfig(reduction_factr=4) (was a TypeError from the dataclass: unexpected keyword argument)",
        af.ConfigError,
        ("'reduction_factr'", "AdapterConfig(...)", "did you mean 'reduction_factor'?"),
        _construct(af.AdapterConfig, reduction_factr=4),
    ),
    B(
        "adapter-config-preset-not-a-string",
        "model calls",
        "af.AdapterConfig.from_name(3) (was an AttributeError: 'int' object has no attribute 'lower')",
        af.ConfigError,
        ("unknown adapter preset 3", "pfeiffer, seq_bn, houlsby, double_seq_bn"),
        _construct(af.AdapterConfig.from_name, name=3),
    ),
    B(
        "fusion-config-preset-misspelt",
        "model calls",
        "af.FusionConfig.from_name('dynamc')",
        af.ConfigError,
        ("unknown fusion preset 'dynamc'", "did you mean 'dynamic'?"),
        _construct(af.FusionConfig.from_name, name="dynamc"),
    ),
    B(
        "head-config-a-million-layers",
        "model calls",
        "af.ClassificationHead(layers=1_000_000) (was accepted: adding it built a million hidden x hidden layers, "
        "and a server loading such a head_config.json through POST /v1/pieces hung its model thread)",
        af.ConfigError,
        ("layers=1000000", "at most 64", "a few linear layers"),
        _construct(af.ClassificationHead, layers=1_000_000),
    ),
    B(
        "head-config-keyword-typo",
        "model calls",
        "af.ClassificationHead(num_lables=3, dropuot=0.2) (was a TypeError from the dataclass: unexpected keyword "
        "argument)",
        af.ConfigError,
        ("ClassificationHead(...)", "'num_labels' for 'num_lables'", "'dropout' for 'dropuot'"),
        _construct(af.ClassificationHead, num_lables=3, dropuot=0.2),
    ),
    B(
        "every-head-config-keyword-typo",
        "model calls",
        "layer=2 for layers=, to each head kind's config, TokenClassificationHead last (was a TypeError from the "
        "dataclass)",
        af.ConfigError,
        ("TokenClassificationHead(...)", "'layer'", "did you mean 'layers'?"),
        lambda folder: lambda: _every_head_kind(layer=2),
    ),
    B(
        "save-adapter-from-meta-model",
        "saved pieces",
        "model.to('meta'), then save_adapter (was a NotImplementedError 'Cannot copy out of meta tensor')",
        af.ConfigError,
        ("adapter 'a'", "meta device", "nothing to save"),
        lambda folder: lambda: _model(fused=True).to("meta").save_adapter("a", folder / "a"),
    ),
    B(
        "save-pretrained-from-meta-model",
        "saved pieces",
        "model.to('meta'), then save_pretrained (was a NotImplementedError 'Cannot copy out of meta tensor')",
        af.ConfigError,
        ("encoder's weights", "meta device", "no values"),
        lambda folder: lambda: _model(fused=True).to("meta").save_pretrained(folder / "setup"),
    ),
    B(
        "load-adapter-into-meta-model",
        "saved pieces",
        "load_adapter into a model moved to the meta device (was: 'loaded', every weight dropped)",
        af.ConfigError,
        ("meta device", "adapter 'a'", "keep none of its values"),
        lambda folder: load_into(_model().to("meta"), "adapter", saved_piece(folder)),
    ),
    B(
        "piece-path-nul",
        "saved pieces",
        "load_adapter, save_adapter and from_pretrained given a path with a NUL character (a raw ValueError before)",
        af.AdapterFusionError,
        ("NUL character",),
        lambda folder: lambda: _nul_paths(folder),
    ),
    B(
        "train-encoder-string",
        "model calls",
        "model.train_adapter('a', train_encoder='no') (a str is truthy: the whole encoder was unfrozen)",
        af.ConfigError,
        ("train_encoder='no'", "expected true or false"),
        lambda folder: lambda: _model(fused=True).train_adapter("a", train_encoder="no"),
    ),
    B(
        "average-adapters-overwrite-string",
        "model calls",
        "model.average_adapters('c', ['a', 'b'], overwrite='no') (accepted)",
        af.ConfigError,
        ("average_adapters(overwrite)='no'", "expected true or false"),
        lambda folder: lambda: _model(fused=True).average_adapters("c", ["a", "b"], overwrite="no"),
    ),
    B(
        "forward-parallel-share-prefix-string",
        "model calls",
        "model.forward_parallel('f', share_encoder_prefix='no', ...) (accepted as True)",
        af.ConfigError,
        ("forward_parallel(share_encoder_prefix)='no'", "expected true or false"),
        lambda folder: (
            lambda: _model(fused=True).forward_parallel(
                "f",
                heads={"a": "h", "b": "h"},
                fusion_head="h",
                share_encoder_prefix="no",
                input_ids=torch.ones(1, 4, dtype=torch.long),
            )
        ),
    ),
    B(
        "reduction-factor-key-leading-zero",
        "model calls",
        "AdapterConfig(reduction_factor={'default': 16, '01': 4}) (passed the layer check, never applied: layer 1 "
        "got the default bottleneck)",
        af.ConfigError,
        ("reduction_factor key '01'", "no leading zero"),
        lambda folder: lambda: af.AdapterConfig.pfeiffer(reduction_factor={"default": 16, "01": 4}),
    ),
    B(
        "reduction-factor-layer-twice",
        "model calls",
        "AdapterConfig(reduction_factor={'default': 16, 1: 4, '1': 8}) (the last one won silently)",
        af.ConfigError,
        ("names layer '1' twice",),
        lambda folder: lambda: af.AdapterConfig.pfeiffer(reduction_factor={"default": 16, 1: 4, "1": 8}),
    ),
    B(
        "adapterhub-adapter-loaded-twice",
        "saved pieces",
        "the same AdapterHub adapter folder loaded twice (TypeError: PieceExistsError.__init__() missing 'name')",
        af.PieceExistsError,
        ("an adapter named", "already exists", "overwrite=True"),
        lambda folder: _loaded_twice(),
    ),
    B(
        "state-dict-of-pieces-the-model-lacks",
        "model calls",
        "model.load_state_dict(state dict of a model with adapters a and b, fusion f and head h) into a model without "
        "them (torch's RuntimeError listing every unexpected tensor)",
        af.NameNotFoundError,
        ("adapters ['a', 'b']", "fusions ['f']", "heads ['h']", "add each piece first"),
        lambda folder: lambda: _model().load_state_dict(_model(fused=True).state_dict()),
    ),
    # ---- decoders: pieces and setups saved on one placement or index, loaded on another -----------------------------
    B(
        "fusion-over-pfeiffer-into-houlsby-adapters",
        "saved pieces",
        "a GPT-2 fusion saved over Pfeiffer adapters, loaded over Houlsby adapters of the same names (was 'holds "
        "weights for the sites of layers [0, 1] but none for layers [0, 1]... another number of layers')",
        af.IncompatibleModelError,
        ("no weights for ['layer.0.attention'", "the adapters it fuses", "positions=['attention', 'output']"),
        _fusion_over(
            af.AdapterConfig.pfeiffer(reduction_factor=4), af.AdapterConfig.houlsby(4, train_layer_norm=False)
        ),
    ),
    B(
        "fusion-over-houlsby-into-pfeiffer-adapters",
        "saved pieces",
        "a GPT-2 fusion saved over Houlsby adapters, loaded over Pfeiffer adapters of the same names (was 'weights "
        "for sites this encoder's config does not place', blaming the encoder)",
        af.IncompatibleModelError,
        ("weights at ['layer.0.attention'", "positions=['output']", "Load the adapters it was saved with"),
        _fusion_over(
            af.AdapterConfig.houlsby(4, train_layer_norm=False), af.AdapterConfig.pfeiffer(reduction_factor=4)
        ),
    ),
    B(
        "fusion-over-adapters-with-leave-out",
        "saved pieces",
        "a GPT-2 fusion saved over adapters of every layer, loaded over adapters with leave_out=[0]",
        af.IncompatibleModelError,
        ("weights at ['layer.0.output']", "leave_out=[0]", "add_fusion"),
        _fusion_over(
            af.AdapterConfig.pfeiffer(reduction_factor=4), af.AdapterConfig.pfeiffer(reduction_factor=4, leave_out=[0])
        ),
    ),
    B(
        "setup-active-adapter-int",
        "saved pieces",
        'adapterfusion_setup.json with "active": {"adapter": 3} (was "activate() takes an adapter or a fusion, not '
        'both")',
        af.SerializationError,
        ("adapterfusion_setup.json", "active.adapter=3", "has type int", "save the setup again"),
        _setup_index(lambda index: index["active"].update(adapter=3)),
    ),
    B(
        "setup-active-fusion-not-listed",
        "saved pieces",
        'adapterfusion_setup.json whose "active" fusion is one its "pieces" do not list (was "no fusion named \'zz\' '
        'is loaded ... add it with add_fusion()", blaming the model)',
        af.SerializationError,
        ("adapterfusion_setup.json", "the fusion 'zz'", "do not list", "saved fusions: ['f']"),
        _setup_index(lambda index: index["active"].update(fusion="zz")),
    ),
    B(
        "setup-active-skip-layers-out-of-range",
        "saved pieces",
        'adapterfusion_setup.json with "active": {"skip_layers": [9]} (the message did not name the file)',
        af.ConfigError,
        ("adapterfusion_setup.json", "skip_layers [9]", "0..1"),
        _setup_index(lambda index: index["active"].update(skip_layers=[9])),
    ),
    B(
        "setup-piece-listed-twice",
        "saved pieces",
        "adapterfusion_setup.json listing adapter 'a' twice (was PieceExistsError 'an adapter named 'a' already "
        "exists', blaming the model)",
        af.SerializationError,
        ("adapterfusion_setup.json", "adapter 'a' more than once", "save the setup again"),
        _setup_index(lambda index: index["pieces"].append(dict(index["pieces"][0]))),
    ),
    B(
        "setup-base-class-int",
        "saved pieces",
        'adapterfusion_setup.json with base_model "class": 5, the base given as a folder (a TypeError from getattr)',
        af.SerializationError,
        ("adapterfusion_setup.json", "base_model.class=5", "has type int", "transformers class name"),
        _setup_index(lambda index: index["base_model"].update({"class": 5})),
    ),
    B(
        "setup-base-class-of-another-model-type",
        "saved pieces",
        'a GPT-2 adapterfusion_setup.json with base_model "class": "BertModel", the base given as a folder (its '
        "checkpoint was loaded into a BertModel with every weight missing, then refused when wrapped)",
        af.SerializationError,
        ("adapterfusion_setup.json", "base_model.class='BertModel'", "'bert' models", "model_type is 'gpt2'"),
        _setup_index(lambda index: index["base_model"].update({"class": "BertModel"})),
    ),
    B(
        "setup-causal-lm-onto-bare-model-folder",
        "saved pieces",
        "a Llama setup saved on LlamaForCausalLM, loaded with from_pretrained onto the folder of the bare LlamaModel "
        "(no lm_head.weight: transformers drew the LM head at random and only logged it; generate() gave noise)",
        af.IncompatibleModelError,
        (
            "adapterfusion_setup.json",
            "LlamaForCausalLM",
            "without its lm_head (lm_head.*: 1 weight(s) missing)",
            "the whole model",
        ),
        _setup_on_partial_base("llama", lambda whole, folder: whole.model.save_pretrained(folder)),
    ),
    B(
        "setup-seq2seq-onto-encoder-only-folder",
        "saved pieces",
        "a T5 setup saved on T5ForConditionalGeneration, loaded with from_pretrained onto a T5EncoderModel's folder "
        "(the whole decoder drawn at random, with only a warning that the weights differ, 'expected' in another "
        "precision)",
        af.IncompatibleModelError,
        (
            "adapterfusion_setup.json",
            "T5ForConditionalGeneration",
            "without its decoder (decoder.*:",
            "the whole model",
        ),
        _setup_on_partial_base("t5", _save_t5_encoder),
    ),
    B(
        "adapter-float32-beyond-float16-model",
        "saved pieces",
        "a float32 GPT-2 adapter holding 1e5, loaded into the GPT-2 in float16 (cast to inf without a word: every "
        "output NaN)",
        af.IncompatibleModelError,
        ("'up.weight' (float32)", "beyond what this model's float16 can hold", "1e+05", "Load the model in float32"),
        _adapter_beyond_float16,
    ),
)
