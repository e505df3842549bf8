"""What an experiment's encoder decides when its file is read: the `encoder` value itself (a folder, a Hub id or
the default decoder by name), the head pooling of every variant spelled out (default: the encoder's own), and the
settings its config refuses (a max_length above its positions, layernorm-only without LayerNorms, pooling: cls on a
decoder, a generation task on an encoder or encoder-decoder or on a decoder saved without its language-model head,
gradient_checkpointing on a model class without it), and what its tokenizer refuses of a generation task (no end
token, a chat template it lacks or cannot apply). Read from the encoder's config and tokenizer, without the network
or the weights, so a bad file is refused before any job runs, not by every job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from adapterfusion.adapters.config import bottleneck_problem
from adapterfusion.defaults import DEFAULT_DECODER, default_decoder_gguf, default_encoder_path
from adapterfusion.encoder_limits import check_max_length, encoder_config
from adapterfusion.encoder_loading import load_tokenizer
from adapterfusion.encoders import check_encoder, default_pooling, resolve_encoder
from adapterfusion.errors import AdapterFusionError, ConfigError, DefaultModelMissingError, UnsupportedArchitectureError
from adapterfusion.experiments.spec_checks import fail
from adapterfusion.experiments.variants import Entry, SetupVariant, setup_option_defaults
from adapterfusion.heads.pooling import resolve_pooling
from adapterfusion.injection.architectures import ArchitectureSpec, architecture_for_config, layer_count
from adapterfusion.tasks.errors import TaskError
from adapterfusion.tasks.instruction import end_token_id, prompt_ids
from adapterfusion.tasks.registry import get_task
from adapterfusion.tasks.spec import EXTRACTIVE_QA, GENERATION, TOKEN_CLASSIFICATION
from adapterfusion.training.errors import TrainingError
from adapterfusion.training.setups import LAYERNORM_ONLY, check_layer_norms


def parse_encoder(value: Any, base_dir: Path) -> str | None:
    """The file's `encoder`: None (the shipped MiniLM), the default decoder by name, a local folder made absolute, or
    a Hub id as it is."""
    if value is None:
        return None
    if value == DEFAULT_DECODER:  # kept by name, so the spec is the same on every machine (runner.py resolves it)
        try:
            default_decoder_gguf()
        except AdapterFusionError as err:
            raise fail("encoder", str(err)) from None
        return value
    if not isinstance(value, str) or not value:
        raise fail(
            "encoder", f"must be an encoder folder or a Hub id (a string), or null for the shipped one; got {value!r}"
        )
    try:  # a mistyped path or a folder with no model or tokenizer is refused here, not per job
        local = check_encoder(value, base_dir)
    except AdapterFusionError as err:  # a Hub id is looked up once, when the experiment runs (runner.py)
        raise fail("encoder", str(err)) from None
    return str(local) if local is not None else value


def _local_or_shipped(encoder: str | None) -> str | None:
    """`encoder`, or for None the shipped MiniLM's folder; None where that is not installed (the checks that read
    the encoder's config then leave it to the jobs)."""
    if encoder is not None:
        return encoder
    try:
        return str(default_encoder_path())
    except DefaultModelMissingError:
        return None


def resolve_poolings(
    variants: Sequence[SetupVariant], entries: Sequence[Entry], encoder: str | None, key: str = "setups"
) -> list[SetupVariant]:
    """Every variant with a `pooling` option gets it spelled out (the entry's, else the encoder's own: mean for the
    shipped MiniLM, see heads/pooling.py), so job hashes and the saved spec say which pooling each run used."""
    encoder = _local_or_shipped(encoder)
    out = []
    for variant, (i, _, _) in zip(variants, entries, strict=True):
        if "pooling" not in variant.options and "pooling" not in setup_option_defaults(variant.setup):
            out.append(variant)
            continue
        try:
            pooling = resolve_pooling(variant.options.get("pooling"), encoder, default_pooling(encoder))
        except ConfigError as err:
            raise fail(f"{key}[{i}].pooling", str(err)) from None
        out.append(dataclasses.replace(variant, options={**variant.options, "pooling": pooling}))
    return out


def check_max_lengths(settings: Iterable[tuple[str, Mapping[str, Any]]], encoder: str | None) -> None:
    """A max_length above the encoder's positions in any of `settings` (its path in the file, its training
    settings), refused here when the encoder's config can be read without the network (else the job refuses it
    before training: training/api.py)."""
    checked = _local_or_shipped(encoder)
    if checked is None:
        return
    for path, overrides in settings:
        if "max_length" in overrides:
            try:
                check_max_length(overrides["max_length"], checked)
            except ConfigError as err:
                raise fail(f"{path}.max_length", str(err)) from None


def check_gradient_checkpointing(settings: Iterable[tuple[str, Mapping[str, Any]]], encoder: str | None) -> None:
    """gradient_checkpointing: true in any of `settings` (its path in the file, its training settings) on an encoder
    whose transformers model class does not support it (MPNet), refused from the encoder's config when the file is
    read: each job that trains through the encoder refused it once the model had loaded
    (training/gradient_checkpointing.py)."""
    checked = _local_or_shipped(encoder)
    config = encoder_config(checked) if checked is not None else None
    if config is None:
        return
    from transformers import MODEL_MAPPING

    try:
        found = MODEL_MAPPING[type(config)]
    except (KeyError, ValueError):  # a model type the base mapping lacks: left to the jobs
        return
    model_class = found[0] if isinstance(found, tuple) else found
    if model_class is None or getattr(model_class, "supports_gradient_checkpointing", True):
        return
    for path, overrides in settings:
        if overrides.get("gradient_checkpointing") is True:  # a swept value: in its variant's settings
            raise fail(
                f"{path}.gradient_checkpointing",
                f"{model_class.__name__} (encoder {checked!r}) does not support gradient checkpointing in this "
                "transformers version; set gradient_checkpointing: false (or leave it out)",
            )


def check_layernorm_only(
    variants: Sequence[SetupVariant], entries: Sequence[Entry], encoder: str | None, key: str
) -> None:
    """layernorm-only on an encoder without torch.nn.LayerNorm (RMSNorm decoders: SmolLM2, Llama, Qwen, ...) is
    refused here, from the encoder's config, not by every job at run time (the jobs still refuse an encoder whose
    config cannot be read without the network). The shipped MiniLM (encoder null) has LayerNorms."""
    first = next(
        (i for variant, (i, _, _) in zip(variants, entries, strict=True) if variant.setup == LAYERNORM_ONLY), None
    )
    if first is None or encoder is None:
        return
    try:
        check_layer_norms(encoder)
    except TrainingError as err:
        raise fail(f"{key}[{first}]", str(err)) from None


def _architecture(encoder: str | None) -> tuple[str, ArchitectureSpec] | None:
    """(model_type, table row) of `encoder` (None: the shipped MiniLM), from its config alone; None when that cannot
    be read without the network or names no supported architecture (the jobs then check it on the loaded model)."""
    checked = _local_or_shipped(encoder)
    if checked is None:
        return None
    config = encoder_config(checked)
    try:
        return str(getattr(config, "model_type", None)), architecture_for_config(config)
    except UnsupportedArchitectureError:
        return None


def check_weights_dtype(encoder: str | None) -> None:
    """An encoder whose config.json says it was saved in float16 loads so, and every job's adapters and heads with it:
    their training is refused by each job (training/hardware.py check_trainable_precision), so the file is refused
    here, from the config alone."""
    checked = _local_or_shipped(encoder)
    config = encoder_config(checked) if checked is not None else None
    saved = getattr(config, "dtype", None)  # transformers 5 reads a file's torch_dtype into it; the old name warns
    if str(saved).removeprefix("torch.") != "float16":
        return
    raise fail(
        "encoder",
        f"encoder {checked!r} was saved in float16 (its config.json's dtype), which it loads in, and so would every "
        "job's adapters and heads: AdamW's steps underflow in float16 and the loss becomes NaN within a few steps. "
        "Save the model in float32 (or bfloat16) and give that folder: "
        "AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).save_pretrained(folder), with its tokenizer",
    )


def _task_kind(task: str) -> str | None:
    try:
        return get_task(task).kind
    except TaskError:  # an unknown task is the tasks check's to refuse
        return None


def check_architecture_fit(
    variants: Sequence[SetupVariant], entries: Sequence[Entry], tasks: Sequence[str], encoder: str | None, key: str
) -> None:
    """What the encoder's architecture refuses, here rather than in every job (injection/inject.py and
    training/api.py refuse the same on the loaded model): a head with pooling 'cls' on a decoder or encoder-decoder
    (its first token has seen no other token), a span task (extractive QA, tagging) on an encoder-decoder (no
    per-token head is built on one), and a generation task on a model that is not a decoder (generation trains a
    decoder's language model on prompt + answer)."""
    found = _architecture(encoder)
    if found is None:
        return
    model_type, architecture = found
    shown = "null (the shipped MiniLM)" if encoder is None else repr(encoder)
    if not architecture.layer_norm_copies:
        for variant, (i, _, _) in zip(variants, entries, strict=True):
            if variant.setup == "st-a-houlsby" and variant.options.get("train_layer_norm") is not False:
                raise fail(
                    f"{key}[{i}]",
                    f"st-a-houlsby trains LayerNorm copies beside its adapters, but encoder {shown} ({model_type}) "
                    "applies its LayerNorms inside its blocks, where no copy can take their place; add "
                    "train_layer_norm: false to the entry (Houlsby adapters without the copies)",
                )
    per_token = (EXTRACTIVE_QA, TOKEN_CLASSIFICATION)  # their heads score every token and pool nothing
    if architecture.pools_last_token:
        for variant, (i, _, _) in zip(variants, entries, strict=True):
            pooled = [t for t in tasks if variant.runs_on(t) and _task_kind(t) not in (*per_token, GENERATION)]
            if variant.options.get("pooling") == "cls" and pooled:
                kind = (
                    "an encoder-decoder ({}), whose decoder"
                    if architecture.decoder is not None
                    else "a decoder ({}), which"
                )
                raise fail(
                    f"{key}[{i}].pooling",
                    f"'cls' reads the first token, but encoder {shown} is {kind.format(model_type)} reads its input "
                    "left to right, so the first token has seen no other; use pooling: last (the last non-padding "
                    "token, as transformers' *ForSequenceClassification models do) or pooling: mean, or leave it out",
                )
    if architecture.decoder is not None:  # build_head refuses their heads on the loaded model, in every job
        spans = [(j, t) for j, t in enumerate(tasks) if _task_kind(t) in per_token and _runs(variants, t)]
        if spans:
            j, task = spans[0]
            raise fail(
                f"tasks[{j}]",
                f"{task!r} is {_SPAN_KINDS[str(_task_kind(task))]} task, whose head scores every token of the input, "
                f"but encoder {shown} is an encoder-decoder ({model_type}), on which adapterfusion has no such "
                "head (classification, regression and multiple-choice heads only); set encoder to an encoder or a "
                "decoder, or leave the task out",
            )
    if architecture.causal:
        _check_language_model_head(variants, tasks, encoder, shown)
        return
    kind = "an encoder-decoder" if architecture.decoder is not None else "an encoder"
    if generation := _generation_tasks(variants, tasks):
        j, task = generation[0]
        raise fail(
            f"tasks[{j}]",
            f"{task!r} is a generation task, which trains a decoder's language model on prompt + answer, but "
            f"encoder {shown} is {kind} ({model_type}); set encoder to a decoder (e.g. default-decoder, or a "
            "Llama/GPT-2 folder), or leave the task out",
        )


_SPAN_KINDS = {EXTRACTIVE_QA: "an extractive question-answering", TOKEN_CLASSIFICATION: "a token-classification"}


def _runs(variants: Sequence[SetupVariant], task: str) -> bool:
    """Whether some variant runs on `task`."""
    return any(variant.runs_on(task) for variant in variants)


def _generation_tasks(variants: Sequence[SetupVariant], tasks: Sequence[str]) -> list[tuple[int, str]]:
    """(index in `tasks`, name) of each generation task some variant runs on: those the checks of a decoder's
    language model and tokenizer concern."""
    return [(j, task) for j, task in enumerate(tasks) if _task_kind(task) == GENERATION and _runs(variants, task)]


def _headless_classes(architectures: Sequence[str]) -> list[str]:
    """The classes in a config's `architectures` that transformers knows as models without a language-model head
    (the bare model, LlamaModel; a classifier, LlamaForSequenceClassification); [] unless every class is one."""
    from transformers.models.auto import modeling_auto as auto

    def names(mapping: Mapping[str, str | tuple[str, ...]]) -> set[str]:
        return {name for value in mapping.values() for name in ((value,) if isinstance(value, str) else value)}

    headless = set().union(
        *(
            names(getattr(auto, mapping, {}))
            for mapping in (
                "MODEL_MAPPING_NAMES",
                "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
                "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
                "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
            )
        )
    ) - names(getattr(auto, "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", {}))
    known = [name for name in architectures if isinstance(name, str)]
    return known if known and all(name in headless for name in known) else []


def _check_language_model_head(
    variants: Sequence[SetupVariant], tasks: Sequence[str], encoder: str | None, shown: str
) -> None:
    """A generation task on a decoder folder saved without its language-model head (from the bare model or a
    classifier, with untied embeddings), refused from its config.json: AutoModelForCausalLM would draw the head at
    random (transformers' load report, on stderr, is all that says so), and every run would train its adapter under
    that head and report its answer_loss as if it were the model's."""
    checked = _local_or_shipped(encoder)
    config = encoder_config(checked) if checked is not None else None
    if config is None or getattr(config, "tie_word_embeddings", True):
        return  # tied: the head is the input embeddings, which every checkpoint of the model holds
    saved = _headless_classes(getattr(config, "architectures", None) or [])
    if not saved:
        return
    if generation := _generation_tasks(variants, tasks):
        j, task = generation[0]
        raise fail(
            f"tasks[{j}]",
            f"{task!r} is a generation task, which trains under the decoder's language-model head, but encoder "
            f"{shown} was saved as {', '.join(saved)}, without that head (and its embeddings are untied, so "
            "none can be made from them): it would be drawn at random, and every run would train and score "
            "under it. Save the model with its head (AutoModelForCausalLM.from_pretrained(...)"
            ".save_pretrained(folder)), or leave the task out",
        )


_SAMPLE_PROMPT = "What is the capital of France?"  # what the chat template is tried on


def check_generation_tokenizer(variants: Sequence[SetupVariant], tasks: Sequence[str], encoder: str | None) -> None:
    """What the tokenizer of a local `encoder` folder refuses of the generation tasks some variant runs on, refused
    from the tokenizer alone when the file is read (the jobs refuse the same as each encodes its data:
    tasks/instruction.py): no eos or sep token to end an answer with, and a task's chat_template: true that the
    tokenizer has no template for, or whose template fails on a prompt as one user turn or leaves the prompt out.
    A Hub id's tokenizer is left to the jobs: it may have to be downloaded first."""
    generation = [(j, get_task(task)) for j, task in _generation_tasks(variants, tasks)]
    checked = _local_or_shipped(encoder) if generation else None
    if checked is None or not Path(checked).is_dir():
        return
    try:
        tokenizer = load_tokenizer(resolve_encoder(checked, reach_hub=False, tokenizer=False))
    except AdapterFusionError:  # parse_encoder has refused a tokenizer that does not load; the jobs say why
        return
    for j, task in generation:
        try:
            end_token_id(tokenizer)
            if task.chat_template:
                prompt_ids(tokenizer, _SAMPLE_PROMPT, chat_template=True)
        except TaskError as err:
            raise fail(f"tasks[{j}]", f"task {task.name!r} on encoder {checked!r}: {err}") from None


def check_top_k(variants: Sequence[SetupVariant], entries: Sequence[Entry], encoder: str | None, key: str) -> None:
    """top-k's k above the encoder's layer count (from its config), refused when the file is read: every top-k job
    would otherwise load the encoder and fail (training/setups.py _top_k refuses it on the loaded model)."""
    tops = [(variant, i) for variant, (i, _, _) in zip(variants, entries, strict=True) if variant.setup == "top-k"]
    checked = _local_or_shipped(encoder) if tops else None
    if checked is None:
        return
    layers = layer_count(encoder_config(checked))
    if layers is None:
        return
    for variant, i in tops:
        k = variant.options.get("k", setup_option_defaults("top-k").get("k"))
        if isinstance(k, int) and not isinstance(k, bool) and k > layers:
            shown = "null (the shipped MiniLM)" if encoder is None else repr(encoder)
            raise fail(
                f"{key}[{i}].k",
                f"top-k trains the top k layers, but encoder {shown} has {layers}; use k: 1 to {layers}",
            )


def check_bottlenecks(
    variants: Sequence[SetupVariant], entries: Sequence[Entry], encoder: str | None, key: str
) -> None:
    """A reduction factor that leaves no bottleneck for the encoder's hidden size (or widens it absurdly), refused
    from the encoder's config when the file is read, not by every job once the model is loaded."""
    checked = _local_or_shipped(encoder)
    if checked is None:
        return
    hidden = getattr(encoder_config(checked), "hidden_size", None)
    if not isinstance(hidden, int):
        return
    for variant, (i, _, entry) in zip(variants, entries, strict=True):
        rf = variant.options.get("reduction_factor")
        if rf is None:
            continue
        problem = bottleneck_problem(rf, hidden)
        if problem is not None:
            field = "reduction_factors" if "reduction_factors" in entry else "reduction_factor"
            raise fail(f"{key}[{i}].{field}", problem)
