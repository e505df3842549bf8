"""Bad-input cases at one boundary, loading what was saved or named: encoders from folders and Hub ids, their config and
tokenizer files, setup folders and the pieces inside them."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import adapterfusion as af
from adapterfusion.errors import HubError
from catalogue import Action, BadInput, encoder_folder, in_hub, train_on_damaged
from hub_cache import cached_repo
from tiny_models import tiny_encoder

B = BadInput
GROUP = "loading"


# ---- encoder folders: each broken file named as itself ----------------------------------------------------------
def _config(**changes: Any) -> Callable[[Path], Any]:
    return lambda path: (path / "config.json").write_text(
        json.dumps({**json.loads((path / "config.json").read_text()), **changes})
    )


def _write(name: str, text: str) -> Callable[[Path], Any]:
    return lambda path: (path / name).write_text(text)


def _truncate(name: str) -> Callable[[Path], Any]:
    return lambda path: (path / name).write_bytes((path / name).read_bytes()[:64])


def _truncated_pytorch_weights(path: Path) -> None:
    """The weights as a pytorch_model.bin (torch.save's zip) cut off after 100 bytes, in place of model.safetensors."""
    (path / "model.safetensors").unlink()
    torch.save(tiny_encoder("bert", vocab_size=30522).state_dict(), path / "pytorch_model.bin")
    _truncate("pytorch_model.bin")(path)


def _folder_for(name: str) -> Callable[[Path], Any]:
    def damage(path: Path) -> None:
        (path / name).unlink()
        (path / name).mkdir()

    return damage


def _partly_cached_encoder(folder: Path) -> Action:
    """The Hub id org/enc with only its config.json in the local cache (what AutoConfig.from_pretrained leaves),
    trained on offline."""
    cached_repo(folder / "hf-cache", "org/enc", {"config.json": encoder_folder(folder) / "config.json"})
    return in_hub(lambda: af.training.train("rte", "st-a", encoder="org/enc", output_dir=folder / "runs"), folder)


def _config_case(id: str, tried: str, keywords: tuple[str, ...], **changes: Any) -> BadInput:
    return B(id, GROUP, tried, af.ConfigError, ("config.json", *keywords), train_on_damaged(_config(**changes)))


# ---- saved setups: no piece written into a part of one ------------------------------------------------------------
def _saved_setup(folder: Path) -> tuple[af.AdaptedModel, Path]:
    model = af.wrap(tiny_encoder("bert"))
    for name in ("a", "b"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.add_fusion("f", ["a", "b"])
    model.add_head("h", af.ClassificationHead(num_labels=2))
    return model, model.save_pretrained(folder / "setup")


def _save_into_setup(kind: str, name: str, where: str, **kwargs: Any) -> Callable[[Path], Action]:
    def prepare(folder: Path) -> Action:
        model, setup = _saved_setup(folder)
        return lambda: getattr(model, f"save_{kind}")(name, setup / where if where else setup, **kwargs)

    return prepare


def _save_through_link(folder: Path) -> Action:
    model, setup = _saved_setup(folder)
    os.symlink(setup / "heads", folder / "heads-link")
    return lambda: model.save_head("h", folder / "heads-link" / "h2")


def _load_damaged_setup(damage: Callable[[Path], Any]) -> Callable[[Path], Action]:
    def prepare(folder: Path) -> Action:
        _, setup = _saved_setup(folder)
        damage(setup)
        return lambda: af.AdaptedModel.from_pretrained(tiny_encoder("bert"), setup)

    return prepare


def _newer(file: str) -> Callable[[Path], Any]:
    """`file` of the setup as a newer adapterfusion would write it: format_version 2, library_version 9.0.0."""
    return lambda setup: (setup / file).write_text(
        json.dumps({**json.loads((setup / file).read_text()), "format_version": 2, "library_version": "9.0.0"})
    )


def _load_newer_piece(folder: Path) -> Action:
    _, setup = _saved_setup(folder)
    _newer("adapters/a/adapter_config.json")(setup)
    return lambda: af.wrap(tiny_encoder("bert")).load_adapter(setup / "adapters" / "a")


def _save_case_twins(folder: Path) -> Action:
    model = af.wrap(tiny_encoder("bert"))
    for name in ("a", "A"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
    return lambda: model.save_pretrained(folder / "setup")


def _load_piece_with_newer_setting(folder: Path) -> Action:
    """An adapter whose config holds a setting this version does not know, saved by adapterfusion 9.0.0."""
    model, _ = _saved_setup(folder)
    path = model.save_adapter("a", folder / "a")
    config = json.loads((path / "adapter_config.json").read_text())
    config["config"]["new_setting"] = 3
    (path / "adapter_config.json").write_text(json.dumps({**config, "library_version": "9.0.0"}))
    return lambda: af.wrap(tiny_encoder("bert")).load_adapter(path)


_NEWER = ("format_version 2", "reads 1", "newer adapterfusion (9.0.0", "upgrade adapterfusion")
_IN_SETUP = ("part of the saved setup", "adapterfusion_setup.json", "outside the setup", "save_pretrained it again")

CASES: tuple[BadInput, ...] = (
    # a bad value in an encoder folder's config.json (was: a tokenizer failure, or loaded without a word)
    _config_case(
        "encoder-config-size-a-string",
        "train(..., encoder=<folder whose config.json has hidden_size '32'>) (was: 'the tokenizer does not load')",
        ("'hidden_size'", "'32' (str)", "positive whole number"),
        hidden_size="32",
    ),
    _config_case(
        "encoder-config-negative-layer-count",
        "train(..., encoder=<folder whose config.json has num_hidden_layers -1>) (was: loaded as a model of no layers)",
        ("'num_hidden_layers'", "-1", "positive whole number"),
        num_hidden_layers=-1,
    ),
    _config_case(
        "encoder-config-dtype-not-a-dtype",
        "train(..., encoder=<folder whose config.json has torch_dtype 'float33'>) (was: taken as float32 silently)",
        ("'torch_dtype'", "'float33'", "torch dtype"),
        torch_dtype="float33",
    ),
    _config_case(
        "encoder-config-labels-a-list",
        "train(..., encoder=<folder whose config.json has id2label [0, 1]>) (was: a tokenizer failure, AttributeError)",
        ("'id2label'", "[0, 1]", "JSON object"),
        id2label=[0, 1],
    ),
    _config_case(
        "encoder-config-unknown-activation",
        "train(..., encoder=<folder whose config.json has hidden_act 'nope'>) (was: 'the model does not load "
        "(KeyError: 'nope')')",
        ("'hidden_act'", "'nope'", "activation"),
        hidden_act="nope",
    ),
    _config_case(
        "encoder-config-nan-epsilon",
        "train(..., encoder=<folder whose config.json has layer_norm_eps NaN>) (was: trained, every output NaN)",
        ("'layer_norm_eps'", "nan", "NaN makes every output NaN"),
        layer_norm_eps=float("nan"),
    ),
    _config_case(
        "encoder-config-heads-do-not-divide-hidden",
        "train(..., encoder=<folder whose config.json has 5 attention heads for hidden size 32>) (was: 'save it "
        "again', config.json not named)",
        ("build no model", "not a multiple of the number of attention heads", "correct them"),
        num_attention_heads=5,
    ),
    _config_case(
        "encoder-config-more-layers-than-weights",
        "train(..., encoder=<2-layer weights, config.json num_hidden_layers 3>) (was: trained with a random layer)",
        ("do not fit", "num_hidden_layers=3", "lack encoder.layer.2.", "at random"),
        num_hidden_layers=3,
    ),
    _config_case(
        "encoder-config-fewer-layers-than-weights",
        "train(..., encoder=<2-layer weights, config.json num_hidden_layers 1>) (was: trained without the 2nd layer)",
        ("do not fit", "num_hidden_layers=1", "encoder.layer.1.", "leave those layers out"),
        num_hidden_layers=1,
    ),
    _config_case(
        "encoder-config-sizes-other-than-weights",
        "train(..., encoder=<weights of feed-forward size 64, config.json intermediate_size 128>) (was: 'You set "
        "ignore_mismatched_sizes to False ... look at the above report')",
        ("do not fit", "intermediate.dense", "[64]", "[128]", "correct the sizes"),
        intermediate_size=128,
    ),
    # the other files of an encoder folder (was: each a failure of whatever transformers was loading, file unnamed)
    B(
        "encoder-special-tokens-map-damaged",
        GROUP,
        "train(..., encoder=<folder whose special_tokens_map.json is not JSON>) (was: 'the tokenizer does not load "
        "(JSONDecodeError...)', no file named)",
        af.ConfigError,
        ("special_tokens_map.json", "not a readable JSON file", "tokenizer.save_pretrained"),
        train_on_damaged(_write("special_tokens_map.json", "{not json")),
    ),
    B(
        "encoder-tokenizer-config-a-list",
        GROUP,
        "train(..., encoder=<folder whose tokenizer_config.json is a JSON list>) (was: AttributeError 'get')",
        af.ConfigError,
        ("tokenizer_config.json", "holds a JSON list", "tokenizer.save_pretrained"),
        train_on_damaged(_write("tokenizer_config.json", "[]")),
    ),
    B(
        "encoder-generation-config-damaged",
        GROUP,
        "train(..., encoder=<folder whose generation_config.json is not JSON>) (was: trained, the file unread)",
        af.ConfigError,
        ("generation_config.json", "not a readable JSON file", "model.save_pretrained"),
        train_on_damaged(_write("generation_config.json", "{not json")),
    ),
    B(
        "encoder-weights-truncated",
        GROUP,
        "train(..., encoder=<folder whose model.safetensors is cut off after 64 bytes>) (was: 'the model does not "
        "load (SafetensorError...)', no file named)",
        af.ConfigError,
        ("weight file", "model.safetensors is damaged", "copy it again"),
        train_on_damaged(_truncate("model.safetensors")),
    ),
    B(
        "encoder-pytorch-weights-truncated",
        GROUP,
        "train(..., encoder=<folder whose pytorch_model.bin is cut off>) (was: 'the model does not load (RuntimeError: "
        "PytorchStreamReader failed ...)', no file named)",
        af.ConfigError,
        ("weight file", "pytorch_model.bin is damaged", "no PyTorch checkpoint"),
        train_on_damaged(_truncated_pytorch_weights),
    ),
    B(
        "encoder-tokenizer-json-a-folder",
        GROUP,
        "train(..., encoder=<folder whose tokenizer.json is a folder>) (was: 'no usable tokenizer ... holds the "
        "tokenizer files ['tokenizer.json', ...]')",
        af.ConfigError,
        ("tokenizer.json is not a file", "a folder"),
        train_on_damaged(_folder_for("tokenizer.json")),
    ),
    # a Hub id whose revision holds '/' (a pull request's refs/pr/1; was: 'looks like a local path')
    B(
        "encoder-hub-revision-of-a-pull-request-offline",
        GROUP,
        "train(..., encoder='org/name@refs/pr/1'), offline, not cached (was: 'looks like a local path')",
        HubError,
        ("encoder org/name@refs/pr/1", "not in the local Hugging Face cache", "HF_HUB_OFFLINE"),
        lambda folder: in_hub(
            lambda: af.training.train("rte", "st-a", encoder="org/name@refs/pr/1", output_dir=folder / "runs"), folder
        ),
    ),
    B(
        "encoder-hub-id-partly-cached-offline",
        GROUP,
        "train(..., encoder='org/enc') offline, its cache holding config.json alone (was: 'a config.json but no "
        "weights; save the model there with model.save_pretrained(folder)', in the Hub cache)",
        HubError,
        ("org/enc is only partly in the local Hugging Face cache", "not its weights", "snapshot_download('org/enc')"),
        _partly_cached_encoder,
    ),
    B(
        "encoder-hub-id-with-empty-revision",
        GROUP,
        "train(..., encoder='org/name@'): a Hub id with nothing after '@' (was: 'looks like a local path')",
        af.ConfigError,
        ("'org/name@' is no folder", "no Hub id", "'@revision'", "not empty"),
        lambda folder: lambda: af.training.train("rte", "st-a", encoder="org/name@", output_dir=folder / "runs"),
    ),
    # a saved setup whose folders disagree with its index, or written by a newer version
    B(
        "setup-listed-piece-folder-missing",
        GROUP,
        "AdaptedModel.from_pretrained(base, <setup whose adapters/b was deleted>) (was: 'adapter folder ... is not a "
        "directory, nor a Hub id')",
        af.SerializationError,
        ("lists the adapter 'b'", "holds no folder adapters/b", "copy it again whole"),
        _load_damaged_setup(lambda setup: shutil.rmtree(setup / "adapters" / "b")),
    ),
    B(
        "setup-piece-folder-case-changed",
        GROUP,
        "AdaptedModel.from_pretrained(base, <setup whose adapters/a became adapters/A in a copy>) (was: 'nor a Hub "
        "id')",
        af.SerializationError,
        ("lists the adapter 'a'", "'A' differs from it only in case", "rename it back"),
        _load_damaged_setup(lambda setup: (setup / "adapters" / "a").rename(setup / "adapters" / "A")),
    ),
    B(
        "setup-piece-folder-a-file",
        GROUP,
        "AdaptedModel.from_pretrained(base, <setup whose heads/h is a file>) (was: 'pass the folder that holds it')",
        af.SerializationError,
        ("lists the head 'h'", "heads/h is not a folder", "a file"),
        _load_damaged_setup(lambda setup: (shutil.rmtree(setup / "heads" / "h"), (setup / "heads" / "h").touch())),
    ),
    B(
        "setup-index-newer-format",
        GROUP,
        "AdaptedModel.from_pretrained(base, <setup whose index has format_version 2, saved by adapterfusion 9.0.0>) "
        "(was: no word of a newer version, nor of the fix)",
        af.SerializationError,
        _NEWER,
        _load_damaged_setup(_newer("adapterfusion_setup.json")),
    ),
    B(
        "piece-config-newer-format",
        GROUP,
        "model.load_adapter(<adapter whose config has format_version 2, saved by adapterfusion 9.0.0>)",
        af.SerializationError,
        _NEWER,
        _load_newer_piece,
    ),
    B(
        "save-pretrained-pieces-differing-in-case",
        GROUP,
        "model.save_pretrained(folder) of adapters 'a' and 'A' (was: saved as adapters/a and adapters/A, one folder "
        "on macOS and Windows, where one piece is written over the other)",
        af.ConfigError,
        ("adapters 'a' and 'A' differ only in case", "case-insensitive file system", "two setups"),
        _save_case_twins,
    ),
    B(
        "piece-config-setting-of-a-newer-version",
        GROUP,
        "model.load_adapter(<adapter config with a setting 'new_setting', saved by adapterfusion 9.0.0>) (was: "
        "'unknown key(s)', no word of the newer version)",
        af.ConfigError,
        ("unknown key(s) ['new_setting']", "saved by adapterfusion 9.0.0, newer than this", "upgrade adapterfusion"),
        _load_piece_with_newer_setting,
    ),
    # a piece saved into a part of a saved setup (was: written, leaving a setup its index disagrees with)
    B(
        "save-adapter-over-setup-piece",
        GROUP,
        "model.save_adapter('a', <setup>/adapters/a): over the setup's own adapter of that name (was: replaced, and "
        "from_pretrained then refused the setup)",
        af.ConfigError,
        _IN_SETUP,
        _save_into_setup("adapter", "a", "adapters/a"),
    ),
    B(
        "save-adapter-into-setup-adapters-folder",
        GROUP,
        "model.save_adapter('a', <setup>/adapters/extra): a folder the setup's index does not list",
        af.ConfigError,
        _IN_SETUP,
        _save_into_setup("adapter", "a", "adapters/extra"),
    ),
    B(
        "save-fusion-into-setup-folder",
        GROUP,
        "model.save_fusion('f', <setup>): into the saved setup's own folder",
        af.ConfigError,
        ("is the saved setup", "adapterfusion_setup.json", "outside the setup"),
        _save_into_setup("fusion", "f", ""),
    ),
    B(
        "save-head-into-setup-through-link",
        GROUP,
        "model.save_head('h', <link to setup/heads>/h2): into a setup's heads/ through a symlink",
        af.ConfigError,
        _IN_SETUP,
        _save_through_link,
    ),
)
