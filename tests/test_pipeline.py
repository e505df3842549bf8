"""transformers.pipeline on an AdaptedModel (issue #24 item 4), end to end with a real tokenizer (the shipped
MiniLM's) on tiny random models: every answer must be what the model itself gives with the chosen adapter or fusion
and head (softmax of its logits; generate's tokens), and the model's own active state must be left as it was."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

import adapterfusion as af
from adapterfusion.pipeline_arguments import check_settings
from tiny_decoders import tiny_decoder
from tiny_models import TINY_CONFIGS, randomise, tiny_encoder

TEXTS = ["A man is playing a guitar.", "Nobody is here", "The cat sat on the mat and looked at the dog for long."]


@pytest.fixture(scope="module")
def tokenizer():
    return transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())


@pytest.fixture()
def model(tokenizer):
    """A tiny encoder over the MiniLM tokenizer's vocabulary with two randomised adapters, a fusion and heads."""
    model = af.wrap(tiny_encoder(vocab_size=len(tokenizer), max_position_embeddings=128))
    for name in ("a", "b"):
        model.add_adapter(name)
        randomise(torch.nn.ModuleList(site.adapters[name] for site in model.sites_with_adapter(name)), std=0.3)
    model.add_fusion("f", ["a", "b"])
    model.add_head("nli", af.ClassificationHead(num_labels=3, labels=["entailment", "neutral", "contradiction"]))
    model.add_head("plain", af.ClassificationHead(num_labels=2))
    model.add_head("score", af.RegressionHead())
    randomise(model.heads, std=0.5)
    return model.eval()


def _expected(model, tokenizer, texts, **choice) -> torch.Tensor:
    """Softmax of the model's own logits with `choice` activated, one text at a time."""
    with model.activated(**choice), torch.no_grad():
        return torch.cat([model(**tokenizer(text, return_tensors="pt")).logits.softmax(-1) for text in texts])


@pytest.mark.parametrize("choice", [dict(adapter="a"), dict(fusion="f"), dict()])
def test_text_classification_scores_are_the_models_with_the_choice(model, tokenizer, choice):
    model.activate(adapter="b", head="plain")
    classify = af.pipeline("text-classification", model, tokenizer, head="nli", top_k=None, batch_size=2, **choice)
    answers = classify(TEXTS)
    expected = _expected(model, tokenizer, TEXTS, head="nli", **choice)
    labels = ["entailment", "neutral", "contradiction"]
    for answer, probabilities in zip(answers, expected, strict=True):
        got = {item["label"]: item["score"] for item in answer}
        assert sorted(got) == sorted(labels)
        torch.testing.assert_close(torch.tensor([got[label] for label in labels]), probabilities, rtol=1e-5, atol=1e-6)
    assert (model.active_adapter, model.active_head) == ("b", "plain")  # the pipeline put back what was active


def test_a_view_handed_to_transformers_pipeline_logs_no_screen_of_class_names(model, tokenizer):
    """transformers.pipeline(model=model.for_pipeline(...)) logged an error line listing ~150 *For<Task> classes
    because PipelineModel is not one of them (af.pipeline hid it); the view works, so the line is dropped."""
    logger = logging.getLogger("transformers.pipelines.base")  # its filters act before any handler of it

    class Kept(logging.Handler):
        messages: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.messages.append(record.getMessage())

    handler = Kept()
    logger.addHandler(handler)
    try:
        classify = transformers.pipeline(
            "text-classification", model=model.for_pipeline(adapter="b", head="plain"), tokenizer=tokenizer
        )
        assert classify("A man plays.")[0]["label"] in ("LABEL_0", "LABEL_1")
    finally:
        logger.removeHandler(handler)
    assert not [m for m in handler.messages if "is not supported for" in m], handler.messages


def test_two_pipelines_on_one_model_and_text_pairs(model, tokenizer):
    first = af.pipeline("text-classification", model, tokenizer, adapter="a", head="nli")
    second = transformers.pipeline(
        "text-classification", model=model.for_pipeline(adapter="b", head="plain"), tokenizer=tokenizer
    )
    pair = {"text": "A man plays.", "text_pair": "Someone makes music."}
    for classify, choice, labels in (
        (first, dict(adapter="a", head="nli"), ["entailment", "neutral", "contradiction"]),
        (second, dict(adapter="b", head="plain"), ["LABEL_0", "LABEL_1"]),
    ):
        answer = classify(pair)
        with model.activated(**choice), torch.no_grad():
            inputs = tokenizer(pair["text"], pair["text_pair"], return_tensors="pt")
            probabilities = model(**inputs).logits.softmax(-1)[0]
        assert answer["label"] == labels[int(probabilities.argmax())]
        assert answer["score"] == pytest.approx(float(probabilities.max()), rel=1e-5)


def test_regression_head_gives_its_value(model, tokenizer):
    regress = af.pipeline("text-classification", model, tokenizer, adapter="a", head="score")
    with model.activated(adapter="a", head="score"), torch.no_grad():
        value = model(**tokenizer(TEXTS[0], return_tensors="pt")).logits.flatten()[0]
    assert regress(TEXTS[0])[0]["score"] == pytest.approx(float(value), rel=1e-5)


def test_text_generation_with_an_adapter(tokenizer):
    model = af.wrap(tiny_decoder("llama", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id))
    model.add_adapter("lm")
    randomise(torch.nn.ModuleList(site.adapters["lm"] for site in model.sites_with_adapter("lm")), std=0.3)
    generate = af.pipeline("text-generation", model, tokenizer, adapter="lm")
    text = "the cat sat"
    answer = generate(text, max_new_tokens=6, do_sample=False, return_full_text=False)[0]["generated_text"]
    prompt = tokenizer(text, return_tensors="pt", add_special_tokens=False, return_token_type_ids=False)
    with model.activated(adapter="lm"):
        ids = model.generate(**prompt, max_new_tokens=6, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert answer == tokenizer.decode(ids[0, prompt["input_ids"].shape[1] :], skip_special_tokens=True)
    with model.activated(), torch.no_grad():  # the adapter changes what is generated: the test sees the choice
        bare = model.generate(**prompt, max_new_tokens=6, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert not torch.equal(bare, ids)


def test_what_a_pipeline_reads_of_the_model(model, tokenizer):
    assert model.device == torch.device("cpu") and model.dtype == torch.float32 and not model.can_generate()
    view = model.for_pipeline(fusion="f", head="nli")
    assert view.config.id2label == {0: "entailment", 1: "neutral", 2: "contradiction"}
    assert view.config.num_labels == 3 and view.config.problem_type == "single_label_classification"
    assert model.model.config.num_labels == 2  # the wrapped model's own config is untouched
    assert view.device == model.device and not view.can_generate()


def test_refusals(model, tokenizer):
    with pytest.raises(af.NameNotFoundError, match="zz"):
        af.pipeline("text-classification", model, tokenizer, adapter="zz", head="nli")
    with pytest.raises(af.ConfigError, match="head="):
        af.pipeline("text-classification", model, tokenizer, adapter="a")
    with pytest.raises(af.ConfigError, match="text-generation"):
        af.pipeline("text-generation", model, tokenizer, adapter="a")
    model.add_head("mc", af.MultipleChoiceHead())
    with pytest.raises(af.ConfigError, match="multiple_choice head"):
        model.for_pipeline(adapter="a", head="mc")


def test_regression_head_with_every_score(model, tokenizer):
    """top_k=None asks for a score per label: a regression head has one, its value (its logits [batch] were read
    as one number, which transformers cannot iterate over)."""
    regress = af.pipeline("text-classification", model, tokenizer, adapter="a", head="score", top_k=None)
    with model.activated(adapter="a", head="score"), torch.no_grad():
        values = [float(model(**tokenizer(text, return_tensors="pt")).logits.flatten()[0]) for text in TEXTS[:2]]
    answers = regress(TEXTS[:2])
    assert [[item["label"] for item in answer] for answer in answers] == [["LABEL_0"], ["LABEL_0"]]
    assert [answer[0]["score"] for answer in answers] == pytest.approx(values, rel=1e-5)


def test_token_classification_with_a_tagging_head(model, tokenizer):
    model.add_head("tags", af.TokenClassificationHead(num_labels=3, labels=["O", "B-X", "I-X"]))
    randomise(model.heads["tags"], std=0.5)
    tag = af.pipeline("token-classification", model, tokenizer, adapter="a", head="tags", ignore_labels=[])
    inputs = tokenizer(TEXTS[0], return_tensors="pt")
    with model.activated(adapter="a", head="tags"), torch.no_grad():
        expected = model(**inputs).logits[0, 1:-1].argmax(-1)  # [CLS] and [SEP] get no entity
    assert [entity["entity"] for entity in tag(TEXTS[0])] == [["O", "B-X", "I-X"][int(i)] for i in expected]


def test_an_aggregation_strategy_transformers_has_no_grouping_of_is_refused(model, tokenizer):
    """transformers looks the name up in its enum: a KeyError naming 'firstt' alone, at the build."""
    model.add_head("tags", af.TokenClassificationHead(num_labels=3, labels=["O", "B-X", "I-X"]))
    for strategy in ("firstt", 3):
        with pytest.raises(af.ConfigError, match=r"aggregation_strategy=.*one of \['none', 'simple', 'first'"):
            af.pipeline(
                "token-classification", model, tokenizer, adapter="a", head="tags", aggregation_strategy=strategy
            )
    tag = af.pipeline("token-classification", model, tokenizer, adapter="a", head="tags", aggregation_strategy="FIRST")
    assert isinstance(tag(TEXTS[0]), list)


def test_feature_extraction_reads_the_hidden_states_without_a_head(model, tokenizer):
    extract = af.pipeline("feature-extraction", model, tokenizer, adapter="a")
    inputs = tokenizer(TEXTS[0], return_tensors="pt")
    with model.activated(adapter="a"), torch.no_grad():
        expected = model(**inputs).last_hidden_state
    torch.testing.assert_close(extract(TEXTS[0], return_tensors=True), expected)


@pytest.mark.parametrize(
    ("task", "choice", "message"),
    [
        ("text-clasification", dict(head="nli"), "unknown pipeline task 'text-clasification' \\(did you mean "),
        ("question-answering", dict(head="nli"), "removed from transformers"),
        ("image-classification", dict(head="nli"), "not one an AdaptedModel serves"),
        ("token-classification", dict(head="nli"), "token_classification head, but head 'nli' is a classification"),
        ("ner", dict(), "with head=None the wrapped BertModel has none of its own; pass head= a token_classif"),
        ("zero-shot-classification", dict(head="score"), "classification head, but head 'score' is a regression"),
        ("fill-mask", dict(head="nli"), "no prediction head of ours plays a part .*pass head=None"),
        ("fill-mask", dict(), "own ForMaskedLM head, and the wrapped BertModel has none; .*AutoModelForMaskedLM"),
        ("feature-extraction", dict(head="nli"), "reads the encoder's hidden states.*pass head=None"),
        ("zero-shot-classification", dict(head="plain"), "head 'plain' has labels \\['LABEL_0', 'LABEL_1'\\], none of"),
    ],
)
def test_a_task_that_cannot_read_the_choice_is_refused_before_any_text_runs(model, tokenizer, task, choice, message):
    """Each was a KeyError (an unknown task; logits a bare encoder does not make), an IndexError (logits of another
    kind of head) or wrong scores without a word, from inside transformers."""
    with pytest.raises(af.ConfigError, match=message):
        af.pipeline(task, model, tokenizer, adapter="a", **choice)
    with pytest.raises(af.ConfigError, match=message):  # the view checks it itself, given the task
        af.PipelineModel(model, adapter="a", task=task, **choice)
    with pytest.raises(af.ConfigError, match=message):
        model.for_pipeline(adapter="a", task=task, **choice)


def test_zero_shot_reads_the_entailment_logit_of_an_nli_head(model, tokenizer):
    """A head with no label starting 'entail' was accepted, and transformers then scored every candidate with the
    last class's logit; an NLI head's scores are the entailment logits of (text, hypothesis) softmaxed over labels."""
    classify = af.pipeline("zero-shot-classification", model, tokenizer, head="nli", adapter="a")
    answer = classify(TEXTS[0], candidate_labels=["music", "sport"], hypothesis_template="This is about {}.")
    with model.activated(adapter="a", head="nli"), torch.no_grad():
        pairs = tokenizer([TEXTS[0]] * 2, ["This is about music.", "This is about sport."], return_tensors="pt")
        expected = dict(zip(["music", "sport"], model(**pairs).logits[:, 0].softmax(-1).tolist(), strict=True))
    assert dict(zip(answer["labels"], answer["scores"], strict=True)) == pytest.approx(expected, abs=1e-5)


def test_a_pipeline_needs_a_task(model, tokenizer):
    """task=None made transformers look the model up on the Hub (a RuntimeError about model ids)."""
    with pytest.raises(af.ConfigError, match="af.pipeline needs a task .*text-classification"):
        af.pipeline(None, model, tokenizer, head="nli")


def test_a_view_without_a_task_that_gives_no_logits_is_refused(model, tokenizer):
    """for_pipeline() does not know the task; with no head on a bare encoder no pipeline but feature-extraction
    finds anything to read (transformers.pipeline("text-classification", ...) failed with a KeyError 'logits')."""
    with pytest.raises(af.ConfigError, match="no head of its own.*pass head= one of the loaded heads.*feature-extr"):
        model.for_pipeline(adapter="a")
    own = af.wrap(transformers.BertForSequenceClassification(model.model.config))
    assert own.for_pipeline().config.num_labels == own.model.config.num_labels  # its own head makes the logits


def test_text_generation_refuses_a_head(tokenizer):
    model = af.wrap(tiny_decoder("llama", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id))
    model.add_head("c", af.ClassificationHead(pooling="last"))
    with pytest.raises(af.ConfigError, match="text-generation reads the tokens of the language-model head.*head=None"):
        af.pipeline("text-generation", model, tokenizer, head="c")


def test_a_head_replaced_under_its_name_answers_with_its_own_labels(model, tokenizer):
    """The pipeline read the labels once: after the head was replaced (overwrite=True) by a 3-label one it raised
    transformers' KeyError, and a 2-label one answered with the old names."""
    classify = af.pipeline("text-classification", model, tokenizer, adapter="a", head="nli", top_k=None)
    model.add_head("nli", af.ClassificationHead(num_labels=2, labels=["positive", "negative"]), overwrite=True)
    assert {answer["label"] for answer in classify([TEXTS[0]])[0]} == {"positive", "negative"}
    model.add_head("nli", af.ClassificationHead(num_labels=3, labels=["x", "y", "z"]), overwrite=True)
    assert {answer["label"] for answer in classify([TEXTS[0]])[0]} == {"x", "y", "z"}


def test_transformers_pipeline_runs_the_wrapped_model_with_what_is_active(model, tokenizer):
    """transformers.pipeline(model=wrapped) failed with AttributeError 'config': model.config is now the wrapped
    model's config, with the active head's labels, and each call runs what is active at that call."""
    labels = ["entailment", "neutral", "contradiction"]
    model.activate(fusion="f", head="nli")
    classify = transformers.pipeline("text-classification", model=model, tokenizer=tokenizer, top_k=None)
    for choice in (dict(fusion="f", head="nli"), dict(adapter="b", head="nli")):
        model.activate(**choice)
        expected = _expected(model, tokenizer, TEXTS[:2], **choice)
        for answer, probabilities in zip(classify(TEXTS[:2]), expected, strict=True):
            got = {item["label"]: item["score"] for item in answer}
            torch.testing.assert_close(torch.tensor([got[label] for label in labels]), probabilities)
    model.activate(adapter="a", head="score")  # a regression head: its value, as for_pipeline gives it
    with torch.no_grad():
        value = float(model(**tokenizer(TEXTS[0], return_tensors="pt")).logits[0])
    assert classify(TEXTS[0])[0][0]["score"] == pytest.approx(value, rel=1e-5)
    assert model(**tokenizer(TEXTS[0], return_tensors="pt")).logits.shape == (1,)  # outside a pipeline: [batch]
    model.activate(adapter="a")
    assert model.config is model.model.config and model.config.num_labels == 2
    model.activate(adapter="a", head="nli")
    assert model.config.id2label == dict(enumerate(labels)) and model.config is model.config  # kept, not rebuilt
    assert model.model.config.num_labels == 2  # the wrapped model's own config is untouched


@pytest.mark.parametrize(
    ("active", "message"),
    [
        (dict(adapter="a"), "with head=None the wrapped BertModel has none of its own; pass head="),
        (dict(adapter="a", head="tags"), "but head 'tags' is a token_classification head"),
        (dict(adapter=af.Parallel("a", "b"), head="nli"), "the active Parallel lays out the batch"),
    ],
)
def test_transformers_pipeline_refuses_an_active_choice_its_task_cannot_read(model, tokenizer, active, message):
    """Each failed inside transformers (KeyError 'logits', KeyError on a label index) or read rows of a layout."""
    model.add_head("tags", af.TokenClassificationHead(num_labels=3))
    classify = transformers.pipeline("text-classification", model=model, tokenizer=tokenizer)
    model.activate(**active)
    with pytest.raises(af.ConfigError, match=message):
        classify(TEXTS[0])


def test_transformers_pipeline_on_the_model_itself_checks_its_calls_and_logs_no_class_names(model, tokenizer):
    """A pipeline built on the model itself handed adapter= and unknown keywords of a call to the tokenizer, which
    ignored them (the active choice ran, unsaid), took top_k=0 (answering nothing), and logged a screen of class
    names that AdaptedModel is not one of; now its calls pass the checks a view's do, and the line is dropped."""
    logger = logging.getLogger("transformers.pipelines.base")
    messages: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    logger.addHandler(handler)
    try:
        model.activate(adapter="a", head="nli")
        classify = transformers.pipeline("text-classification", model=model, tokenizer=tokenizer)
    finally:
        logger.removeHandler(handler)
    assert not [m for m in messages if "is not supported for" in m], messages
    assert classify(TEXTS[0])[0]["label"] in ("entailment", "neutral", "contradiction")
    for keywords, words in [
        (dict(adapter="b"), "runs what is active in it (adapter='a', head='nli'); activate the choice first"),
        (dict(head="plain"), "model.activate(head=...)"),
        (dict(adapter_names=["b"]), "adapter_names=['b'] given to a pipeline call: its TextClassificationPipeline"),
        (dict(top_k=0), "top_k"),
    ]:
        with pytest.raises(af.ConfigError, match=re.escape(words)):
            classify(TEXTS[0], **keywords)
    model.activate(adapter="a", head="score")  # the scores a call ranks follow the head active at that call
    with pytest.raises(af.ConfigError, match="softmax"):
        classify(TEXTS[0], function_to_apply="softmax")


@pytest.mark.parametrize("on_view", [False, True])
def test_settings_given_to_transformers_pipeline_are_checked_as_it_builds(model, tokenizer, on_view):
    """The settings given to transformers.pipeline(...) on a view or on the model itself reached transformers
    unchecked (top_k=0 answered nothing; adapter_name= went to the tokenizer, which ignored it); af.pipeline keeps
    its own words for its own."""
    model.activate(adapter="a", head="nli")
    run = model.for_pipeline(adapter="a", head="nli") if on_view else model
    for settings, words in [
        (dict(top_k=0), "top_k=0 (int)"),
        (dict(batch_size=0), "batch_size=0 (int)"),
        (dict(function_to_apply="bogus"), "function_to_apply='bogus'"),
        (dict(adapter_name="b"), "transformers.pipeline: 'adapter_name' (did you mean 'adapter'?) is not an argument"),
    ]:
        with pytest.raises(af.ConfigError, match=re.escape(words)):
            transformers.pipeline("text-classification", model=run, tokenizer=tokenizer, **settings)
    kept = transformers.pipeline("text-classification", model=run, tokenizer=tokenizer, top_k=2, batch_size=2)
    assert [len(answer) for answer in kept([TEXTS[0], TEXTS[1]])] == [2, 2]
    with pytest.raises(af.ConfigError, match=re.escape("af.pipeline: 'adapter_name' (did you mean 'adapter'?)")):
        af.pipeline("text-classification", model, tokenizer, adapter="a", head="nli", adapter_name="b")


def test_a_view_built_without_a_task_is_checked_by_the_pipeline_that_reads_it(model, tokenizer):
    """transformers.pipeline("text-classification", model=model.for_pipeline(head=<a tagging head>)) answered with
    transformers' KeyError: 16 (a token index read as a label)."""
    model.add_head("tags", af.TokenClassificationHead(num_labels=3))
    view = model.for_pipeline(adapter="a", head="tags")
    with pytest.raises(af.ConfigError, match="text-classification reads .* but head 'tags' is a token_classification"):
        transformers.pipeline("text-classification", model=view, tokenizer=tokenizer)(TEXTS[0])
    assert view.task is None  # refused, so not settled: a token-classification pipeline may still read it
    tag = transformers.pipeline("token-classification", model=view, tokenizer=tokenizer, ignore_labels=[])
    assert len(tag(TEXTS[0])) > 0 and view.task == "token-classification"


def test_transformers_text_generation_runs_the_wrapped_decoder(tokenizer):
    model = af.wrap(tiny_decoder("llama", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id))
    model.add_adapter("lm")
    randomise(torch.nn.ModuleList(site.adapters["lm"] for site in model.sites_with_adapter("lm")), std=0.3)
    model.activate(adapter="lm")
    generate = transformers.pipeline("text-generation", model=model, tokenizer=tokenizer)
    answer = generate("the cat sat", max_new_tokens=5, do_sample=False, return_full_text=False)[0]["generated_text"]
    view = af.pipeline("text-generation", model, tokenizer, adapter="lm")
    assert answer == view("the cat sat", max_new_tokens=5, do_sample=False, return_full_text=False)[0]["generated_text"]
    assert model.generation_config is model.model.generation_config


def test_a_pipeline_runs_exactly_the_choice_it_was_given(model, tokenizer):
    """for_pipeline copied the skip_layers active when it was built; af.pipeline had no skip_layers= (it went to
    transformers, which dropped it)."""
    with model.activated(adapter="b", head="nli", skip_layers=[0, 1]):
        classify = af.pipeline("text-classification", model, tokenizer, adapter="a", head="nli", top_k=None)
    skipping = af.pipeline(
        "text-classification", model, tokenizer, adapter="a", head="nli", skip_layers=[0], top_k=None
    )
    plain, skipped = dict(adapter="a", head="nli"), dict(adapter="a", head="nli", skip_layers=[0])
    for pipe, choice in ((classify, plain), (skipping, skipped)):
        expected = _expected(model, tokenizer, TEXTS[:1], **choice)[0]
        got = {item["label"]: item["score"] for item in pipe(TEXTS[0])[0]}
        torch.testing.assert_close(torch.tensor([got[k] for k in ["entailment", "neutral", "contradiction"]]), expected)
    assert skipping.model.choice["skip_layers"] == (0,) and classify.model.choice["skip_layers"] == ()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (dict(adapter_name="a"), "'adapter_name' \\(did you mean 'adapter'\\?\\) is not an argument of af.pipeline"),
        (dict(skip_layer=[0]), "'skip_layer' \\(did you mean 'skip_layers'\\?\\)"),
        (dict(colour="red", size=2), "'colour', 'size' are not arguments .* would ignore them"),
        (dict(dtype=torch.float64), "dtype only to load a model.*model.to\\("),
        (dict(device_map="auto"), "device_map only to load a model"),
    ],
)
def test_af_pipeline_refuses_arguments_transformers_would_drop(model, tokenizer, arguments, message):
    with pytest.raises(af.ConfigError, match=message):
        af.pipeline("text-classification", model, tokenizer, head="nli", **arguments)


@pytest.mark.parametrize(
    ("task", "choice", "arguments"),
    [
        ("text-classification", dict(head="nli"), dict(top_k=None, function_to_apply="sigmoid", batch_size=2)),
        ("text-classification", dict(head="nli"), dict(truncation=True, max_length=8, num_workers=0, device="cpu")),
        ("token-classification", dict(head="tags"), dict(ignore_labels=[], aggregation_strategy="simple")),
        ("zero-shot-classification", dict(head="nli"), dict(hypothesis_template="About {}.", multi_label=True)),
        ("feature-extraction", dict(), dict(return_tensors=True, tokenize_kwargs=dict(truncation=True))),
    ],
)
def test_af_pipeline_takes_the_arguments_transformers_reads(model, tokenizer, task, choice, arguments):
    model.add_head("tags", af.TokenClassificationHead(num_labels=3, labels=["O", "B-X", "I-X"]))
    af.pipeline(task, model, tokenizer, adapter="a", **choice, **arguments)


def test_af_pipeline_refuses_a_model_it_cannot_run(model, tokenizer):
    with pytest.raises(af.ConfigError, match="af.pipeline takes a wrapped model .*, got a BertModel"):
        af.pipeline("text-classification", model.model, tokenizer, head="nli")
    with pytest.raises(af.ConfigError, match="needs the model's tokenizer, got None"):
        af.pipeline("text-classification", model, None, head="nli")
    by_name = af.pipeline("text-classification", model, str(af.default_encoder_path()), head="nli")  # loaded by name
    assert by_name(TEXTS[0])[0]["label"] in {"entailment", "neutral", "contradiction"}
    by_path = af.pipeline("text-classification", model, Path(af.default_encoder_path()), head="nli")
    assert by_path(TEXTS[0]) == by_name(TEXTS[0])  # a Path was kept as the tokenizer: a TypeError at the first call


@pytest.mark.parametrize("skip_layers", [1, None, "0"])
def test_a_pipelines_skip_layers_are_checked_as_activate_checks_them(model, tokenizer, skip_layers):
    """skip_layers=1 or None raised tuple()'s TypeError inside for_pipeline."""
    with pytest.raises(af.ConfigError) as activating:
        model.activate("a", skip_layers=skip_layers)
    assert "expected a list of layer indices" in str(activating.value)
    for build in (
        lambda: af.pipeline("text-classification", model, tokenizer, adapter="a", head="nli", skip_layers=skip_layers),
        lambda: model.for_pipeline(adapter="a", head="nli", skip_layers=skip_layers),
        lambda: af.PipelineModel(model, adapter="a", head="nli", skip_layers=skip_layers),
    ):
        with pytest.raises(af.ConfigError) as building:
            build()
        assert str(building.value) == str(activating.value)


@pytest.mark.parametrize(
    "call", [dict(adapter="b"), dict(head="score"), dict(fusion="f"), dict(skip_layers=[0]), dict(adapter="a")]
)
def test_the_choice_given_at_call_time_is_refused(model, tokenizer, call):
    """classify(text, adapter='b') went to the tokenizer, which ignored it: adapter a's answer came back."""
    classify = af.pipeline("text-classification", model, tokenizer, adapter="a", head="nli", top_k=None)
    key = next(iter(call))
    with pytest.raises(
        af.ConfigError,
        match=f"{key}=.* given to a pipeline call: af.pipeline \\(or model.for_pipeline\\) fixes the adapter.*"
        "this one runs adapter='a', head='nli'",
    ):
        classify(TEXTS[0], **call)
    assert len(classify([TEXTS[0]])[0]) == 3  # the pipeline still runs as built


@pytest.mark.parametrize(
    ("task", "value", "words"),
    [
        ("text-classification", [], "was given an empty list"),
        ("text-classification", None, "was given None of type NoneType"),
        ("text-classification", 3, "was given 3 of type int"),
        ("text-classification", {"txt": "x"}, "was given {'txt': 'x'} of type dict"),
        ("text-classification", ["fine", None], "was given an entry None"),
        ("token-classification", b"bytes", "was given b'bytes' of type bytes"),
        ("token-classification", {"text": "x"}, "was given {'text': 'x'} of type dict"),
        ("feature-extraction", (), "was given an empty tuple"),
    ],
)
def test_what_no_pipeline_reads_is_refused_naming_what_it_takes(model, tokenizer, task, value, words):
    """Each failed inside transformers: an IndexError on [], a tokenizer's ValueError on None, 3 or a dict."""
    model.add_head("tags", af.TokenClassificationHead(num_labels=3))
    head = {"text-classification": "nli", "token-classification": "tags"}.get(task)
    pipe = af.pipeline(task, model, tokenizer, adapter="a", head=head)
    with pytest.raises(af.ConfigError, match=f"a {task} pipeline {words}.*it takes a text \\(str\\)"):
        pipe(value)
    assert len(pipe(TEXTS[:2])) == len(list(pipe(x for x in TEXTS[:2]))) == 2  # texts, and a generator, still run


def test_a_pipeline_built_under_a_task_alias_reads_text_pairs(model, tokenizer):
    """The input check read the task as given: a sentiment-analysis pipeline refused {'text', 'text_pair'}."""
    pair = {"text": TEXTS[0], "text_pair": TEXTS[1]}
    expected = af.pipeline("text-classification", model, tokenizer, adapter="a", head="nli")(pair)
    assert af.pipeline("sentiment-analysis", model, tokenizer, adapter="a", head="nli")(pair) == expected


@pytest.mark.parametrize("model_type", ["t5", "bart"])
def test_text_generation_refuses_an_encoder_decoder(tokenizer, model_type):
    """transformers' text-generation pipeline feeds an encoder-decoder's decoder the prompt and returned the prompt
    alone, without a word; transformers 5 has no pipeline for encoder-decoders (text2text-generation was removed)."""
    model = af.wrap(tiny_decoder(model_type))
    model.add_adapter("a")
    message = "text-generation runs decoder-only models.*encoder-decoder.*text2text-generation.*model.generate"
    with pytest.raises(af.ConfigError, match=message):
        af.pipeline("text-generation", model, tokenizer, adapter="a")
    with pytest.raises(af.ConfigError, match=message):
        model.for_pipeline(adapter="a", task="text-generation")
    model.activate("a")
    with pytest.raises(af.ConfigError, match=message):
        transformers.pipeline("text-generation", model=model, tokenizer=tokenizer)("the cat sat", max_new_tokens=2)


@pytest.mark.parametrize("top_k", [0, -1, 1.5, "2", True])
def test_a_top_k_that_is_not_a_count_of_answers_is_refused(model, tokenizer, top_k):
    """text-classification sliced its sorted scores with top_k (0: no answer, -1: the last label dropped) and took a
    top_k that is not an int as not given (one answer), without a word; at a call and at the build alike."""
    classify = af.pipeline("text-classification", model, tokenizer, adapter="a", head="nli")
    with pytest.raises(af.ConfigError, match=f"top_k={top_k!r}.*a whole number >= 1.*top_k=None for every label"):
        classify(TEXTS[0], top_k=top_k)
    with pytest.raises(af.ConfigError, match=f"top_k={top_k!r}"):
        af.pipeline("text-classification", model, tokenizer, adapter="a", head="nli", top_k=top_k)
    with pytest.raises(af.ConfigError, match=f"top_k={top_k!r}.*fill-mask.*best tokens"):
        check_settings("fill-mask", {"top_k": top_k})
    assert len(classify(TEXTS[0], top_k=2)) == 2 and len(classify(TEXTS[0], top_k=None)) == 3


@pytest.mark.parametrize(
    ("task", "value", "words"),
    [
        ("text-classification", (TEXTS[0], TEXTS[1]), "a tuple of 2, which transformers reads as one input.*text pair"),
        ("text-classification", [(TEXTS[0], TEXTS[1])], "an entry \\('A man.*of type tuple"),
        ("text-classification", [[TEXTS[0], TEXTS[1]]], "an entry \\['A man.*of type list"),
        ("text-classification", {"text": TEXTS[:2], "text_pair": TEXTS[1:]}, "the text pair .*one text and its pair"),
        ("text-classification", {"text": TEXTS[0], "text_pair": 3}, "the text pair .*'text_pair': str"),
        ("text-classification", {"text": None}, "the text pair \\{'text': None\\}"),
        ("zero-shot-classification", (TEXTS[0], TEXTS[1]), "a tuple of 2, .*pass a list of texts"),
        ("zero-shot-classification", [[TEXTS[0], TEXTS[1]]], "an entry \\['A man.*of type list"),
        ("token-classification", (TEXTS[0],), "a tuple of 1"),
    ],
)
def test_texts_in_a_shape_transformers_reads_as_one_input_are_refused(model, tokenizer, task, value, words):
    """A tuple of texts, a pair as a list and a pair dict of lists were one input to transformers: the tokenizer read
    them as a batch, and text- and zero-shot-classification answered the first text alone without a word (the others
    failed inside the tokenizer)."""
    model.add_head("tags", af.TokenClassificationHead(num_labels=3))
    head = {"token-classification": "tags"}.get(task, "nli")
    pipe = af.pipeline(task, model, tokenizer, adapter="a", head=head, **_LABELS.get(task, {}))
    with pytest.raises(af.ConfigError, match=f"a {task} pipeline was given {words}"):
        pipe(value)
    assert len(pipe(list(TEXTS[:2]))) == 2


_LABELS = {"zero-shot-classification": dict(candidate_labels=["music", "sport"])}


def test_a_candidate_label_named_twice_is_refused(model, tokenizer):
    """['music', 'music'] was answered 0.5 each whatever the text: the copies share the label's probability."""
    classify = af.pipeline("zero-shot-classification", model, tokenizer, head="nli", adapter="a")
    with pytest.raises(af.ConfigError, match=r"names \['music'\] more than once.*name each label once"):
        classify(TEXTS[0], candidate_labels=["music", "sport", "music"])
    assert len(classify(TEXTS[0], candidate_labels=["music", "sport"])["labels"]) == 2


@pytest.mark.parametrize(
    ("task", "value", "words"),
    [
        ("text-classification", {"text": TEXTS[0], "text_pair": ""}, "whose second text '' is blank.*without a word"),
        (
            "text-classification",
            [{"text": TEXTS[0], "text_pair": "b"}, {"text": "a", "text_pair": " "}],
            "entry \\[1\\]",
        ),
        ("text-classification", {"text": "", "text_pair": TEXTS[1]}, "whose first text '' is blank"),
        ("text-classification", [TEXTS[0], "  "], "entry \\[1\\] '  ', which holds no text"),
        ("zero-shot-classification", "", "'', which holds no text"),
        ("text-classification", {"text": " ", "text_pair": None}, "which holds no text"),
    ],
)
def test_a_blank_text_or_side_of_a_pair_is_refused(model, tokenizer, task, value, words):
    """A pair's empty text_pair was dropped by the tokenizer without a word, the text answered alone; a blank text
    was answered from the special tokens alone (zero-shot: a ValueError from transformers, or an answer for '  ')."""
    pipe = af.pipeline(task, model, tokenizer, adapter="a", head="nli", **_LABELS.get(task, {}))
    with pytest.raises(af.ConfigError, match=f"a {task} pipeline was given .*{words}"):
        pipe(value)
    assert len(pipe({"text": TEXTS[0], "text_pair": None} if task == "text-classification" else TEXTS[0])) > 0


def test_text_pairs_and_zero_shot_labels_that_transformers_reads(model, tokenizer):
    classify = af.pipeline("text-classification", model, tokenizer, adapter="a", head="nli")
    pairs = [{"text": TEXTS[0], "text_pair": TEXTS[1]}, {"text": TEXTS[2], "text_pair": None}]
    assert classify(pairs) == [classify(pairs[0]), *classify([TEXTS[2]])]
    zero_shot = af.pipeline("zero-shot-classification", model, tokenizer, adapter="a", head="nli")
    assert zero_shot(TEXTS[0], ["music", "sport"]) == zero_shot(TEXTS[0], candidate_labels="music, sport")
    for call in [dict(), dict(candidate_labels=[]), dict(candidate_labels=["music", 3])]:  # a TypeError, a ValueError
        with pytest.raises(af.ConfigError, match="candidate_labels=.*a non-empty list of label names"):
            zero_shot(TEXTS[0], **call)
    with pytest.raises(af.ConfigError, match="candidate_labels=\\[\\]"):
        af.pipeline("zero-shot-classification", model, tokenizer, adapter="a", head="nli", candidate_labels=[])


def test_a_tokenizer_that_is_not_one_is_refused(model, tokenizer, tmp_path):
    """tokenizer=3 built a pipeline that failed at its first call; a folder without a tokenizer was transformers'
    OSError (HFValidationError) about repo ids."""
    with pytest.raises(af.ConfigError, match="af.pipeline\\(tokenizer=3\\) has type int; pass the model's tokenizer"):
        af.pipeline("text-classification", model, 3, adapter="a", head="nli")
    with pytest.raises(af.ConfigError, match="looks like a local path, but .*missing' does not exist"):
        af.pipeline("text-classification", model, str(tmp_path / "missing"), adapter="a", head="nli")


def test_a_tokenizer_named_by_a_hub_id_loads_as_an_encoders_does(model, tokenizer, tmp_path, monkeypatch):
    """A Hub id ('@revision' too) cached in the HF_HUB_CACHE set now loads offline, as resolve_encoder and
    load_tokenizer load an encoder's: transformers took 'org/enc@main' for a repo name and looked in the cache of
    import time. A folder holding only a tokenizer still loads; one whose tokenizer does not load is our error."""
    from hub_cache import cached_repo

    folder = tmp_path / "enc"
    tiny_encoder("bert", vocab_size=len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    cached_repo(tmp_path / "hf-cache", "org/enc", {p.name: p for p in folder.iterdir()})
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    expected = af.pipeline("text-classification", model, tokenizer, adapter="a", head="nli")(TEXTS[0])
    for name in ("org/enc", "org/enc@main"):
        assert af.pipeline("text-classification", model, name, adapter="a", head="nli")(TEXTS[0]) == expected
    with pytest.raises(af.HubError, match="tokenizer org/other is not in the local Hugging Face cache"):
        af.pipeline("text-classification", model, "org/other", adapter="a", head="nli")
    alone = tmp_path / "tokenizer-alone"
    tokenizer.save_pretrained(alone)
    assert af.pipeline("text-classification", model, alone, adapter="a", head="nli")(TEXTS[0]) == expected
    (alone / "tokenizer.json").write_text("{}")
    with pytest.raises(af.ConfigError, match="af.pipeline: the tokenizer in .*tokenizer-alone' does not load"):
        af.pipeline("text-classification", model, alone, adapter="a", head="nli")


@pytest.mark.parametrize(
    ("task", "setting", "words"),
    [
        ("text-classification", dict(function_to_apply="bogus"), "function_to_apply='bogus'.*one of \\['sigmoid'"),
        ("text-classification", dict(function_to_apply=3), "function_to_apply=3.*one of"),
        ("text-classification", dict(batch_size=0), "batch_size=0 \\(int\\): give a whole number >= 1"),
        ("text-classification", dict(batch_size="2"), "batch_size='2' \\(str\\)"),
        ("feature-extraction", dict(num_workers=-1), "num_workers=-1 \\(int\\): give a whole number >= 0"),
        (
            "zero-shot-classification",
            dict(hypothesis_template="no label here"),
            "hypothesis_template='no label here'.*one \\{\\} for the label",
        ),
        ("zero-shot-classification", dict(hypothesis_template="{label}"), "hypothesis_template='\\{label\\}'"),
        ("zero-shot-classification", dict(multi_label="false"), "multi_label='false' \\(str\\): give True"),
    ],
)
def test_settings_that_fail_inside_transformers_or_torch_are_refused(model, tokenizer, task, setting, words):
    """function_to_apply='bogus' was a KeyError 'BOGUS' from transformers' enum, batch_size=0 or '2' a ValueError
    from torch's sampler ('got batch_size=2'), a hypothesis_template without {} a ValueError (or, '{label}', a
    KeyError) at the first call, and multi_label='false' scored the labels as if true; at the build and at a call
    alike."""
    head = {"feature-extraction": None}.get(task, "nli")
    with pytest.raises(af.ConfigError, match=words):
        af.pipeline(task, model, tokenizer, adapter="a", head=head, **setting)
    pipe = af.pipeline(task, model, tokenizer, adapter="a", head=head, **_LABELS.get(task, {}))
    with pytest.raises(af.ConfigError, match=words):
        pipe(list(TEXTS[:2]), **setting)
    assert len(pipe(list(TEXTS[:2]))) == 2


def test_a_softmax_over_a_regression_value_is_refused(model, tokenizer):
    """Softmax over a regression head's one output scored every text 1.0, without a word; sigmoid squashes it."""
    regress = af.pipeline("text-classification", model, tokenizer, adapter="a", head="score")
    with pytest.raises(af.ConfigError, match="function_to_apply='softmax' over a head of one output.*1.0"):
        regress(TEXTS[0], function_to_apply="softmax")
    with pytest.raises(af.ConfigError, match="function_to_apply='softmax' over a head of one output"):
        af.pipeline("text-classification", model, tokenizer, head="score", function_to_apply="SOFTMAX")
    value = regress(TEXTS[0])[0]["score"]
    squashed = regress(TEXTS[0], function_to_apply="sigmoid")[0]["score"]
    assert squashed == pytest.approx(float(torch.sigmoid(torch.tensor(value))), rel=1e-5)
    classify = af.pipeline("text-classification", model, tokenizer, head="nli", function_to_apply="softmax")
    assert 0 < classify(TEXTS[0])[0]["score"] < 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize(
    "device, message",
    [
        ("cuda:7", "device 'cuda:7': this machine's torch sees no CUDA GPU; pass device='cpu'"),
        (torch.device("cuda"), "sees no CUDA GPU"),
        ("gpu", "device 'gpu' is not a torch device such as 'cpu' or 'cuda:0'"),
        (1.5, "device=1.5 has type float"),
    ],
)
def test_a_device_this_machine_lacks_is_refused_before_the_model_moves(model, tokenizer, device, message):
    """'cuda:7' on a machine without CUDA was torch's AssertionError from inside the pipeline's model.to()."""
    with pytest.raises(af.ConfigError, match=message):
        af.pipeline("text-classification", model, tokenizer, adapter="a", head="nli", device=device)
    assert model.device.type == "cpu"
    for fine in ("cpu", -1, 0):  # 0: accelerator 0, which transformers reads as the CPU where there is none
        af.pipeline("text-classification", model, tokenizer, adapter="a", head="nli", device=fine)


@pytest.mark.parametrize(
    ("task", "settings", "message"),
    [
        ("text-classification", {"truncation": "yes"}, r"truncation='yes' \(str\).*'only_first'"),
        ("token-classification", {"truncation": 5}, r"truncation=5 \(int\)"),
        ("text-classification", {"padding": "sideways"}, r"padding='sideways'.*'longest'"),
        ("text-classification", {"truncation": True, "max_length": 0}, r"max_length=0 .*whole number >= 1"),
        ("zero-shot-classification", {"max_length": -3}, r"max_length=-3"),
        ("zero-shot-classification", {"candidate_labels": "x, x"}, r"names \['x'\] more than once"),
        ("text-generation", {"prefix": 5}, r"prefix=5 \(int\).*give a str"),
        ("text-generation", {"handle_long_generation": "cut"}, r"handle_long_generation='cut'.*'hole'"),
        ("feature-extraction", {"tokenize_kwargs": ["x"]}, r"tokenize_kwargs=\['x'\] \(list\).*give a dict"),
        ("feature-extraction", {"tokenize_kwargs": {"truncation": "yes"}}, r"truncation='yes'"),
        ("token-classification", {"stride": -1}, r"stride=-1 \(int\).*whole number >= 0"),
        ("token-classification", {"ignore_labels": "O"}, r"ignore_labels='O' \(str\).*\['O'\]"),
        ("token-classification", {"delimiter": 5}, r"delimiter=5 \(int\)"),
        ("text-classification", {"add_special_tokens": "no"}, r"add_special_tokens='no' \(str\).*True or False"),
        ("text-classification", {"return_token_type_ids": "no"}, r"return_token_type_ids='no'"),
        ("text-generation", {"return_full_text": "no"}, r"return_full_text='no' \(str\).*True or False"),
    ],
)
def test_settings_transformers_fails_on_or_misreads_are_refused(task, settings, message):
    """Before: a ValueError or OverflowError from inside transformers or the tokenizer; max_length=0 cut nothing
    and 'x, x' (split at its commas) scored one label twice."""
    with pytest.raises(af.ConfigError, match=message):
        check_settings(task, settings)


@pytest.mark.parametrize("settings", [{"truncation": "only_first", "padding": "longest", "max_length": 8}, {}])
def test_tokenizer_settings_transformers_takes_pass(settings):
    check_settings("text-classification", {"truncation": True, **settings})


@pytest.mark.parametrize("texts", [{"a", "b"}, np.array(["a", "b"]), torch.tensor([1, 2]), ["a", 3.5], ["a", None]])
def test_inputs_transformers_reads_as_one_whole_input_are_refused(model, tokenizer, texts):
    """A set, array or tensor went to the tokenizer whole (its ValueError); a number in a list likewise."""
    classify = af.pipeline("text-classification", model, tokenizer, head="nli")
    with pytest.raises(af.ConfigError, match="a text-classification pipeline was given"):
        classify(texts)


def test_a_chat_message_without_content_is_refused(tokenizer):
    model = af.wrap(tiny_decoder("llama", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id))
    model.add_adapter("lm")
    generate = af.pipeline("text-generation", model, tokenizer, adapter="lm")
    for chat in ([{"role": "user"}], [[{"role": "user", "content": "hi"}, {"content": "x"}]]):
        with pytest.raises(af.ConfigError, match=r"a chat whose message \[\d\] is .*'content'"):
            generate(chat, max_new_tokens=1)


@pytest.fixture()
def fill(tokenizer):
    """A fill-mask pipeline on a tiny BertForMaskedLM over the MiniLM tokenizer's vocabulary, with adapter a."""
    config = transformers.BertConfig(**{**TINY_CONFIGS["bert"][1], "vocab_size": len(tokenizer)})
    model = af.wrap(transformers.BertForMaskedLM(config))
    model.add_adapter("a")
    return af.pipeline("fill-mask", model.eval(), tokenizer, adapter="a")


@pytest.mark.parametrize(
    ("texts", "call", "message"),
    [
        ("no mask here", {}, r"mask token '\[MASK\]', and there is none in 'no mask here'"),  # AttributeError
        (["a [MASK]", "none"], {}, r"none in entries \[1\] of the list"),
        ("a [MASK]", {"targets": 5}, "targets=5: .*a non-empty list of words"),  # TypeError in transformers
        ("a [MASK]", {"targets": [""]}, r"targets=\[''\]"),  # ValueError in transformers
        ("a [MASK]", {"top_k": 10**6}, r"top_k=1000000: .*ranks the 30522 tokens"),  # torch.topk's RuntimeError
        ("a [MASK]", {"tokenizer_kwargs": ["x"]}, r"tokenizer_kwargs=\['x'\] \(list\)"),  # TypeError
    ],
)
def test_fill_mask_inputs_and_settings_it_cannot_read_are_refused(fill, texts, call, message):
    with pytest.raises(af.ConfigError, match=message):
        fill(texts, **call)


def test_fill_mask_fills_each_mask(fill):
    assert len(fill("a [MASK] b [MASK]", top_k=2)) == 2


def test_token_classification_windows_and_split_words_are_checked_with_the_input(tokenizer):
    """Before: ValueErrors from inside transformers; a stride given at the call to a pipeline built with
    aggregation_strategy='none' passed transformers' own check."""
    model = af.wrap(tiny_encoder(vocab_size=len(tokenizer), max_position_embeddings=128))
    model.add_head("tags", af.TokenClassificationHead(num_labels=3))
    tag = af.pipeline("token-classification", model.eval(), tokenizer, head="tags", aggregation_strategy="none")
    with pytest.raises(af.ConfigError, match="stride=2 splits a long text.*aggregation_strategy='simple'"):
        tag("a text", stride=2)
    with pytest.raises(af.ConfigError, match="is_split_into_words=True takes a text as a list of its words"):
        tag("a text", is_split_into_words=True)
    assert tag(["a", "text"], is_split_into_words=True)
    assert tag("a text", stride=2, aggregation_strategy="simple") is not None
    # a stride no window holds: the tokenizer's ValueError (raised only once the text overflows a window)
    window = tokenizer.model_max_length - tokenizer.num_special_tokens_to_add(pair=False)
    with pytest.raises(af.ConfigError, match=rf"stride={window} must be below the {window} tokens of a window"):
        tag("a text", stride=window, aggregation_strategy="simple")


@pytest.mark.parametrize(
    ("targets", "message"),
    [
        (["capitalxyz"], r"'capitalxyz' is not one token .*splits it into \['capital', '##xy', '##z'\], of which "),
        ("capitalxyz", r"transformers would score 'capital' alone in its place"),  # a single word, as a str
        (["paris", "capitalxyz"], r"targets: 'capitalxyz' is not one token of this tokenizer's vocabulary"),
        (["\u200b"], r"makes no token of it, and transformers would leave it out"),  # transformers dropped it
    ],
)
def test_fill_mask_targets_that_are_not_one_vocabulary_token_are_refused(fill, targets, message):
    """Before: the first sub-token's score came back as the word's ('capitalxyz' answered as 'capital'), with only a
    line logged by transformers."""
    with pytest.raises(af.ConfigError, match=message) as refused:
        fill("Paris is the [MASK] of France.", targets=targets)
    assert "give whole-vocabulary words, each one token by tokenizer.tokenize(word)" in str(refused.value)


def test_fill_mask_targets_given_when_the_pipeline_is_built_are_checked_too(fill, tokenizer):
    with pytest.raises(af.ConfigError, match="'capitalxyz' is not one token"):
        af.pipeline("fill-mask", fill.model.adapted, tokenizer, adapter="a", targets=["capitalxyz"])
    with pytest.raises(af.ConfigError, match="'capitalxyz' is not one token"):
        af.pipeline("fill-mask", fill.model.adapted, af.default_encoder_path(), adapter="a", targets="capitalxyz")


def test_fill_mask_targets_the_tokenizer_makes_one_token_of_are_scored_as_that_token(fill):
    """'Paris' is no key of the uncased vocabulary, and the tokenizer makes the one token 'paris' of it; '##s' is a
    key (a word piece), which transformers looks up before tokenizing."""
    text = "Paris is the [MASK] of France."
    answers = fill(text, targets=["Paris", "LONDON", "##s"])
    assert {answer["token_str"] for answer in answers} == {"paris", "london", "##s"}
    lower = {answer["token_str"]: answer["score"] for answer in fill(text, targets=["paris", "london", "##s"])}
    assert {answer["token_str"]: answer["score"] for answer in answers} == lower


def test_fill_mask_targets_of_a_tokenizer_that_marks_a_leading_space():
    """A GPT-2 style byte-level BPE: 'Paris' and ' London' (with its space marker, 'ĠLondon') are one token each,
    'London' without the space is two, and the refusal names the one-token form."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from adapterfusion.pipeline_arguments import check_fill_mask_targets

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<mask>"], initial_alphabet=alphabet)
    bpe.train_from_iterator(["Paris is the capital of France, and London is big."] * 20, trainer)
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, mask_token="<mask>")
    assert tokenizer.tokenize("London") == ["Lon", "don"] and tokenizer.tokenize(" London") == ["ĠLondon"]
    check_fill_mask_targets(["Paris", " London", "ĠLondon"], tokenizer)  # one token each, or a key of the vocabulary
    with pytest.raises(af.ConfigError, match=r"'London' is not one token .*\['Lon', 'don'\].*\(such as ' London'\)"):
        check_fill_mask_targets("London", tokenizer)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (dict(top_k=0), "top_k=0 .*a whole number >= 1"),  # answered nothing
        (dict(truncation="yes"), "truncation='yes' .*truncation=True"),  # a ValueError inside transformers
        (dict(adapter="b"), r"adapter='b' given to a pipeline call: .* \(this one runs adapter='a', head='nli'\)"),
        (dict(adapter_names=["b"]), r"adapter_names=\['b'\] given to a pipeline call: .*does not read it"),
    ],
)
def test_a_pipeline_built_by_transformers_on_a_view_checks_its_calls(model, tokenizer, call, message):
    """transformers.pipeline(task, model=model.for_pipeline(...)) bypassed af.pipeline's call checks: each of these
    was misread (adapter='b' ran adapter a unsaid) or failed inside transformers."""
    classify = transformers.pipeline(
        "text-classification", model=model.for_pipeline(adapter="a", head="nli"), tokenizer=tokenizer, top_k=None
    )
    with pytest.raises(af.ConfigError, match=message):
        classify(TEXTS[0], **call)
    with pytest.raises(af.ConfigError, match="was given None of type NoneType"):
        classify(None)
    assert len(classify([TEXTS[0]])[0]) == 3  # the pipeline still runs as built


def test_a_fill_mask_pipeline_built_by_transformers_on_a_view_checks_targets_and_masks(fill, tokenizer):
    view = fill.model.adapted.for_pipeline(adapter="a")
    direct = transformers.pipeline("fill-mask", model=view, tokenizer=tokenizer)
    assert view.task == "fill-mask"  # learnt from the pipeline as it was built
    with pytest.raises(af.ConfigError, match=r"mask token '\[MASK\]', and there is none in 'no mask'"):
        direct("no mask")  # an AttributeError inside transformers
    with pytest.raises(af.ConfigError, match="'capitalxyz' is not one token"):
        direct("a [MASK]", targets="capitalxyz")
    with pytest.raises(af.ConfigError, match="'capitalxyz' is not one token"):
        transformers.pipeline("fill-mask", model=view, tokenizer=tokenizer, targets=["capitalxyz"])
    assert [answer["token_str"] for answer in direct("a [MASK]", targets=["paris"])] == ["paris"]
