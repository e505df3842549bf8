"""Bad-input cases at one boundary, composition blocks (blocks.py): blocks made wrong, blocks naming what is not
loaded or nesting what is not supported, and calls a block cannot run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers

import adapterfusion as af
from catalogue import Action, BadInput
from tiny_decoders import tiny_decoder, tiny_decoder_inputs
from tiny_models import tiny_encoder, tiny_inputs

B = BadInput
GROUP = "composition blocks"


def _model() -> af.AdaptedModel:
    """A tiny encoder with adapters a (Pfeiffer), b (Pfeiffer, another size) and a fusion f over both."""
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=8))
    model.add_adapter("b", af.AdapterConfig.pfeiffer(reduction_factor=16))
    model.add_fusion("f", ["a", "b"])
    return model


def _made(make: Callable[[], Any]) -> Callable[[Path], Action]:
    """Making the block is the bad input."""
    return lambda folder: make


def _activated(make: Callable[[], Any]) -> Callable[[Path], Action]:
    """model.activate(block) on _model()."""

    def prepare(folder: Path) -> Action:
        model = _model()
        return lambda: model.activate(make())

    return prepare


def _called(make: Callable[[], Any], **call: Any) -> Callable[[Path], Action]:
    """model(**batch of 3, **call) with the block `make()` activated (None: nothing activated)."""

    def prepare(folder: Path) -> Action:
        model = _model()
        block = make()
        if block is not None:
            model.activate(block)
        return lambda: model(**tiny_inputs(batch=3), **call)

    return prepare


def _averaged(adapters: Any, **options: Any) -> Callable[[Path], Action]:
    def prepare(folder: Path) -> Action:
        model = _model()
        return lambda: model.average_adapters("avg", adapters, **options)

    return prepare


def _mixed_placements(make: Callable[[af.AdaptedModel], Any]) -> Callable[[Path], Action]:
    """make(model) on _model() plus adapters p (Pfeiffer, residual_before_ln=False), h (Houlsby) and n (Pfeiffer with
    its own LayerNorm copies, train_layer_norm=True)."""

    def prepare(folder: Path) -> Action:
        model = _model()
        model.add_adapter("p", af.AdapterConfig.pfeiffer(reduction_factor=8, residual_before_ln=False))
        model.add_adapter("h", af.AdapterConfig.houlsby(reduction_factor=8))
        model.add_adapter("n", af.AdapterConfig.pfeiffer(reduction_factor=8, train_layer_norm=True))
        return lambda: make(model)

    return prepare


def _with_block(block: Any, make: Callable[[af.AdaptedModel], Any]) -> Callable[[Path], Action]:
    """make(model) on _model() with `block` active."""

    def prepare(folder: Path) -> Action:
        model = _model()
        model.activate(block)
        return lambda: make(model)

    return prepare


def _run_routes(model: af.AdaptedModel, routes: list[str], batch: int) -> Any:
    """model(**batch of `batch`) inside activated(fusion='f', parallel_routes=routes)."""
    with model.activated(fusion="f", parallel_routes=routes):
        return model(**tiny_inputs(batch=batch))


def _routed_with_gradients(model: af.AdaptedModel) -> Any:
    """A routed call inside inference_cache() with gradients turned back on, twice (the second reused the first's
    autograd graph through the kept adapter stacks)."""
    with model.inference_cache(), torch.enable_grad():
        for _ in range(2):
            model(
                **tiny_inputs(batch=3), adapter_names=["a", af.Stack("a", "f"), None]
            ).last_hidden_state.sum().backward()


def _piped(task: str, *args: Any, tokenizer: Any = None, **call: Any) -> Callable[[Path], Action]:
    """af.pipeline(task, model, tokenizer, adapter='a', head='nli')(*args, **call) on a tiny encoder over the shipped
    tokenizer (`tokenizer`: another one given instead) with adapter a and an NLI head 'nli'."""

    def prepare(folder: Path) -> Action:
        shipped = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
        model = af.wrap(tiny_encoder("bert", vocab_size=len(shipped), max_position_embeddings=128))
        model.add_adapter("a")
        model.add_head("nli", af.ClassificationHead(num_labels=3, labels=["entailment", "neutral", "contradiction"]))
        given = tokenizer if tokenizer is not None else shipped
        return lambda: af.pipeline(task, model, given, adapter="a", head="nli")(*args, **call)

    return prepare


def _parallel_call(edit: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[Path], Action]:
    """model(**edit(batch of 3)) on _model() with af.Parallel('a', 'f') active."""

    def prepare(folder: Path) -> Action:
        model = _model()
        model.activate(af.Parallel("a", "f"))
        return lambda: model(**edit(tiny_inputs(batch=3)))

    return prepare


def _parallel_cached_step(folder: Path) -> Action:
    """A tiny Llama under af.Parallel('a', 'b'): a cached step of 2 examples on the cache the block made."""
    model = af.wrap(tiny_decoder("llama"))
    model.add_adapter("a")
    model.add_adapter("b")
    model.activate(af.Parallel("a", "b"))
    with torch.no_grad():
        cache = model(**tiny_decoder_inputs("llama", batch=2), use_cache=True).past_key_values
    step = {"input_ids": torch.full((2, 1), 9), "attention_mask": torch.ones(2, 8, dtype=torch.long)}
    return lambda: model(**step, past_key_values=cache)


def _labels_elsewhere(folder: Path) -> Action:
    """On _model() with heads h (2 labels) and h3 (3): a call routed to both, its labels on the meta device."""
    model = _model()
    model.add_head("h", af.ClassificationHead(num_labels=2))
    model.add_head("h3", af.ClassificationHead(num_labels=3))
    labels = torch.tensor([0, 1, 1], device="meta")
    return lambda: model(**tiny_inputs(batch=3), head_names=["h", "h3", "h"], labels=labels)


CASES: tuple[BadInput, ...] = (
    B(
        "block-empty",
        GROUP,
        "af.Stack() (no children)",
        af.ConfigError,
        ("Stack()", "no children"),
        _made(lambda: af.Stack()),
    ),
    B(
        "block-child-type",
        GROUP,
        "af.Stack('a', 3)",
        af.ConfigError,
        ("child 1", "type int", "af.Stack"),
        _made(lambda: af.Stack("a", 3)),
    ),
    B(
        "block-average-weights",
        GROUP,
        "af.Average('a', 'b', weights=[1.0]) (one weight for two adapters)",
        af.ConfigError,
        ("weights=[1.0]", "2 adapters", "one finite number per adapter"),
        _made(lambda: af.Average("a", "b", weights=[1.0])),
    ),
    B(
        "block-batch-sizes-count",
        GROUP,
        "af.BatchSplit('a', 'b', batch_sizes=[3]) (one size for two children)",
        af.ConfigError,
        ("2 children", "batch_sizes=[3]", "one row count per child"),
        _made(lambda: af.BatchSplit("a", "b", batch_sizes=[3])),
    ),
    B(
        "block-nesting",
        GROUP,
        "af.Stack('a', af.Parallel('a', 'b')) (Parallel lays out the whole batch)",
        af.ConfigError,
        ("Stack cannot hold Parallel", "outermost"),
        _made(lambda: af.Stack("a", af.Parallel("a", "b"))),
    ),
    B(
        "block-fuse-of-stacks",
        GROUP,
        "af.Fuse(af.Stack('base', 'a'), af.Stack('base', 'b')) (AdapterHub issue #574's spelling)",
        af.ConfigError,
        ("Fuse cannot hold Stack", "Stack('base', Fuse('a', 'b'))"),
        _made(lambda: af.Fuse(af.Stack("base", "a"), af.Stack("base", "b"))),
    ),
    B(
        "block-average-of-stack",
        GROUP,
        "af.Average('a', af.Stack('b')) (was told that BatchSplit and Parallel are only the outermost block)",
        af.ConfigError,
        ("Average cannot hold Stack", "an Average mixes adapters' outputs", "list the adapters themselves"),
        _made(lambda: af.Average("a", af.Stack("b"))),
    ),
    B(
        "block-unknown-adapter",
        GROUP,
        "model.activate(af.Stack('a', 'nope'))",
        af.NameNotFoundError,
        ("'nope'", "neither a loaded adapter", "['a', 'b']"),
        _activated(lambda: af.Stack("a", "nope")),
    ),
    B(
        "block-fusion-in-average",
        GROUP,
        "model.activate(af.Average('a', 'f')) (f is a fusion)",
        af.ConfigError,
        ("Average takes adapters only", "'f'", "a fusion"),
        _activated(lambda: af.Average("a", "f")),
    ),
    B(
        "block-fuse-unknown",
        GROUP,
        "model.activate(af.Stack('a', af.Fuse('b', 'a'))) (no fusion over b, a in that order)",
        af.NameNotFoundError,
        ("no loaded fusion", "'f': ['a', 'b']", "add_fusion"),
        _activated(lambda: af.Stack("a", af.Fuse("b", "a"))),
    ),
    B(
        "block-batch-split-sum",
        GROUP,
        "BatchSplit(batch_sizes=[1, 1]) active, a batch of 3",
        af.ConfigError,
        ("covers 2 rows", "3 examples"),
        _called(lambda: af.BatchSplit("a", "b", batch_sizes=[1, 1])),
    ),
    B(
        "block-layout-per-example",
        GROUP,
        "model(**batch, adapter_names=['a', af.Parallel('a', 'b'), 'b'])",
        af.ConfigError,
        ("Parallel", "cannot be one example's choice", "model.activate(af.Parallel(...))"),
        _called(lambda: None, adapter_names=["a", af.Parallel("a", "b"), "b"]),
    ),
    B(
        "block-average-adapters-configs",
        GROUP,
        "model.average_adapters('avg', ['a', 'b']) (bottleneck 4 and 2)",
        af.ConfigError,
        ("adapter 'b' has reduction_factor=", "but 'a' has reduction_factor=", "of one config"),
        _averaged(["a", "b"]),
    ),
    B(
        "block-average-weights-cancel",
        GROUP,
        "af.Average('a', 'b', weights=[1, -0.999999999]) (scaled to sum to 1: about ±1e9)",
        af.ConfigError,
        ("nearly cancel", "normalize_weights=False"),
        _made(lambda: af.Average("a", "b", weights=[1, -0.999999999])),
    ),
    B(
        "block-average-weights-huge-unnormalised",
        GROUP,
        "af.Average('a', 'b', weights=[1e308, 1e308], normalize_weights=False)",
        af.ConfigError,
        ("1e+308", "within"),
        _made(lambda: af.Average("a", "b", weights=[1e308, 1e308], normalize_weights=False)),
    ),
    B(
        "block-average-normalize-str",
        GROUP,
        "af.Average('a', 'b', weights=[1, 3], normalize_weights='no')",
        af.ConfigError,
        ("normalize_weights='no'", "str"),
        _made(lambda: af.Average("a", "b", weights=[1, 3], normalize_weights="no")),
    ),
    B(
        "block-average-adapters-normalize-none",
        GROUP,
        "model.average_adapters('avg', ['a', 'b'], normalize_weights=None)",
        af.ConfigError,
        ("normalize_weights=None", "NoneType"),
        _averaged(["a", "b"], normalize_weights=None),
    ),
    B(
        "block-average-mixed-residual",
        GROUP,
        "model.activate(af.Average('a', 'p')) (p: residual_before_ln=False)",
        af.ConfigError,
        ("'p'", "residual_before_ln=False", "'a'"),
        _mixed_placements(lambda model: model.activate(af.Average("a", "p"))),
    ),
    B(
        "block-average-mixed-positions",
        GROUP,
        "model(**batch, adapter_names=[af.Average('h', 'a'), 'a', None]) (Houlsby with Pfeiffer)",
        af.ConfigError,
        ("'a'", "positions=('output',)", "'h'"),
        _mixed_placements(lambda model: model(**tiny_inputs(batch=3), adapter_names=[af.Average("h", "a"), "a", None])),
    ),
    B(
        "block-scalearn-scale-init-huge",
        GROUP,
        "model.add_fusion('s', ['a', 'b'], af.FusionConfig.scalearn(scale_init=1e308))",
        af.ConfigError,
        ("scale_init=1e+308", "between"),
        _with_block(None, lambda model: model.add_fusion("s", ["a", "b"], af.FusionConfig.scalearn(scale_init=1e308))),
    ),
    B(
        "block-scalearn-preset-typo",
        GROUP,
        "af.FusionConfig.scalearn(scale_shap='scalar')",
        af.ConfigError,
        ("scale_shap", "scale_shape", "FusionConfig.scalearn"),
        _made(lambda: af.FusionConfig.scalearn(scale_shap="scalar")),
    ),
    B(
        "block-adapter-preset-typo",
        GROUP,
        "af.AdapterConfig.houlsby(8, non_linarity='relu')",
        af.ConfigError,
        ("non_linarity", "non_linearity", "AdapterConfig.houlsby"),
        _made(lambda: af.AdapterConfig.houlsby(8, non_linarity="relu")),
    ),
    B(
        "block-parallel-in-pipeline",
        GROUP,
        "model.for_pipeline(adapter=af.Parallel('a', 'b'))",
        af.ConfigError,
        ("Parallel", "one prediction per input"),
        _with_block(None, lambda model: model.for_pipeline(adapter=af.Parallel("a", "b"))),
    ),
    B(
        "block-batch-split-with-adapter-names",
        GROUP,
        "BatchSplit('a', 'b', batch_sizes=[1, 2]) active, model(**batch, adapter_names=['a', 'a', 'a'])",
        af.ConfigError,
        ("BatchSplit", "drop adapter_names"),
        _called(lambda: af.BatchSplit("a", "b", batch_sizes=[1, 2]), adapter_names=["a", "a", "a"]),
    ),
    B(
        "block-output-fusion-attentions-str",
        GROUP,
        "model(**batch, output_fusion_attentions='no')",
        af.ConfigError,
        ("output_fusion_attentions='no'", "str"),
        _with_block(None, lambda model: model(**tiny_inputs(batch=2), output_fusion_attentions="no")),
    ),
    B(
        "block-average-empty-weights",
        GROUP,
        "af.Average(weights=[]) (was max()'s ValueError)",
        af.ConfigError,
        ("Average()", "no children"),
        _made(lambda: af.Average(weights=[])),
    ),
    B(
        "block-average-adapters-set",
        GROUP,
        "model.average_adapters('avg', {'a', 'b'}, weights=[0.9, 0.1]) (a set: its order follows string hashing)",
        af.ConfigError,
        ("is a set", "order is not fixed", "weights", "pass a list"),
        _averaged({"a", "b"}, weights=[0.9, 0.1]),
    ),
    B(
        "block-parallel-routes-batch",
        GROUP,
        "model.activated(fusion='f', parallel_routes=['a']), a batch of 3 (not repeated once per route)",
        af.ConfigError,
        ("parallel_routes=['a']", "got 3 rows", "not a multiple of 2", "forward_parallel"),
        _with_block(None, lambda model: _run_routes(model, ["a"], batch=3)),
    ),
    B(
        "block-train-adapter-stack",
        GROUP,
        "model.train_adapter(af.Stack('a', 'b')) (said only that it expected a string)",
        af.ConfigError,
        ("train_adapter(Stack(", "trains one piece", "model.train_adapter('b')", "model.activate(af.Stack("),
        _with_block(None, lambda model: model.train_adapter(af.Stack("a", "b"))),
    ),
    B(
        "block-routed-gradients-inside-inference-cache",
        GROUP,
        "model(**batch, adapter_names=['a', af.Stack('a', 'f'), None]) and backward(), twice, inside "
        "inference_cache() under torch.enable_grad() (was torch's 'backward through the graph a second time')",
        af.ConfigError,
        ("gradients enabled inside inference_cache()", "torch.no_grad()", "outside the block"),
        _with_block(None, _routed_with_gradients),
    ),
    B(
        "block-pipeline-top-k-zero",
        GROUP,
        "af.pipeline('text-classification', model, tokenizer, adapter='a', head='nli')(text, top_k=0) (was an empty "
        "answer; top_k=-1 dropped the last label)",
        af.ConfigError,
        ("top_k=0", "a whole number >= 1", "top_k=None for every label"),
        _piped("text-classification", "A man plays.", top_k=0),
    ),
    B(
        "block-pipeline-tuple-of-texts",
        GROUP,
        "af.pipeline('text-classification', ...)(('A man plays.', 'Nobody is here')) (was one answer, the first "
        "text's)",
        af.ConfigError,
        ("a tuple of 2", "reads as one input", "pass a list of texts", "'text_pair'"),
        _piped("text-classification", ("A man plays.", "Nobody is here")),
    ),
    B(
        "block-pipeline-pair-of-lists",
        GROUP,
        "af.pipeline('text-classification', ...)({'text': ['a', 'b'], 'text_pair': ['c', 'd']}) (was one answer, "
        "the first pair's)",
        af.ConfigError,
        ("the text pair", "{'text': str, 'text_pair': str}", "a list of such dicts"),
        _piped("text-classification", {"text": ["a", "b"], "text_pair": ["c", "d"]}),
    ),
    B(
        "block-pipeline-zero-shot-no-labels",
        GROUP,
        "af.pipeline('zero-shot-classification', ...)(text) with no candidate_labels (was a TypeError inside "
        "transformers)",
        af.ConfigError,
        ("candidate_labels=None", "a non-empty list of label names"),
        _piped("zero-shot-classification", "A man plays."),
    ),
    B(
        "block-pipeline-tokenizer-type",
        GROUP,
        "af.pipeline('text-classification', model, 3, adapter='a', head='nli') (was built, and failed at a call)",
        af.ConfigError,
        ("tokenizer=3", "type int", "AutoTokenizer.from_pretrained"),
        _piped("text-classification", "A man plays.", tokenizer=3),
    ),
    B(
        "block-parallel-mask-rows",
        GROUP,
        "model(input_ids of 3 rows, attention_mask of 2) under af.Parallel('a', 'f') (named the shapes the block "
        "repeats: 'attention_mask of shape (4, 7) does not match the inputs' (6, 7)')",
        af.ConfigError,
        ("attention_mask of shape (2, 7)", "input_ids has 3 examples", "one row per example (3)"),
        _parallel_call(lambda batch: {**batch, "attention_mask": batch["attention_mask"][:2]}),
    ),
    B(
        "block-parallel-one-dimensional-ids",
        GROUP,
        "model(input_ids=ids[0]) (one sequence, no batch dimension) under af.Parallel('a', 'f') (was 'input_ids of "
        "shape (14,)': its 7 tokens read as 7 examples and repeated per child)",
        af.ConfigError,
        ("input_ids of shape (7,)", "[batch, seq]", "unsqueeze(0)"),
        _parallel_call(lambda batch: {"input_ids": batch["input_ids"][0]}),
    ),
    B(
        "block-parallel-cached-step",
        GROUP,
        "a cached step (past_key_values of 7 tokens) under af.Parallel('a', 'b') on a tiny Llama (the next tokens of "
        "2 examples were repeated to the cache's 4 rows and ran, every child continuing with the same tokens)",
        af.ConfigError,
        ("past_key_values hold 7 tokens", "Parallel block", "adapter_names=[child, ...]"),
        _parallel_cached_step,
    ),
    B(
        "block-head-names-labels-device",
        GROUP,
        "model(**batch, head_names=['h', 'h3', 'h'], labels=<on meta>) (several heads: was torch's 'Tensor.item() "
        "cannot be called on meta tensors'; on CUDA, 'Expected all tensors to be on the same device')",
        af.ConfigError,
        ("labels is on meta", "the model is on cpu", ".to('cpu')"),
        _labels_elsewhere,
    ),
    B(
        "block-average-layer-norm-copies",
        GROUP,
        "model.activate(af.Average('a', 'n')) (n: train_layer_norm=True, its own LayerNorm copies; a uses the "
        "encoder's) (ran with a's LayerNorm for both and n's at the end: weights=[1, 0] was not a)",
        af.ConfigError,
        ("['n'] hold their own LayerNorm copies", "['a'] use the encoder's", "agree on train_layer_norm"),
        _mixed_placements(lambda model: model.activate(af.Average("a", "n"))),
    ),
    B(
        "block-parallel-position-ids-rows",
        GROUP,
        "model(**batch of 3, position_ids of 2 rows) under af.Parallel('a', 'f') (was 'position_ids of shape (2, 7) "
        "does not match the inputs' (6, 7)', a batch the caller never passed; a [seq] position_ids as long as the "
        "batch was repeated as if it were rows)",
        af.ConfigError,
        ("position_ids of shape (2, 7)", "input_ids has 3 examples", "or one row for all"),
        _parallel_call(lambda batch: {**batch, "position_ids": torch.arange(7).expand(2, 7)}),
    ),
    B(
        "block-pipeline-call-adapter-names",
        GROUP,
        "af.pipeline('text-classification', model, tokenizer, adapter='a', head='nli')(text, adapter_names=['b']) "
        "(was handed to the tokenizer, which ignores it: adapter a answered, unsaid)",
        af.ConfigError,
        ("adapter_names=['b']", "does not read it", "model(**batch, adapter_names=[...])"),
        _piped("text-classification", "A man plays.", adapter_names=["b"]),
    ),
)
