"""Bad-input cases at one boundary, encoder identity and Hub ids: what names an encoder (folders, Hub ids, offline mode,
wrapped models, tokenizers)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers
from huggingface_hub.utils import httpx

import adapterfusion as af
import adapterfusion.training
from adapterfusion.errors import HubError
from adapterfusion.experiments.errors import ExperimentSpecError
from adapterfusion.serving.server import serve
from adapterfusion.training import AdapterStore
from adapterfusion.zoo import load_zoo_adapter
from catalogue import Action, BadInput, experiment, in_hub
from tiny_decoders import tiny_decoder
from tiny_models import tiny_encoder

B = BadInput


# ---- helpers -------------------------------------------------------------------------------------------------------
def _unreachable(repo_id: str, **kwargs: Any) -> Any:
    raise httpx.ConnectError("[Errno -2] Name or service not known")


def _train_on(encoder: Any) -> Callable[[Path], Action]:
    return lambda folder: lambda: af.training.train("rte", "head", encoder=encoder, output_dir=folder / "runs")


def _train_offline(encoder: str, **hub: Any) -> Callable[[Path], Action]:
    return lambda folder: in_hub(_train_on(encoder)(folder), folder, **hub)


def _encoder_folder(folder: Path, tokenizer: bool = True, **config: Any) -> Path:
    """A tiny BERT saved as a HuggingFace folder (with the shipped tokenizer unless `tokenizer` is False)."""
    path = folder / "my-encoder"
    tiny_encoder("bert", **config).save_pretrained(path)
    if tokenizer:
        transformers.AutoTokenizer.from_pretrained(af.default_encoder_path()).save_pretrained(path)
    return path


def _encoder_with(damage: Callable[[Path], None], tokenizer: bool = True) -> Callable[[Path], Action]:
    def prepare(folder: Path) -> Action:
        path = _encoder_folder(folder, tokenizer)
        damage(path)
        return _train_on(path)(folder)

    return prepare


def _remove_weights(path: Path) -> None:
    (path / "model.safetensors").unlink()


def _config_text(text: str) -> Callable[[Path], None]:
    return lambda path: (path / "config.json").write_text(text)


def _config_edit(**changes: Any) -> Callable[[Path], None]:
    return lambda path: (path / "config.json").write_text(
        json.dumps({**json.loads((path / "config.json").read_text()), **changes})
    )


def _experiment_without_tokenizer(folder: Path) -> Action:
    return experiment(encoder=str(_encoder_folder(folder, tokenizer=False)))(folder)


def _wrap(make: Callable[[], Any]) -> Callable[[Path], Action]:
    return lambda folder: (lambda model: lambda: af.wrap(model))(make())


def _wrapped_inner() -> Any:
    inner = tiny_encoder("bert")
    af.wrap(inner)
    return inner


def _base_by_canonical_id(folder: Path) -> Action:
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.save_pretrained(folder / "setup")
    return in_hub(lambda: af.AdaptedModel.from_pretrained("bert-base-uncased", folder / "setup"), folder)


def _adapter_by_canonical_id(folder: Path) -> Action:
    model = af.wrap(tiny_encoder("bert"))
    return in_hub(lambda: model.load_adapter("bert-base-uncased"), folder)


def _push_offline(folder: Path) -> Action:
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    return in_hub(lambda: model.push_to_hub("org/name"), folder)


def _store_of_another_encoder(folder: Path) -> Action:
    """An adapter stored from one encoder at /a/x/model, loaded into another at /b/x/model: one store key."""
    trained = af.wrap(tiny_encoder("bert", seed=0))
    trained.add_adapter("rte", af.AdapterConfig.pfeiffer(reduction_factor=4))
    store = AdapterStore(folder / "store")
    store.put_model(trained, "rte", None, "/a/x/model", "rte", "st-a", 1)
    other = af.wrap(tiny_encoder("bert", seed=1))
    return lambda: store.load_into(other, "rte", "st-a", 1, encoder="/b/x/model")


CASES: tuple[BadInput, ...] = (
    # Hub ids: looked up once, from the cache or with one quick request (defect 3: 148 s to fail offline)
    B(
        "experiment-encoder-hub-uncached-offline",
        "encoders",
        "experiment encoder: some-org/some-encoder, not in the cache, HF_HUB_OFFLINE=1 (was: 47 s of retries per job)",
        HubError,
        ("some-org/some-encoder", "not in the local Hugging Face cache", "HF_HUB_OFFLINE", "hf-cache"),
        lambda folder: in_hub(experiment(encoder="some-org/some-encoder")(folder), folder),
        cli=True,
    ),
    B(
        "train-encoder-hub-uncached-offline",
        "encoders",
        "train('rte', 'head', encoder='org/name'), not in the cache, offline (was: 46 s, then a raw OSError)",
        HubError,
        ("encoder org/name", "not in the local Hugging Face cache", "HF_HUB_OFFLINE"),
        _train_offline("org/name"),
    ),
    B(
        "train-encoder-hub-revision-offline",
        "encoders",
        "train(..., encoder='org/name@v2'): a Hub id with a revision, not in the cache, offline",
        HubError,
        ("encoder org/name@v2", "not in the local Hugging Face cache"),
        _train_offline("org/name@v2"),
    ),
    B(
        "train-encoder-hub-unreachable",
        "encoders",
        "train(..., encoder='org/name') online with no route to the Hub",
        HubError,
        ("looking up encoder org/name", "ConnectError", "check the network", "HF_HUB_OFFLINE"),
        _train_offline("org/name", offline=False, model_info=_unreachable),
    ),
    B(
        "from-pretrained-canonical-base-offline",
        "encoders",
        "AdaptedModel.from_pretrained('bert-base-uncased', setup): a canonical Hub id (no org), offline, not cached "
        "(was: called not a Hub id)",
        HubError,
        ("bert-base-uncased", "not in the local Hugging Face cache"),
        _base_by_canonical_id,
    ),
    B(
        "load-adapter-canonical-hub-id-offline",
        "encoders",
        "model.load_adapter('bert-base-uncased'): a canonical Hub id, offline (was: called not a Hub id)",
        HubError,
        ("downloading bert-base-uncased failed", "local cache"),
        _adapter_by_canonical_id,
    ),
    B(
        "load-adapter-empty-string",
        "encoders",
        "model.load_adapter('') (was read as '.', the working folder, and its files listed)",
        af.ConfigError,
        ("adapter folder is ''", "empty name", "Hub id"),
        lambda folder: lambda: af.wrap(tiny_encoder("bert")).load_adapter(""),
    ),
    B(
        "push-to-hub-offline",
        "encoders",
        "model.push_to_hub('org/name') with HF_HUB_OFFLINE=1 (was told to 'pass a local folder instead')",
        HubError,
        ("pushing to org/name failed", "push again online", "save_pretrained(folder)"),
        _push_offline,
    ),
    B(
        "serve-device-meta",
        "encoders",
        "serve(setup, device='meta') (was accepted: every request would fail on weights without values)",
        af.ConfigError,
        ("device 'meta'", "no values", "cpu"),
        lambda folder: lambda: serve(str(folder), device="meta"),
    ),
    # encoder folders: what from_pretrained and training need (defect 7: a 5-token tokenizer trained on [UNK])
    B(
        "train-encoder-without-tokenizer",
        "encoders",
        "train(..., encoder=<folder with config.json and weights but no tokenizer files>)",
        af.ConfigError,
        ("no usable tokenizer", "none of the tokenizer files", "[UNK]", "save_pretrained"),
        _encoder_with(lambda path: None, tokenizer=False),
    ),
    B(
        "experiment-encoder-without-tokenizer",
        "encoders",
        "experiment encoder: a folder with weights but no tokenizer files",
        ExperimentSpecError,
        ("encoder", "no usable tokenizer", "save_pretrained"),
        _experiment_without_tokenizer,
        cli=True,
    ),
    B(
        "train-encoder-tokenizer-damaged",
        "encoders",
        "train(..., encoder=<folder whose tokenizer.json is not JSON>)",
        af.ConfigError,
        ("the tokenizer of encoder", "does not load", "save_pretrained"),
        _encoder_with(lambda path: (path / "tokenizer.json").write_text("{not json")),
    ),
    B(
        "train-encoder-without-weights",
        "encoders",
        "train(..., encoder=<folder with config.json and a tokenizer but no weights>)",
        af.ConfigError,
        ("no weights", "model.safetensors", "model.save_pretrained(folder)"),
        _encoder_with(_remove_weights),
    ),
    B(
        "train-encoder-config-not-json",
        "encoders",
        "train(..., encoder=<folder whose config.json is not JSON>)",
        af.ConfigError,
        ("config.json", "not a readable JSON file", "save_pretrained"),
        _encoder_with(_config_text("model_type: bert")),
    ),
    B(
        "train-encoder-unknown-model-type",
        "encoders",
        "train(..., encoder=<folder whose config.json says model_type 'not-a-model'>)",
        af.ConfigError,
        ("model_type 'not-a-model'", "does not know"),
        _encoder_with(_config_edit(model_type="not-a-model")),
    ),
    B(
        "train-encoder-unsupported-architecture",
        "encoders",
        "train(..., encoder=<an XLNet folder>): a model type transformers knows but adapters have no sites in",
        af.UnsupportedArchitectureError,
        ("'xlnet'", "no adapter sites", "bert"),
        _encoder_with(_config_edit(model_type="xlnet")),
    ),
    B(
        "wrap-config-building-blocks-no-row-expresses",
        "encoders",
        "af.wrap(<a Falcon with new_decoder_architecture=True, parallel_attn=False>): a model type whose config "
        "chooses its blocks, in a combination none of its rows express (its layer's forward fails)",
        af.UnsupportedArchitectureError,
        ("'falcon' with parallel_attn=False, new_decoder_architecture=True", "none of its rows", "Falcon-7B"),
        lambda folder: lambda: af.wrap(tiny_decoder("falcon", new_decoder_architecture=True, parallel_attn=False)),
    ),
    B(
        "wrap-albert-with-several-layer-groups",
        "encoders",
        "af.wrap(<an ALBERT with num_hidden_groups=2>): its layers sit in two groups, where every released ALBERT has "
        "one and the sites take the layers of one",
        af.UnsupportedArchitectureError,
        ("'albert' with num_hidden_groups=2", "num_hidden_groups=1"),
        lambda folder: lambda: af.wrap(tiny_encoder("albert", num_hidden_groups=2)),
    ),
    B(
        "train-encoder-is-a-file",
        "encoders",
        "train(..., encoder=<the encoder's config.json, a file>)",
        af.ConfigError,
        ("is a file", "give the folder"),
        lambda folder: _train_on(_encoder_folder(folder) / "config.json")(folder),
    ),
    # af.wrap's argument (defects 13, 14)
    B(
        "wrap-a-path",
        "encoders",
        "af.wrap('bert-base-uncased'): a name instead of a model (was: AttributeError)",
        af.ConfigError,
        ("af.wrap takes a loaded model", "AutoModel.from_pretrained('bert-base-uncased')"),
        _wrap(lambda: "bert-base-uncased"),
    ),
    B(
        "wrap-none",
        "encoders",
        "af.wrap(None) (was: AttributeError)",
        af.ConfigError,
        ("af.wrap takes a HuggingFace encoder", "NoneType"),
        _wrap(lambda: None),
    ),
    B(
        "wrap-a-tokenizer",
        "encoders",
        "af.wrap(tokenizer) (was: AttributeError)",
        af.ConfigError,
        ("got a tokenizer", "wrap the model"),
        _wrap(lambda: transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())),
    ),
    B(
        "wrap-a-wrapped-model",
        "encoders",
        "af.wrap(af.wrap(model)) (was: 'no adapter sites are known for model_type None')",
        af.ConfigError,
        ("already wrapped", "unload()"),
        _wrap(lambda: af.wrap(tiny_encoder("bert"))),
    ),
    B(
        "wrap-the-same-encoder-twice",
        "encoders",
        "af.wrap(m) twice on one encoder m (was: every site wrapped twice, silently)",
        af.ConfigError,
        ("BertModel is already wrapped", "earlier af.wrap"),
        _wrap(_wrapped_inner),
    ),
    B(
        "wrap-a-plain-torch-module",
        "encoders",
        "af.wrap(torch.nn.Linear(2, 2)): a torch module that is no HuggingFace model",
        af.ConfigError,
        ("Linear", "no config with a model_type", "AutoModel.from_pretrained"),
        _wrap(lambda: torch.nn.Linear(2, 2)),
    ),
    B(
        "zoo-adapter-into-unwrapped-model",
        "encoders",
        "load_zoo_adapter(<an encoder not wrapped>, 'rte') (was: AttributeError 'fingerprint')",
        af.ConfigError,
        ("load_zoo_adapter takes a wrapped model", "BertModel", "af.wrap"),
        lambda folder: lambda: load_zoo_adapter(tiny_encoder("bert"), "rte"),
    ),
    # encoder identity (defect 8): a store key is two path parts, the recorded weights digest tells encoders apart
    B(
        "store-adapter-of-another-encoder",
        "encoders",
        "AdapterStore.load_into(<encoder /b/x/model>) of an adapter stored from /a/x/model (same store key, other "
        "weights; was: loaded silently)",
        af.IncompatibleModelError,
        ("was trained on the encoder", "other weights", "sha256"),
        _store_of_another_encoder,
    ),
)
