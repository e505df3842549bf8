"""Bad-input cases at one boundary, the adapter store and zoo, Hub ids offline, and AdapterHub folders of decoders and
encoder-decoders: a store keyed by no encoder or with a damaged entry, a model that says nothing of its encoder,
AdapterHub files edited by hand or exported from a deeper model."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import adapterfusion as af
from adapterfusion.errors import ConfigError, IncompatibleModelError, RunFileError, SerializationError, ZooError
from adapterfusion.interop import export_adapterhub, is_adapterhub_dir, load_adapterhub
from adapterfusion.training import AdapterStore, TrainingError
from adapterfusion.zoo import load_zoo_adapter
from catalogue import Action, BadInput, edit_json, in_hub
from tiny_decoders import tiny_decoder
from tiny_models import tiny_encoder

B = BadInput
GROUP = "saved pieces"


# ---- helpers -------------------------------------------------------------------------------------------------------
def _lm(model_type: str, fused: bool = False, **config: Any) -> af.AdaptedModel:
    """A tiny `model_type` language model (tiny_decoders.py, `config` overrides) with Pfeiffer adapter a (reduction
    factor 4), and with `fused` adapter b and fusion f of the two."""
    model = af.wrap(tiny_decoder(model_type, **config))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    if fused:
        model.add_adapter("b", af.AdapterConfig.pfeiffer(reduction_factor=4))
        model.add_fusion("f", ["a", "b"])
    return model


def _exported(
    model_type: str, kind: str, config_edit: Callable[[dict], None] | None = None, **config: Any
) -> Callable[[Path], Action]:
    """`kind` of a tiny `model_type` (built with `config`) exported to AdapterHub's format, its config file changed
    by `config_edit`, loaded into a default tiny `model_type` that has the adapters a fusion needs."""
    files = {"adapter": "adapter_config.json", "fusion": "adapter_fusion_config.json", "head": "head_config.json"}

    def prepare(folder: Path) -> Action:
        source = _lm(model_type, fused=True, **config)
        source.add_head("h", af.ClassificationHead(num_labels=2, pooling="last"))
        name = {"adapter": "a", "fusion": "f", "head": "h"}[kind]
        saved = export_adapterhub(source, kind, name, folder / kind)
        if config_edit is not None:
            edit_json(saved / files[kind], config_edit)
        target = _lm(model_type, fused=kind == "fusion")
        if kind == "fusion":
            target.delete_fusion("f")
        return lambda: getattr(target, f"load_{kind}")(saved)

    return prepare


def _replace_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value), encoding="utf-8")


def _fusion_config_a_list(folder: Path) -> Action:
    prepare = _exported("gpt2", "fusion")
    action = prepare(folder)
    config = folder / "fusion" / "adapter_fusion_config.json"
    _replace_json(config, [json.loads(config.read_text(encoding="utf-8"))])
    return action


def _store_with_entry(folder: Path) -> tuple[AdapterStore, af.AdaptedModel]:
    """A store in the case's folder holding adapter and head of task rte for encoder 'org/enc', seed 1."""
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.add_head("h", af.ClassificationHead(num_labels=2))
    store = AdapterStore(folder / "store")
    store.put_model(model, "a", "h", "org/enc", "rte", "st-a", 1)
    return store, model


def _put_model_encoder(encoder: Any) -> Callable[[Path], Action]:
    def prepare(folder: Path) -> Action:
        store, model = _store_with_entry(folder)
        return lambda: store.put_model(model, "a", "h", encoder, "rte", "st-a", 2)

    return prepare


def _zoo_entry_a_list(folder: Path) -> Action:
    store, _ = _store_with_entry(folder)
    _replace_json(store.path("org/enc", "rte", "st-a", 1) / "entry.json", ["org/enc"])
    return lambda: load_zoo_adapter(af.wrap(tiny_encoder("bert")), "mnli", zoo=store.root, encoder="org/enc")


def _zoo_stray_seed_folder(folder: Path) -> Action:
    """A store whose only rte entry was moved by hand to 'seed-old' (the user's backup, not an entry)."""
    store, _ = _store_with_entry(folder)
    entry = store.path("org/enc", "rte", "st-a", 1)
    entry.rename(entry.with_name("seed-old"))
    return lambda: load_zoo_adapter(af.wrap(tiny_encoder("bert")), "rte", zoo=store.root, encoder="org/enc")


def _zoo_model_of_no_path(folder: Path) -> Action:
    store, _ = _store_with_entry(folder)
    return lambda: load_zoo_adapter(af.wrap(tiny_encoder("bert")), "rte", zoo=store.root)


def _put_none(folder: Path) -> Action:
    store, _ = _store_with_entry(folder)
    return lambda: store.put(None)  # type: ignore[arg-type]


def _tilde_of_no_user(folder: Path) -> Action:
    model = af.wrap(tiny_encoder("bert"))
    return in_hub(lambda: model.load_adapter("~no-such-user-af/adapters/a"), folder)


def _adapterhub_hub_id(folder: Path) -> Action:
    model = af.wrap(tiny_encoder("bert"))
    return in_hub(lambda: load_adapterhub(model, "adapter", "org/name"), folder)


def _kind_misspelt(folder: Path) -> Action:
    _exported("gpt2", "fusion")(folder)  # exports it into folder / 'fusion'
    return lambda: is_adapterhub_dir(folder / "fusion", "fusions")


def _set_name(name: Any) -> Callable[[dict], None]:
    return lambda document: document.update(name=name)


def _post_add(document: dict) -> None:
    document["config"].update(residual_before_ln="post_add", original_ln_before=True)


CASES: tuple[BadInput, ...] = (
    B(
        "adapterhub-t5-adapter-of-deeper-decoder",
        GROUP,
        "model.load_adapter(<AdapterHub adapter exported from a T5 with 3 decoder layers>) into a T5 with 2 (a "
        "SerializationError 'not at an adapter site ... expected encoder.block.<i>', naming neither count nor the "
        "decoder)",
        IncompatibleModelError,
        ("is of layer 2 of its decoder", "t5 model's decoder has 2 layers", "at least 3"),
        _exported("t5", "adapter", num_layers=2, num_decoder_layers=3),
    ),
    B(
        "adapterhub-bart-fusion-of-deeper-encoder",
        GROUP,
        "model.load_fusion(<AdapterHub fusion exported from a BART with 3 encoder layers>) into a BART with 2 (said as "
        "weights at no adapter site)",
        IncompatibleModelError,
        ("is of layer 2 of its encoder", "bart model's encoder has 2 layers", "at least 3"),
        _exported("bart", "fusion", encoder_layers=3, decoder_layers=2),
    ),
    B(
        "adapterhub-adapter-name-edited",
        GROUP,
        "model.load_adapter(<AdapterHub GPT-2 adapter whose adapter_config.json 'name' was edited to 'b'>) (said as "
        "weights 'not at an adapter site', though every site matched)",
        SerializationError,
        ("is of adapter 'a'", "names the adapter 'b'", "'name'"),
        _exported("gpt2", "adapter", _set_name("b")),
    ),
    B(
        "adapterhub-head-name-edited",
        GROUP,
        "model.load_head(<AdapterHub Llama head whose head_config.json 'name' was edited to 'x'>) (said as "
        "\"weights that are not head 'x''s\", listing them all)",
        SerializationError,
        ("of head 'h'", "names the head 'x'", "'name'"),
        _exported("llama", "head", _set_name("x")),
    ),
    B(
        "adapterhub-fusion-config-a-json-list",
        GROUP,
        "model.load_fusion(<AdapterHub GPT-2 fusion whose adapter_fusion_config.json is a JSON list>) (said as "
        "'fusion_config.json is missing', a file AdapterHub never writes)",
        SerializationError,
        ("adapter_fusion_config.json holds a JSON list", "not an object"),
        _fusion_config_a_list,
    ),
    B(
        "adapterhub-post-add-on-pre-norm-decoder",
        GROUP,
        "model.load_adapter(<AdapterHub GPT-2 adapter edited to residual_before_ln='post_add'>) (loaded and run, "
        "though adapters fails on it there and export_adapterhub refuses to write it)",
        ConfigError,
        ("residual_before_ln='post_add' cannot be loaded into 'gpt2'", "pre-norm sites"),
        _exported("gpt2", "adapter", _post_add),
    ),
    B(
        "is-adapterhub-dir-kind-misspelt",
        GROUP,
        "is_adapterhub_dir(<exported GPT-2 fusion folder>, 'fusions') (KeyError 'fusions')",
        ConfigError,
        ("kind='fusions'", "'adapter', 'fusion', 'head'"),
        _kind_misspelt,
    ),
    B(
        "load-adapterhub-hub-id",
        GROUP,
        "load_adapterhub(model, 'adapter', 'org/name') offline (a Hub id: 'org/name/adapter_config.json does not "
        "exist')",
        SerializationError,
        ("AdapterHub adapter folder 'org/name' does not exist", "model.load_adapter("),
        _adapterhub_hub_id,
    ),
    B(
        "load-adapter-tilde-of-no-user",
        GROUP,
        "model.load_adapter('~no-such-user-af/adapters/a') (pathlib's RuntimeError 'Could not determine home "
        "directory')",
        SerializationError,
        ("'~no-such-user-af/adapters/a'", "no such folder"),
        _tilde_of_no_user,
    ),
    B(
        "store-put-model-encoder-none",
        GROUP,
        "AdapterStore.put_model(model, 'a', 'h', encoder=None, ...) (stored under a folder named 'None', where no "
        "load of any encoder's adapters looks)",
        ConfigError,
        ("store entry encoder None", "names no encoder", "path or Hub id"),
        _put_model_encoder(None),
    ),
    B(
        "store-put-model-encoder-empty",
        GROUP,
        "AdapterStore.put_model(model, 'a', 'h', encoder='', ...) (stored under a folder named 'encoder')",
        ConfigError,
        ("store entry encoder ''", "names no encoder"),
        _put_model_encoder(""),
    ),
    B(
        "store-put-run-folder-none",
        GROUP,
        "AdapterStore.put(None) (pathlib's TypeError 'expected str, bytes or os.PathLike object')",
        TrainingError,
        ("the run folder None is not a path",),
        _put_none,
    ),
    B(
        "zoo-entry-json-a-list",
        GROUP,
        "load_zoo_adapter(model, 'mnli', zoo=<store whose one entry.json is a JSON list>) (AttributeError "
        "\"'list' object has no attribute 'get'\")",
        RunFileError,
        ("entry.json holds a JSON list", "not an object", "put its adapter into the store again"),
        _zoo_entry_a_list,
    ),
    B(
        "zoo-stray-seed-folder",
        GROUP,
        "load_zoo_adapter(model, 'rte', zoo=<store whose rte entry was renamed by hand to seed-old>) (ValueError "
        "\"invalid literal for int() with base 10: 'old'\")",
        ZooError,
        ("holds no store entries", "seed-<n>/entry.json"),
        _zoo_stray_seed_folder,
    ),
    B(
        "zoo-model-built-from-config",
        GROUP,
        "load_zoo_adapter(<model built from a config, no name_or_path>, 'rte', zoo=<store>) without encoder= (looked "
        "for adapters of an encoder named 'encoder')",
        ZooError,
        ("does not say which encoder", "pass encoder="),
        _zoo_model_of_no_path,
    ),
)
