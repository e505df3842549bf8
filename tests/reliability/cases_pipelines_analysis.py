"""Bad-input cases at one boundary, pipelines and what reads a trained fusion: af.pipeline's settings and inputs
(tokenizer settings, text-generation settings and chats, arrays and sets as inputs), ScaLearn fusions' subsets,
pruning (select_adapters, compare_pruned: a failed comparison must leave no fusion behind) and the fusion-attention
analysis (FusionActivation records, average_activations, forward_parallel's heads)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers

import adapterfusion as af
from adapterfusion.analysis import FusionActivation, average_activations, load_fusion_activation, mean_fusion_attention
from adapterfusion.fusion.subset import add_fusion_subset
from adapterfusion.pruning import compare_pruned, select_adapters
from adapterfusion.tasks import get_task
from cases_serving import classified, shipped_tokenizer
from catalogue import Action, BadInput, ModelTouched, contents
from tiny_decoders import tiny_decoder
from tiny_models import TINY_CONFIGS, tiny_encoder, tiny_inputs

B = BadInput
PIPELINES, SCALEARN, PRUNING, ANALYSIS = "pipelines", "scalearn", "pruning", "analysis"


def _pipeline(task: str, *args: Any, built: dict[str, Any] | None = None, **call: Any) -> Callable[[Path], Action]:
    """af.pipeline(task, ..., **built)(*args, **call) on a tiny encoder over the shipped tokenizer with adapter a and
    a token-classification head tags (used by a token-classification pipeline only)."""

    def prepare(folder: Path) -> Action:
        tokenizer = shipped_tokenizer()
        model = af.wrap(tiny_encoder(vocab_size=len(tokenizer), max_position_embeddings=128))
        model.add_adapter("a")
        model.add_head("tags", af.TokenClassificationHead(num_labels=3))
        head = "tags" if task == "token-classification" else None
        options = built or {}
        return lambda: af.pipeline(task, model, tokenizer, adapter="a", head=head, **options)(*args, **call)

    return prepare


def _fill(
    *args: Any, built: dict[str, Any] | None = None, direct: bool = False, **call: Any
) -> Callable[[Path], Action]:
    """af.pipeline('fill-mask', ..., **built)(*args, **call) on a tiny BertForMaskedLM over the shipped tokenizer,
    adapter a; `direct`: the pipeline built by transformers.pipeline('fill-mask', model=model.for_pipeline(...))."""

    def prepare(folder: Path) -> Action:
        tokenizer = shipped_tokenizer()
        config = transformers.BertConfig(**{**TINY_CONFIGS["bert"][1], "vocab_size": len(tokenizer)})
        model = af.wrap(transformers.BertForMaskedLM(config)).eval()
        model.add_adapter("a")
        options = built or {}

        def action() -> Any:
            if direct:
                view = model.for_pipeline(adapter="a")
                fill = transformers.pipeline("fill-mask", model=view, tokenizer=tokenizer, **options)
            else:
                fill = af.pipeline("fill-mask", model, tokenizer, adapter="a", **options)
            return fill(*args, **call)

        return action

    return prepare


def _direct_classified(
    *args: Any, view: bool = True, built: dict[str, Any] | None = None, **call: Any
) -> Callable[[Path], Action]:
    """transformers.pipeline('text-classification', model=model.for_pipeline(adapter='a', head='nli'), ...,
    **built)(*args, **call) on a tiny encoder over the shipped tokenizer: built without af.pipeline. view=False: on
    the model itself, with adapter a and head nli active."""

    def prepare(folder: Path) -> Action:
        tokenizer = shipped_tokenizer()
        model = af.wrap(tiny_encoder(vocab_size=len(tokenizer), max_position_embeddings=128))
        model.add_adapter("a")
        model.add_adapter("b")
        model.add_head("nli", af.ClassificationHead(num_labels=3, labels=["entailment", "neutral", "contradiction"]))
        model.activate(adapter="a", head="nli")
        run = model.for_pipeline(adapter="a", head="nli") if view else model
        return lambda: transformers.pipeline("text-classification", model=run, tokenizer=tokenizer, **(built or {}))(
            *args, **call
        )

    return prepare


def _generate(*args: Any, **call: Any) -> Callable[[Path], Action]:
    """af.pipeline('text-generation', ...)(*args, max_new_tokens=2, **call) on a tiny Llama over the shipped
    tokenizer with adapter lm."""

    def prepare(folder: Path) -> Action:
        tokenizer = shipped_tokenizer()
        model = af.wrap(tiny_decoder("llama", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id))
        model.add_adapter("lm")
        return lambda: af.pipeline("text-generation", model, tokenizer, adapter="lm")(*args, max_new_tokens=2, **call)

    return prepare


def _fused(config: af.FusionConfig | None = None) -> af.AdaptedModel:
    """A tiny BERT with adapters a, b, c, a fusion f over them (`config`) and a two-class head h."""
    model = af.wrap(tiny_encoder("bert"))
    for name in "abc":
        model.add_adapter(name, "pfeiffer")
    model.add_fusion("f", ["a", "b", "c"], config=config)
    model.add_head("h", af.ClassificationHead(num_labels=2))
    return model


def _leaves_model(model: af.AdaptedModel, call: Callable[[], Any]) -> Action:
    """`call`, which must leave `model`'s adapters, fusions and heads as they were when it fails."""

    def action() -> Any:
        before = contents(model)
        try:
            return call()
        finally:
            if contents(model) != before:
                raise ModelTouched(f"the failed call changed the model: {before[1]} -> {contents(model)[1]}")

    return action


def _compared(active_head: str | None = "h", labels: bool = True, **options: Any) -> Callable[[Path], Action]:
    """compare_pruned(<_fused()>, 'f', get_task('rte'), [a batch of 2], keep=1, **options), head `active_head`
    active; labels: the batch holds labels."""

    def prepare(folder: Path) -> Action:
        model = _fused()
        model.activate(fusion="f", head=active_head)
        batch = {**tiny_inputs(batch=2), **({"labels": torch.tensor([0, 1])} if labels else {})}
        arguments: dict[str, Any] = {"task": get_task("rte"), "keep": 1, **options}
        return _leaves_model(model, lambda: compare_pruned(model, "f", batches=[batch], **arguments))

    return prepare


def _activation(info: dict[str, Any] | None = None, **fields: Any) -> FusionActivation:
    """A FusionActivation of fusion f over adapters a, b at layers 0, 1 (`fields` replace those)."""
    core: dict[str, Any] = {
        "fusion": "f",
        "adapters": ("a", "b"),
        "layers": (0, 1),
        "values": np.array([[0.5, 0.5], [0.2, 0.8]]),
        "tokens": 3,
    }
    return FusionActivation(**{**core, **fields}, info=info or {})


def _record_version(folder: Path) -> Action:
    path = folder / "fusion_attention.json"
    path.write_text(
        '{"format_version": 2, "fusion": "f", "adapters": ["a"], "layers": [0], "values": [[1]], "tokens": 1}'
    )
    return lambda: load_fusion_activation(path)


def _skipped_everywhere(folder: Path) -> Action:
    model = _fused()
    model.activate(fusion="f", skip_layers=[0, 1])
    return lambda: mean_fusion_attention(model, "f", [tiny_inputs()])


def _parallel(**options: Any) -> Callable[[Path], Action]:
    def prepare(folder: Path) -> Action:
        model = _fused()
        return lambda: model.forward_parallel("f", **options, **tiny_inputs())

    return prepare


CASES: tuple[BadInput, ...] = (
    B(
        "pipeline-truncation-unknown-strategy",
        PIPELINES,
        "af.pipeline('text-classification', ...)('a text', truncation='yes') (a ValueError from inside transformers: "
        "'yes is not a valid TruncationStrategy')",
        af.ConfigError,
        ("truncation='yes'", "'only_first'", "truncation=True"),
        classified("a text", truncation="yes"),
    ),
    B(
        "pipeline-padding-unknown-strategy",
        PIPELINES,
        "af.pipeline('text-classification', ...)('a text', padding='sideways') (a ValueError from inside "
        "transformers: 'sideways is not a valid PaddingStrategy')",
        af.ConfigError,
        ("padding='sideways'", "'longest'", "padding=True"),
        classified("a text", padding="sideways"),
    ),
    B(
        "pipeline-max-length-negative",
        PIPELINES,
        "af.pipeline('text-classification', ...)('a text', truncation=True, max_length=-3) (the tokenizer's "
        "OverflowError 'can't convert negative int to unsigned'; max_length=0 was read as not given, nothing cut)",
        af.ConfigError,
        ("max_length=-3", "whole number >= 1", "max_length=128"),
        classified("a text", truncation=True, max_length=-3),
    ),
    B(
        "pipeline-tokenizer-switch-not-bool",
        PIPELINES,
        "af.pipeline('text-classification', ...)('a text', add_special_tokens='no') (a TypeError from the tokenizer; "
        "return_token_type_ids='no' was taken as true)",
        af.ConfigError,
        ("add_special_tokens='no' (str)", "True or False"),
        classified("a text", add_special_tokens="no"),
    ),
    B(
        "pipeline-feature-extraction-tokenize-kwargs-not-dict",
        PIPELINES,
        "af.pipeline('feature-extraction', ...)('a text', tokenize_kwargs=['truncation']) (a TypeError inside "
        "transformers: 'list' object is not a mapping)",
        af.ConfigError,
        ("tokenize_kwargs=['truncation'] (list)", "give a dict"),
        _pipeline("feature-extraction", "a text", tokenize_kwargs=["truncation"]),
    ),
    B(
        "pipeline-token-classification-stride-negative",
        PIPELINES,
        "af.pipeline('token-classification', ...)('a text', stride=-1) (the tokenizer's OverflowError 'can't convert "
        "negative int to unsigned')",
        af.ConfigError,
        ("stride=-1 (int)", "whole number >= 0"),
        _pipeline("token-classification", "a text", stride=-1),
    ),
    B(
        "pipeline-token-classification-split-words-given-text",
        PIPELINES,
        "af.pipeline('token-classification', ...)('a text', is_split_into_words=True) (a ValueError from inside "
        "transformers: 'sentence must be a list of tokens')",
        af.ConfigError,
        ("is_split_into_words=True takes a text as a list of its words", "the str 'a text'"),
        _pipeline("token-classification", "a text", is_split_into_words=True),
    ),
    B(
        "pipeline-token-classification-stride-without-aggregation",
        PIPELINES,
        "af.pipeline('token-classification', ..., aggregation_strategy='none')('a text', stride=2) (passed "
        "transformers' own check, made at the call only against the call's aggregation_strategy)",
        af.ConfigError,
        ("stride=2 splits a long text", "aggregation_strategy='simple'"),
        _pipeline("token-classification", "a text", stride=2, built={"aggregation_strategy": "none"}),
    ),
    B(
        "pipeline-fill-mask-no-mask-token",
        PIPELINES,
        "af.pipeline('fill-mask', ...)('Paris is the capital of France.') (an AttributeError from inside "
        "transformers: 'PipelineModel' object has no attribute 'base_model_prefix')",
        af.ConfigError,
        ("mask token '[MASK]'", "there is none in", "put [MASK] where the word to predict goes"),
        _fill("Paris is the capital of France."),
    ),
    B(
        "pipeline-fill-mask-top-k-beyond-vocabulary",
        PIPELINES,
        "af.pipeline('fill-mask', ...)('a [MASK]', top_k=10**6) (torch.topk's RuntimeError 'selected index k out of "
        "range')",
        af.ConfigError,
        ("top_k=1000000", "ranks the 30522 tokens", "top_k <= 30522"),
        _fill("a [MASK]", top_k=10**6),
    ),
    B(
        "pipeline-fill-mask-targets-empty",
        PIPELINES,
        "af.pipeline('fill-mask', ...)('a [MASK]', targets=[]) (a ValueError from inside transformers; targets=5 a "
        "TypeError)",
        af.ConfigError,
        ("targets=[]", "a non-empty list of words"),
        _fill("a [MASK]", targets=[]),
    ),
    B(
        "pipeline-fill-mask-target-not-one-token",
        PIPELINES,
        "af.pipeline('fill-mask', ...)('Paris is the [MASK] of France.', targets=['capitalxyz']) (transformers scored "
        "its first sub-token, 'capital', as the word, with only a logged warning)",
        af.ConfigError,
        ("'capitalxyz' is not one token", "['capital', '##xy', '##z']", "tokenizer.tokenize(word)"),
        _fill("Paris is the [MASK] of France.", targets=["capitalxyz"]),
    ),
    B(
        "pipeline-fill-mask-target-makes-no-token",
        PIPELINES,
        "af.pipeline('fill-mask', ..., targets='\\u200b') (a single word the tokenizer makes no token of: "
        "transformers left it out with a logged warning, or failed with a ValueError when no target was left)",
        af.ConfigError,
        ("'\\u200b' is not one token", "makes no token of it", "whole-vocabulary words"),
        _fill("Paris is the [MASK] of France.", built={"targets": "\u200b"}),
    ),
    B(
        "pipeline-built-by-transformers-fill-mask-target-not-one-token",
        PIPELINES,
        "transformers.pipeline('fill-mask', model=model.for_pipeline(adapter='a'), ...)('a [MASK]', "
        "targets='capitalxyz') (scored as 'capital', with only a logged warning)",
        af.ConfigError,
        ("'capitalxyz' is not one token", "would score 'capital' alone"),
        _fill("a [MASK]", direct=True, targets="capitalxyz"),
    ),
    B(
        "pipeline-built-by-transformers-no-mask-token",
        PIPELINES,
        "transformers.pipeline('fill-mask', model=model.for_pipeline(adapter='a'), ...)('no mask') (an "
        "AttributeError from inside transformers: 'PipelineModel' object has no attribute 'base_model_prefix')",
        af.ConfigError,
        ("mask token '[MASK]'", "there is none in 'no mask'"),
        _fill("no mask", direct=True),
    ),
    B(
        "pipeline-built-by-transformers-call-top-k-zero",
        PIPELINES,
        "transformers.pipeline('text-classification', model=model.for_pipeline(...), ...)('a text', top_k=0) (an "
        "empty answer: transformers sliced its sorted scores with it)",
        af.ConfigError,
        ("top_k=0 (int)", "whole number >= 1"),
        _direct_classified("a text", top_k=0),
    ),
    B(
        "pipeline-built-by-transformers-call-adapter",
        PIPELINES,
        "transformers.pipeline('text-classification', model=model.for_pipeline(adapter='a', ...), ...)('a text', "
        "adapter='b') (handed to the tokenizer, which ignored it: adapter a's answer came back)",
        af.ConfigError,
        ("adapter='b' given to a pipeline call", "this one runs adapter='a', head='nli'", "build another"),
        _direct_classified("a text", adapter="b"),
    ),
    B(
        "pipeline-on-the-model-call-adapter",
        PIPELINES,
        "transformers.pipeline('text-classification', model=model, ...)('a text', adapter='b') on the model itself "
        "with adapter a active (handed to the tokenizer, which ignored it: adapter a's answer came back)",
        af.ConfigError,
        ("adapter='b' given to a pipeline call", "runs what is active in it (adapter='a', head='nli')", "activate"),
        _direct_classified("a text", adapter="b", view=False),
    ),
    B(
        "pipeline-on-the-model-call-top-k-zero",
        PIPELINES,
        "transformers.pipeline('text-classification', model=model, ...)('a text', top_k=0) on the model itself (an "
        "empty answer: transformers sliced its sorted scores with it)",
        af.ConfigError,
        ("top_k=0 (int)", "whole number >= 1"),
        _direct_classified("a text", top_k=0, view=False),
    ),
    B(
        "pipeline-built-by-transformers-top-k-zero",
        PIPELINES,
        "transformers.pipeline('text-classification', model=model.for_pipeline(...), ..., top_k=0) (a setting of the "
        "build, handed to transformers unchecked: every call answered nothing)",
        af.ConfigError,
        ("top_k=0 (int)", "whole number >= 1"),
        _direct_classified("a text", built=dict(top_k=0)),
    ),
    B(
        "pipeline-on-the-model-built-with-unread-keyword",
        PIPELINES,
        "transformers.pipeline('text-classification', model=model, ..., adapter_name='b') (no setting of the "
        "pipeline's: handed to the tokenizer at each call, which ignored it)",
        af.ConfigError,
        ("transformers.pipeline: 'adapter_name' (did you mean 'adapter'?)", "model.for_pipeline(adapter=..."),
        _direct_classified("a text", view=False, built=dict(adapter_name="b")),
    ),
    B(
        "pipeline-input-numpy-array",
        PIPELINES,
        "af.pipeline('text-classification', ...)(numpy.array(['a', 'b'])) (texts as a column's .values: a "
        "ValueError from the tokenizer, which transformers handed the whole array as one input)",
        af.ConfigError,
        ("of type ndarray", "a non-empty list of texts"),
        classified(np.array(["a", "b"])),
    ),
    B(
        "pipeline-input-set",
        PIPELINES,
        "af.pipeline('text-classification', ...)({'a', 'b'}) (a ValueError from the tokenizer: a set is one input "
        "to transformers)",
        af.ConfigError,
        ("of type set", "a non-empty list of texts"),
        classified({"a", "b"}),
    ),
    B(
        "pipeline-zero-shot-comma-labels-twice",
        PIPELINES,
        "af.pipeline('zero-shot-classification', ...)('a', candidate_labels='sports, sports') (transformers splits a "
        "str at its commas: the label was scored twice, 0.5 each whatever the text)",
        af.ConfigError,
        ("candidate_labels='sports, sports' names ['sports'] more than once", "name each label once"),
        classified("a", candidate_labels="sports, sports"),
    ),
    B(
        "pipeline-generation-prefix-not-text",
        PIPELINES,
        "af.pipeline('text-generation', ...)('the cat', prefix=5) (a ValueError from the tokenizer)",
        af.ConfigError,
        ("prefix=5 (int)", "give a str"),
        _generate("the cat", prefix=5),
    ),
    B(
        "pipeline-generation-return-full-text-as-text",
        PIPELINES,
        "af.pipeline('text-generation', ...)('the cat', return_full_text='no') (taken as true: the answer held the "
        "prompt as well as its continuation)",
        af.ConfigError,
        ("return_full_text='no' (str)", "True or False"),
        _generate("the cat", return_full_text="no"),
    ),
    B(
        "pipeline-generation-handle-long-unknown",
        PIPELINES,
        "af.pipeline('text-generation', ...)('the cat', handle_long_generation='cut') (a ValueError from inside "
        "transformers' text-generation pipeline)",
        af.ConfigError,
        ("handle_long_generation='cut'", "None", "'hole'"),
        _generate("the cat", handle_long_generation="cut"),
    ),
    B(
        "pipeline-generation-chat-message-without-content",
        PIPELINES,
        "af.pipeline('text-generation', ...)([{'role': 'user'}]) (a TypeError from inside transformers: 'can only "
        'concatenate str (not "dict") to str\')',
        af.ConfigError,
        ("message [0] is {'role': 'user'}", "'content'"),
        _generate([{"role": "user"}]),
    ),
    B(
        "scalearn-subset-adapter-twice",
        SCALEARN,
        "add_fusion_subset(<ScaLearn fusion f over a, b, c>, 'f', ['c', 'c'], 'cc') (the name given twice was dropped "
        "without a word: a subset of c alone)",
        af.ConfigError,
        ("adapters=['c', 'c'] names ['c'] more than once", "name each once"),
        lambda folder: lambda: add_fusion_subset(_fused(af.FusionConfig.scalearn()), "f", ["c", "c"], "cc"),
    ),
    B(
        "pruning-subset-adapters-not-names",
        PRUNING,
        "add_fusion_subset(model, 'f', 3, 'g') (a TypeError: 'int' object is not iterable)",
        af.ConfigError,
        ("adapters=3 has type int", "a list of names"),
        lambda folder: lambda: add_fusion_subset(_fused(), "f", 3, "g"),
    ),
    B(
        "pruning-subset-overwrite-not-bool",
        PRUNING,
        "add_fusion_subset(model, 'f', ['a'], 'g', overwrite='no') (taken as true: a fusion g already there was "
        "replaced)",
        af.ConfigError,
        ("overwrite='no'", "true or false"),
        lambda folder: lambda: add_fusion_subset(_fused(), "f", ["a"], "g", overwrite="no"),
    ),
    B(
        "pruning-select-activation-list",
        PRUNING,
        "select_adapters(['a', 'b'], keep=1) (an AttributeError: 'list' object has no attribute 'items')",
        af.ConfigError,
        ("select_adapters(activation)=['a', 'b'] has type list", "expected a mapping"),
        lambda folder: lambda: select_adapters(["a", "b"], keep=1),
    ),
    B(
        "pruning-compare-task-name",
        PRUNING,
        "compare_pruned(model, 'f', 'rte', batches, keep=1) (an AttributeError: 'str' object has no attribute "
        "'is_extractive_qa')",
        af.ConfigError,
        ("task='rte'", "has type str", "get_task('rte')"),
        _compared(task="rte"),
    ),
    B(
        "pruning-compare-repeats-zero",
        PRUNING,
        "compare_pruned(..., repeats=0) (refused only after the dev forwards, leaving fusion 'f_pruned' in the model)",
        af.ConfigError,
        ("repeats=0", "positive integer"),
        _compared(repeats=0),
    ),
    B(
        "pruning-compare-no-head",
        PRUNING,
        "compare_pruned(...) with no head given or active (refused in the scoring, after 'f_pruned' was added to the "
        "model)",
        af.ConfigError,
        ("none is given or active", "pass head=", "['h']"),
        _compared(active_head=None),
    ),
    B(
        "pruning-compare-unlabelled-batches",
        PRUNING,
        "compare_pruned(...) on batches without labels (a TaskError '2 predictions but 0 labels' that named no fix, "
        "with 'f_pruned' left in the model)",
        af.ConfigError,
        ("batches [0] hold no 'labels'", "with their labels"),
        _compared(labels=False),
    ),
    B(
        "pruning-compare-unknown-metric",
        PRUNING,
        "compare_pruned(..., metric='f1') for rte, whose metric is accuracy (recorded as the result's metric, which "
        "no figure of it holds)",
        af.ConfigError,
        ("metric='f1'", "['accuracy']"),
        _compared(metric="f1"),
    ),
    B(
        "analysis-average-scalearn-with-softmax",
        ANALYSIS,
        "average_activations([<softmax record>, <ScaLearn scale record>]) (averaged in silence and labelled 'mean "
        "softmax weight')",
        af.ConfigError,
        ("mean softmax weight", "mean ScaLearn scale", "each fusion kind apart"),
        lambda folder: lambda: average_activations([_activation(), _activation({"fusion_kind": "scalearn"})]),
    ),
    B(
        "analysis-average-generator",
        ANALYSIS,
        "average_activations(a for a in records) (a TypeError: 'generator' object is not subscriptable; not an error "
        "now)",
        None,
        ("runs",),
        lambda folder: lambda: str(average_activations(a for a in [_activation(), _activation()]).info),
    ),
    B(
        "analysis-average-not-records",
        ANALYSIS,
        "average_activations([{'a': 0.5}]) (a TypeError from inside numpy)",
        af.ConfigError,
        ("got dict", "load_fusion_activation"),
        lambda folder: lambda: average_activations([{"a": 0.5}]),
    ),
    B(
        "analysis-record-newer-format",
        ANALYSIS,
        "load_fusion_activation(<a fusion_attention.json of format_version 2>) (read as version 1 without a word)",
        af.SerializationError,
        ("format_version 2 is not supported", "upgrade adapterfusion"),
        _record_version,
    ),
    B(
        "analysis-activation-values-list",
        ANALYSIS,
        "FusionActivation('f', ('a', 'b'), (0, 1), [[0.5, 'x'], [0.2, 0.8]], 3) (an AttributeError: 'list' object has "
        "no attribute 'shape'; a list of numbers is now taken as the array)",
        af.ConfigError,
        ("not a [layers, adapters] array of numbers",),
        lambda folder: lambda: _activation(values=[[0.5, "x"], [0.2, 0.8]]),
    ),
    B(
        "analysis-activation-adapter-twice",
        ANALYSIS,
        "FusionActivation('f', ('a', 'a'), ...) (two columns of one name in its table and heatmap)",
        af.ConfigError,
        ("adapters ['a', 'a'], one more than once",),
        lambda folder: lambda: _activation(adapters=("a", "a")),
    ),
    B(
        "analysis-activation-negative-layer",
        ANALYSIS,
        "FusionActivation('f', ('a', 'b'), (-1, 0), ...) (taken, and its table numbered layer -1 as layer 0; a saved "
        "record of the same was refused)",
        af.ConfigError,
        ("FusionActivation: 'layers' must be a list of layer indices", "(-1, 0)"),
        lambda folder: lambda: _activation(layers=(-1, 0)),
    ),
    B(
        "analysis-table-digits-negative",
        ANALYSIS,
        "activation.table(digits=-1) (a ValueError 'Format specifier missing precision')",
        af.ConfigError,
        ("table(digits)=-1", "an integer >= 0"),
        lambda folder: lambda: _activation().table(-1),
    ),
    B(
        "analysis-load-record-none",
        ANALYSIS,
        "load_fusion_activation(None) (a TypeError from pathlib)",
        af.ConfigError,
        ("None is not a path",),
        lambda folder: lambda: load_fusion_activation(None),
    ),
    B(
        "analysis-mean-every-fusion-layer-skipped",
        ANALYSIS,
        "mean_fusion_attention(model, 'f', batches) with skip_layers=[0, 1], every layer fusion f runs at (a pass over "
        "every batch, then an error that named three possible causes)",
        af.ConfigError,
        ("runs at layers [0, 1]", "skip_layers=[0, 1] skips every one", "fewer skip_layers"),
        _skipped_everywhere,
    ),
    B(
        "analysis-parallel-head-not-a-name",
        ANALYSIS,
        "model.forward_parallel('f', heads={'a': ['h']}, **batch) (a TypeError from torch's ModuleDict: unhashable "
        "type 'list')",
        af.ConfigError,
        ("the head for adapter 'a' is ['h'] of type list", "heads={adapter: head}"),
        _parallel(heads={"a": ["h"]}, fusion_head="h"),
    ),
)
