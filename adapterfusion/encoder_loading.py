"""Loading an encoder: `Encoder`, a resolved encoder argument (a local folder or a Hub id) and what
from_pretrained takes for it, and the loaders of its tokenizer (`load_tokenizer`, refusing a degenerate one), its
model (`load_encoder_model`) and its language model (`load_language_model`). transformers loads what it can and
only logs the rest: weights of another shape or layers a checkpoint lacks are drawn at random, a head missing from
the checkpoint too; here each is refused by name (`_check_weights_fit`, `unloaded_parts`), and a failure of a local
folder is named by its file where one is the cause. The missing weights it draws come from a fixed seed
(`same_missing_weights`), so each load of one checkpoint is the same model.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import zipfile
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from adapterfusion.encoder_folders import MODEL_CONFIG, TOKENIZER_FILES
from adapterfusion.encoder_limits import cap_tokenizer_length
from adapterfusion.errors import AdapterFusionError, ConfigError, UnsupportedArchitectureError
from adapterfusion.injection.architectures import architecture_for_config
from adapterfusion.io.hub import HubRef, cache_dir, check_token, hub_errors, offline


@dataclass(frozen=True)
class Encoder:
    """A resolved encoder argument: `folder`, the local folder it names (absolute), or `hub`, the Hub id it is;
    `given` is the argument as the caller wrote it. `pretrained()` is what from_pretrained takes for either."""

    given: str
    folder: Path | None = None
    hub: HubRef | None = None

    def pretrained(self) -> tuple[str, dict[str, Any]]:
        """(name_or_path, keyword arguments) for a from_pretrained call: a revision or subfolder of a Hub id goes in
        the keywords, since transformers does not parse 'org/name@revision', and so does the cache that resolving
        it checked (cache_dir(): transformers reads HF_HUB_CACHE once, at import, so an id found cached in the
        cache set since failed to load offline, 'couldn't connect to huggingface.co'), and offline mode as it is now
        (read at import too: HF_HUB_OFFLINE set since went to the network)."""
        if self.hub is None:
            return str(self.folder), {}
        if not offline():
            check_token()  # transformers' requests failed on it as a raw UnicodeEncodeError
        where = {"cache_dir": cache_dir(), **({"local_files_only": True} if offline() else {})}
        return self.hub.repo_id, {"subfolder": self.hub.subfolder, "revision": self.hub.revision, **where}

    def __str__(self) -> str:
        return str(self.folder) if self.folder is not None else str(self.hub)


_PLAIN_WORDS = "the quick brown fox jumps over the lazy dog"  # any working tokenizer of a text encoder knows some


def load_tokenizer(encoder: Encoder) -> Any:
    """The encoder's tokenizer, refused when it does not load or is degenerate: transformers builds a tokenizer of a
    few special tokens from a folder without tokenizer files, which maps every word to [UNK] and trains on nothing;
    or when it cannot pad a batch. It makes no token_type_ids for a model that takes none (a decoder or DistilBERT
    saved with a BERT tokenizer), whose forward would refuse them at a run's first step."""
    from transformers import AutoConfig, AutoTokenizer

    name, kwargs = encoder.pretrained()
    fix = (
        f"save the tokenizer the encoder was trained with into that folder: "
        f"AutoTokenizer.from_pretrained(<its original>).save_pretrained({str(encoder.folder or name)!r})"
    )
    with _loading(encoder, "config", _SAVE_AGAIN):  # its own failure, not the tokenizer's (it reads the config too)
        config = AutoConfig.from_pretrained(name, **kwargs)
    with _loading(encoder, "tokenizer", fix):
        tokenizer = AutoTokenizer.from_pretrained(name, **kwargs)
    vocab_size = getattr(config, "vocab_size", None)
    cap_tokenizer_length(tokenizer, config)
    if "token_type_ids" in tokenizer.model_input_names and not _takes_token_type_ids(config):
        tokenizer.model_input_names = [n for n in tokenizer.model_input_names if n != "token_type_ids"]
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token  # decoders ship without one; padding is masked out anyway
    ids = tokenizer(_PLAIN_WORDS, add_special_tokens=False)["input_ids"]
    unknown = tokenizer.unk_token_id is not None and bool(ids) and all(i == tokenizer.unk_token_id for i in ids)
    if unknown or not ids or (isinstance(vocab_size, int) and len(tokenizer) * 10 < vocab_size):
        files = (
            [p.name for p in sorted(encoder.folder.iterdir()) if p.name in TOKENIZER_FILES]
            if encoder.folder is not None
            else []
        )
        held = f"the tokenizer files {files}" if files else f"none of the tokenizer files {list(TOKENIZER_FILES)}"
        raise ConfigError(
            f"encoder {encoder} has no usable tokenizer: it holds {held}, and the tokenizer transformers builds "
            f"from it has {len(tokenizer)} tokens (the model has {vocab_size}) and maps every word of "
            f"{_PLAIN_WORDS!r} to {tokenizer.unk_token!r}; {fix}"
        )
    if tokenizer.pad_token is None:  # refused here, not by the first batch of a run, after the data has loaded
        where = str(encoder.folder or name)
        raise ConfigError(
            f"encoder {encoder} has a tokenizer ({type(tokenizer).__name__}) with neither a pad token nor an eos "
            "token to pad with, so no batch of texts of different lengths can be made; give it one (padding is "
            f"masked out, so any token does) and save it: tok = AutoTokenizer.from_pretrained({where!r}); "
            f"tok.pad_token = tok.unk_token; tok.save_pretrained({where!r})"
        )
    return tokenizer


def _takes_token_type_ids(config: Any) -> bool:
    """Whether the model of `config` (its transformers base class) takes token_type_ids; True where unknown."""
    from transformers import MODEL_MAPPING

    try:
        found: Any = MODEL_MAPPING[type(config)]
    except (KeyError, ValueError):  # a model type AutoModel does not map: left as the tokenizer says
        return True
    model_class = found[0] if isinstance(found, tuple) else found  # a few types map to several classes
    return model_class is None or "token_type_ids" in inspect.signature(model_class.forward).parameters


def load_encoder_model(encoder: Encoder, model_class: str | None = None) -> nn.Module:
    """The encoder's AutoModel, from its folder or Hub id (with its revision and subfolder); `model_class`, a
    transformers class name such as 'LlamaForCausalLM', loads that class instead (an unknown name: AutoModel)."""
    return load_encoder_model_and_missing(encoder, model_class)[0]


def load_encoder_model_and_missing(
    encoder: Encoder, model_class: str | None = None
) -> tuple[nn.Module, frozenset[str]]:
    """load_encoder_model, with the names of the weights its checkpoint lacked, which transformers drew at random
    and only logged (for `unloaded_parts`)."""
    import transformers

    loader: Any = getattr(transformers, model_class, None) if model_class else None
    if not (isinstance(loader, type) and hasattr(loader, "from_pretrained")):
        loader = transformers.AutoModel
    return _from_pretrained(loader, encoder, "model")


def load_language_model(encoder: Encoder) -> nn.Module:
    """The encoder with its language-model head: AutoModelForSeq2SeqLM for an encoder-decoder (T5, BART), else
    AutoModelForCausalLM; what a generation task trains, with the model's own loss and no head of ours. A decoder
    whose checkpoint lacks its head's weights (a folder saved from the bare model or a classifier, with embeddings
    the head is not tied to) is refused: transformers draws the head at random, says so only in its load report,
    and every generation run would train and score under that random head."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM

    name, kwargs = encoder.pretrained()
    with _loading(encoder, "language model", _SAVE_AGAIN):
        seq2seq = bool(getattr(AutoConfig.from_pretrained(name, **kwargs), "is_encoder_decoder", False))
    model, missing = _from_pretrained(
        AutoModelForSeq2SeqLM if seq2seq else AutoModelForCausalLM, encoder, "language model"
    )
    lost = [key for keys in unloaded_parts(model, missing).values() for key in keys] if _causal(model) else []
    if lost:
        raise ConfigError(
            f"encoder {encoder} holds no weights for its language-model head ({', '.join(lost)} missing: it was saved "
            "from the bare model or a classifier, and its embeddings are not tied to the head), so "
            "the head would be drawn at random and a generation task would train and score under it; save the model "
            "with its head (AutoModelForCausalLM.from_pretrained(...).save_pretrained(folder)), or use a task with a "
            "head of ours"
        )
    return model


_SAVE_AGAIN = "save it again with model.save_pretrained(folder)"


def _from_pretrained(loader: Any, encoder: Encoder, what: str) -> tuple[nn.Module, frozenset[str]]:
    """`loader.from_pretrained` of the encoder, and the names of the weights its checkpoint lacked. Refused where
    config.json and the weights disagree (see _check_weights_fit); a failure of a local folder is named by its file
    where one is the cause (_named_cause)."""
    name, kwargs = encoder.pretrained()
    try:
        with _loading(encoder, what, _SAVE_AGAIN), same_missing_weights():
            model, info = cast(
                tuple[Any, dict[str, Any]],
                loader.from_pretrained(name, output_loading_info=True, ignore_mismatched_sizes=True, **kwargs),
            )
    except ConfigError as error:
        cause = _named_cause(encoder.folder) if encoder.folder is not None else None
        if cause is None:
            raise
        raise ConfigError(f"the {what} of encoder {encoder} does not load: {cause}") from error
    _check_weights_fit(cast(nn.Module, model), info, encoder)
    return cast(nn.Module, model), frozenset(info.get("missing_keys", ()))


def _check_weights_fit(model: nn.Module, info: Mapping[str, Any], encoder: Encoder) -> None:
    """ConfigError where the weights do not fit the model config.json describes: a weight of another shape (loaded
    with ignore_mismatched_sizes, transformers draws it at random), or layers the weights lack or hold beyond the
    config's count: transformers draws the first at random and drops the second, with only a log line for either, so
    a config.json saying num_hidden_layers=3 of a 2-layer checkpoint trained a model with a random layer."""
    config_file = f"{encoder.folder / MODEL_CONFIG}" if encoder.folder is not None else f"{encoder}'s {MODEL_CONFIG}"
    mismatched = sorted(info.get("mismatched_keys") or (), key=str)
    if mismatched:
        key, saved, built = (tuple(mismatched[0]) + (None, None))[:3]
        raise ConfigError(
            f"the weights of encoder {encoder} do not fit the model its {config_file} describes: {key} has the shape "
            f"{list(saved or ())} in the weight files and {list(built or ())} in that model"
            + (f" ({len(mismatched) - 1} more weights differ)" if len(mismatched) > 1 else "")
            + "; correct the sizes in config.json (vocab_size, hidden_size, ...) to the weights', or save the model "
            "again with model.save_pretrained(folder)"
        )
    try:
        spec = architecture_for_config(getattr(model, "config", None))
    except UnsupportedArchitectureError:  # wrap() refuses it, naming why
        return
    stacks = [spec.layers, *([spec.decoder.layers] if spec.decoder is not None else [])]
    layer, main = (re.compile(rf"(?:^|\.)({'|'.join(map(re.escape, paths))})\.\d+\.") for paths in (stacks, stacks[:1]))
    parameters = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    # an encoder-decoder's lacking decoder (an encoder-only checkpoint) is the setup's to name (_check_base_parts)
    lacking = sorted(k for k in info.get("missing_keys") or () if k in parameters and main.search(k))
    extra = sorted(k for k in info.get("unexpected_keys") or () if layer.search(k))
    if not (lacking or extra):
        return
    count = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    held = "lack" if lacking else "hold more than that:"
    shown = ", ".join((lacking or extra)[:3]) + (
        f" and {len(lacking or extra) - 3} more" if len(lacking or extra) > 3 else ""
    )
    raise ConfigError(
        f"the weights of encoder {encoder} do not fit the model its {config_file} describes (num_hidden_layers="
        f"{count}): they {held} {shown}; transformers would "
        f"{'draw those layer weights at random' if lacking else 'leave those layers out'}. Correct the layer count "
        "in config.json to the weights', or save the model again with model.save_pretrained(folder)"
    )


def _named_cause(folder: Path) -> str | None:
    """Why a local model folder does not load, named by its file, where its failure is one of these: a weight file
    that is no safetensors file, or a config.json whose values build no model (a hidden size that is no multiple of
    the heads). None where neither is the cause."""
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModel

    again = "copy it again from where it came from, or save the model there again with model.save_pretrained(folder)"
    for path in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt"):
                pass
        except Exception as error:  # noqa: BLE001 - safetensors raises its own error type and OSErrors
            reason = f"{type(error).__name__}: {error}"
            return f"its weight file {path} is damaged or is no safetensors file ({reason}); {again}"
    for path in sorted(folder.glob("pytorch_model*.bin")):
        if not zipfile.is_zipfile(path):  # what torch.save has written since PyTorch 1.6; cut off, it is none
            return (
                f"its weight file {path} is damaged or is no PyTorch checkpoint (no zip, as torch.save writes); {again}"
            )
    try:
        config = AutoConfig.from_pretrained(folder, local_files_only=True)
        with torch.device("meta"):
            AutoModel.from_config(config)
    except Exception as error:  # noqa: BLE001 - a model's constructor raises what its own checks raise
        reason = (str(error).strip().splitlines() or [""])[0]
        return (
            f"the values of its {folder / MODEL_CONFIG} build no model ({type(error).__name__}: {reason}); correct "
            "them in the file, or save the model again with model.save_pretrained(folder)"
        )
    return None


def _causal(model: nn.Module) -> bool:
    """Whether `model` is a decoder; an encoder's LM head is refused by the generation check, an unsupported
    architecture by wrap()."""
    try:
        return architecture_for_config(model.config).causal
    except UnsupportedArchitectureError:
        return False


def unloaded_parts(model: nn.Module, missing: Collection[str], parts: Iterable[nn.Module] = ()) -> dict[str, list[str]]:
    """The parts of `model` whose own weights its checkpoint lacked (`missing`: transformers' loading info), each by
    its module path with the missing weight names; transformers fills them at random and only logs it. The parts
    looked at are the top-level one holding the pretrained language-model head (lm_head, BERT's `cls`), and
    `parts` (an encoder-decoder's decoder). A task head (score, classifier) is drawn anew for the task from any
    checkpoint, so it is none of them. A weight tied to one outside its part (GPT-2's or SmolLM2's head tied to the
    input embeddings, T5's decoder embeddings to `shared`) is loaded there, so it never counts as lacking."""
    base = getattr(model, "base_model", model)
    get_output = getattr(model, "get_output_embeddings", None)
    head = get_output() if callable(get_output) else None
    looked_at = [
        module
        for module in model.children()
        if head is not None and module is not base and any(inner is head for inner in module.modules())
    ]
    paths = {id(module): path for path, module in model.named_modules(remove_duplicate=False)}
    named = list(model.named_parameters(remove_duplicate=False))
    lacking: dict[str, list[str]] = {}
    for module in [*looked_at, *parts]:
        prefix = f"{paths[id(module)]}."
        outside = {id(parameter) for name, parameter in named if not name.startswith(prefix)}
        own: dict[int, list[str]] = {}
        for name, parameter in named:
            if name.startswith(prefix) and id(parameter) not in outside:
                own.setdefault(id(parameter), []).append(name)
        lost = sorted(name for names in own.values() if all(name in missing for name in names) for name in names)
        if lost:
            lacking[paths[id(module)]] = lost
    return lacking


@contextlib.contextmanager
def same_missing_weights() -> Iterator[None]:
    """Weights a checkpoint lacks (roberta-base has no pooler) drawn the same on every load, from a fixed seed, and
    the caller's random streams left as they were: transformers draws them from the global generator, so each load
    of the same checkpoint was another model to the digests that tell encoders apart (a run's evaluation, the store,
    a saved setup refused or warned of other weights), and the draw shifted the training's random stream."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        yield


@contextlib.contextmanager
def _loading(encoder: Encoder, what: str, fix: str) -> Iterator[None]:
    """Errors of a from_pretrained call: a Hub id's download errors become HubErrors (io/hub.py), anything else a
    ConfigError naming the encoder and the fix."""
    try:
        with hub_errors(encoder.hub, f"loading the encoder's {what} from") if encoder.hub else contextlib.nullcontext():
            yield
    except AdapterFusionError:
        raise
    except Exception as error:  # noqa: BLE001 - transformers raises many kinds for a folder it cannot read
        reason = (str(error).strip().splitlines() or [""])[0]
        raise ConfigError(
            f"the {what} of encoder {encoder} does not load ({type(error).__name__}: {reason}); {fix}"
        ) from None
