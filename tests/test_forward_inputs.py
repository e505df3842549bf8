"""What a model call accepts (adapterfusion/forward_inputs/): what must still pass and give the wrapped HF model's
own results. The refusals are in the bad-input catalogue (tests/reliability/cases_forward.py)."""

from __future__ import annotations

import copy

import pytest
import torch
import transformers

import adapterfusion as af
from adapterfusion.encoder_limits import check_max_length, max_input_length
from adapterfusion.forward_inputs.encoder_decoder import shifts_input_ids, shifts_labels
from adapterfusion.forward_inputs.keywords import accepted_keywords
from tiny_decoders import TINY_DECODER_CONFIGS, tiny_decoder, tiny_decoder_config
from tiny_models import TINY_CONFIGS, tiny_config, tiny_encoder, tiny_inputs, tiny_pair


def _task_pair(class_name: str) -> tuple[torch.nn.Module, af.AdaptedModel]:
    torch.manual_seed(0)
    model = getattr(transformers, class_name)(tiny_config("bert")).eval()
    return copy.deepcopy(model), af.wrap(model)


def test_labels_reach_a_wrapped_task_model_and_give_its_own_loss():
    reference, model = _task_pair("BertForSequenceClassification")
    inputs, labels = tiny_inputs(), torch.tensor([0, 1])
    out = model(**inputs, labels=labels)
    expected = reference(**inputs, labels=labels)
    torch.testing.assert_close(out.loss, expected.loss)
    torch.testing.assert_close(out.logits, expected.logits)
    assert out.task_loss is out.loss


def test_labels_reach_a_wrapped_multiple_choice_model_with_its_three_dimensional_inputs():
    reference, model = _task_pair("BertForMultipleChoice")
    inputs = {key: value.unsqueeze(0).expand(2, 3, -1).contiguous() for key, value in tiny_inputs(batch=1).items()}
    labels = torch.tensor([2, 0])
    torch.testing.assert_close(model(**inputs, labels=labels).loss, reference(**inputs, labels=labels).loss)


def test_token_tags_and_multi_label_targets_reach_a_wrapped_task_model():
    """The checks of a token classifier's tags and of float (multi-label) targets let the valid ones through."""
    reference, model = _task_pair("BertForTokenClassification")
    inputs, tags = tiny_inputs(), torch.tensor([[0, 1, -100, 1, 0, -100, 1]] * 2)
    torch.testing.assert_close(model(**inputs, labels=tags).loss, reference(**inputs, labels=tags).loss)
    reference, model = _task_pair("BertForSequenceClassification")
    targets = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    torch.testing.assert_close(model(**inputs, labels=targets).loss, reference(**inputs, labels=targets).loss)


@pytest.mark.parametrize("model_type", ["bert", "deberta", "deberta-v2"])
def test_class_ids_shaped_batch_by_one_are_read_as_one_per_example(model_type):
    """BERT's own loss flattens [batch, 1] class ids; DeBERTa's raised a RuntimeError from a view. Both now get
    [batch], and the loss is the reference model's for [batch] labels."""
    torch.manual_seed(0)
    reference = transformers.AutoModelForSequenceClassification.from_config(tiny_config(model_type)).eval()
    model = af.wrap(copy.deepcopy(reference))
    inputs, labels = tiny_inputs(), torch.tensor([0, 1])
    loss = model(**inputs, labels=labels.unsqueeze(-1)).loss
    torch.testing.assert_close(loss, reference(**inputs, labels=labels).loss)


def test_a_head_of_ours_on_a_task_model_computes_the_loss_not_the_task_model():
    _, model = _task_pair("BertForSequenceClassification")
    model.add_head("h", af.ClassificationHead(num_labels=3))
    model.activate(head="h")
    out = model(**tiny_inputs(), labels=torch.tensor([2, 1]))
    assert out.logits.shape == (2, 3) and out.loss is not None


@pytest.mark.parametrize("model_type", sorted(TINY_CONFIGS))
def test_the_encoder_keywords_of_each_architecture_still_pass(model_type):
    """Every keyword the encoder's forward names (and transformers' output flags) reaches it: the wrapped model with
    nothing active gives the reference model's outputs for them."""
    reference, model = tiny_pair(model_type)
    inputs = dict(tiny_inputs(), output_hidden_states=True, output_attentions=True, return_dict=True)
    accepted = accepted_keywords(reference)
    assert accepted is not None
    if "token_type_ids" in accepted:
        inputs["token_type_ids"] = torch.zeros_like(inputs["input_ids"])
    out, expected = model(**inputs), reference(**inputs)
    torch.testing.assert_close(out.last_hidden_state, expected.last_hidden_state)
    assert len(out.hidden_states) == len(expected.hidden_states)
    assert out.attentions is not None and len(out.attentions) == len(expected.attentions)


def test_inputs_embeds_and_position_ids_pass():
    reference, model = tiny_pair("bert")
    ids = tiny_inputs()["input_ids"]
    embeds = reference.get_input_embeddings()(ids)
    positions = torch.arange(ids.shape[1]).unsqueeze(0)  # shared by the batch: [1, seq]
    torch.testing.assert_close(
        model(inputs_embeds=embeds, position_ids=positions).last_hidden_state,
        reference(inputs_embeds=embeds, position_ids=positions).last_hidden_state,
    )


def test_none_values_are_dropped_not_refused():
    """adapter_names=None (or any keyword set to None) asks for nothing, as transformers' own defaults do."""
    _, model = tiny_pair("bert")
    model(**tiny_inputs(), adapter_names=None, token_type_ids=None)


def _runs(model: af.AdaptedModel, length: int) -> bool:
    try:
        with torch.no_grad():
            model(input_ids=torch.full((1, length), 7))
    except af.ConfigError:
        return False
    return True


@pytest.mark.parametrize("model_type", sorted(TINY_CONFIGS))
def test_max_input_length_is_the_longest_input_each_architecture_runs(model_type):
    """The limit read from the config is exact: that many tokens run through transformers, one more is refused."""
    model = af.wrap(tiny_encoder(model_type))
    limit = max_input_length(model.model.config)
    if limit is None:
        assert _runs(model, 3 * model.model.config.max_position_embeddings)
    else:
        assert _runs(model, limit) and not _runs(model, limit + 1)


def test_relative_only_deberta_has_no_length_limit():
    assert max_input_length(tiny_config("deberta-v2", position_biased_input=False)) is None
    assert max_input_length(tiny_config("roberta", pad_token_id=1)) == 62


def test_check_max_length_reads_a_local_encoder_and_skips_what_it_cannot_read(tmp_path):
    tiny_encoder("bert").save_pretrained(tmp_path / "tiny")
    check_max_length(64, tmp_path / "tiny")
    with pytest.raises(af.ConfigError, match="max_length=65 .* 64 .*max_position_embeddings=64"):
        check_max_length(65, tmp_path / "tiny")
    check_max_length(10**6, "some-org/not-downloaded")  # a Hub id not in the cache: the model call checks later


def test_check_max_length_reads_a_cached_hub_id_at_a_revision(tmp_path, monkeypatch):
    """'org/enc@main' in the cache HF_HUB_CACHE names now, offline: its config was looked up as the repo
    'org/enc@main' in the cache transformers found at import, not found, and the check skipped unsaid."""
    from hub_cache import COMMIT, cached_repo

    tiny_encoder("bert").save_pretrained(tmp_path / "tiny")
    cached_repo(tmp_path / "hf-cache", "org/enc", {"config.json": tmp_path / "tiny" / "config.json"})
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for encoder in ("org/enc", "org/enc@main", f"org/enc@{COMMIT}"):
        check_max_length(64, encoder)
        with pytest.raises(af.ConfigError, match=f"max_length=65 is more tokens than encoder '{encoder}' takes: 64"):
            check_max_length(65, encoder)
    check_max_length(10**6, "org/enc@other-branch")  # a revision not cached: the model call checks later


def test_an_untyped_var_keyword_adds_keywords_only_when_the_forward_passes_it_on():
    class Loose(torch.nn.Module):
        def forward(self, input_ids, **kwargs):
            return torch.nn.functional.dropout(input_ids, **kwargs)

    class Swallowing(torch.nn.Module):
        def forward(self, input_ids, **kwargs):
            return input_ids

    class Typed(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None):
            return input_ids

    # Passed on, as GPT-2 passes its **kwargs to its attention: what transformers reads from such kwargs, no more.
    loose = accepted_keywords(Loose())
    assert loose is not None and {"input_ids", "return_dict", "output_attentions", "cu_seq_lens_q"} <= loose
    assert "foo" not in loose and "use_cahce" not in loose
    assert accepted_keywords(Swallowing()) == {"input_ids", "return_dict"}
    assert accepted_keywords(Typed()) == {"input_ids", "attention_mask", "return_dict"}


def test_a_forward_patched_with_a_bare_wrapper_hides_its_keywords_and_nothing_is_refused():
    """A `(*args, **kwargs)` patch of a model class's forward (without functools.wraps) says nothing of what the
    forward it calls takes: it was read as taking only transformers' passed-on kwargs, so input_ids was refused."""

    class Patched(transformers.BertModel):
        pass

    original = Patched.forward

    def counting(self, *args, **kwargs):
        return original(self, *args, **kwargs)

    Patched.forward = counting
    model = Patched(tiny_config("bert"))
    assert accepted_keywords(model) is None
    wrapped = af.AdaptedModel(model)
    wrapped(**tiny_inputs())  # refused before: "takes no 'attention_mask', 'input_ids'"


# Encoder-decoder families (the BART-style config kwargs fit mBART, Pegasus and Marian) and whether their forward
# makes decoder inputs from input_ids alone.
_SHIFTS_INPUT_IDS = {
    "T5Config": False,
    "BartConfig": True,
    "MBartConfig": True,
    "PegasusConfig": False,
    "MarianConfig": False,
}


@pytest.mark.parametrize("config_class", sorted(_SHIFTS_INPUT_IDS))
def test_shifts_input_ids_says_what_the_model_does_with_input_ids_alone(config_class):
    """shifts_input_ids reads transformers' source; it must agree with what the model's base (the class that
    check_decoder_source asks about) does when called with input_ids and no decoder inputs: run, or refuse."""
    kwargs = TINY_DECODER_CONFIGS["t5" if config_class == "T5Config" else "bart"][1]
    torch.manual_seed(0)
    base = transformers.AutoModelForSeq2SeqLM.from_config(getattr(transformers, config_class)(**kwargs)).base_model
    try:
        with torch.no_grad():
            base.eval()(input_ids=torch.tensor([[5, 6, 7]]))
    except ValueError:
        made = False
    else:
        made = True
    assert made is _SHIFTS_INPUT_IDS[config_class]
    assert shifts_input_ids(type(base)) is made


# Task models: whether their own forward shifts input_ids (T5's classification and QA models, self._shift_right) or
# labels (the language models' token ids) right into the decoder's inputs.
_TASK_MODEL_SHIFTS = {
    "T5ForSequenceClassification": ("input_ids",),
    "T5ForQuestionAnswering": ("input_ids",),
    "T5ForConditionalGeneration": ("labels",),
    "BartForConditionalGeneration": ("labels",),
    "BartForSequenceClassification": (),  # BartModel, its base, shifts input_ids
}


@pytest.mark.parametrize("class_name", sorted(_TASK_MODEL_SHIFTS))
def test_a_task_models_own_shift_is_read(class_name):
    model_class = getattr(transformers, class_name)
    assert shifts_input_ids(model_class) is ("input_ids" in _TASK_MODEL_SHIFTS[class_name])
    assert shifts_labels(model_class) is ("labels" in _TASK_MODEL_SHIFTS[class_name])


@pytest.mark.parametrize("class_name", ["T5ForSequenceClassification", "T5ForConditionalGeneration"])
def test_a_call_with_no_decoder_inputs_advises_labels_only_where_they_are_shifted(class_name):
    """T5ForSequenceClassification's labels are class ids, which make no decoder inputs: its refusal (given the
    encoder's states, no input_ids) does not advise them; a language model's does."""
    torch.manual_seed(0)
    model = af.wrap(getattr(transformers, class_name)(transformers.T5Config(**TINY_DECODER_CONFIGS["t5"][1])).eval())
    ids = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        encoded = model.model.get_encoder()(input_ids=ids)
    with pytest.raises(af.ConfigError, match=f"{class_name} was called with no decoder inputs") as caught:
        model(encoder_outputs=encoded)
    assert ("labels, which it shifts right" in str(caught.value)) is class_name.endswith("ConditionalGeneration")


@pytest.mark.parametrize("model_type", ["llama", "t5"])
def test_language_model_labels_of_other_rows_are_refused_as_token_id_rows(model_type):
    """A language model's labels are token ids shaped like the (decoder) input ids: the refusal said 'one real label
    per example, shape [batch]', the layout of class ids."""
    model = af.wrap(tiny_decoder(model_type))
    decoder = {"decoder_input_ids": torch.tensor([[0, 5]])} if model_type == "t5" else {}
    with pytest.raises(af.ConfigError) as caught:
        model(input_ids=torch.tensor([[5, 6, 7]]), **decoder, labels=torch.tensor([[5, 6], [5, 6]]))
    assert "2 label rows for a batch of 1 examples" in str(caught.value)
    assert "one row of token ids per example, shape [batch, seq]" in str(caught.value)
    with pytest.raises(af.ConfigError, match=r"not a torch\.Tensor; pass the token ids as a tensor shaped like"):
        model(input_ids=torch.tensor([[5, 6, 7]]), **decoder, labels=[[5, 6, 7]])
    classifier = _task_pair("BertForSequenceClassification")[1]
    with pytest.raises(af.ConfigError, match=r"3 labels for a batch of 2 examples; pass one real label per example"):
        classifier(**tiny_inputs(batch=2), labels=torch.tensor([0, 1, 1]))


@pytest.mark.parametrize(
    ("model_type", "class_name"),
    [("modernbert", "ModernBertForMultipleChoice"), ("bert", "BertForMultipleChoice"), ("bert", "BertModel")],
)
def test_a_bool_attention_mask_gives_what_the_same_mask_as_integers_gives(model_type, class_name):
    """Tokenizers give masks as torch.long, but users build bool ones. ModernBERT's multiple-choice model pools by
    the mask's argmax, which torch refuses for bool (a RuntimeError from inside transformers): the call hands every
    model a per-token mask as integers, the same mask."""
    torch.manual_seed(0)
    reference = getattr(transformers, class_name)(tiny_config(model_type)).eval()
    model = af.wrap(copy.deepcopy(reference))
    inputs = tiny_inputs()
    if class_name.endswith("MultipleChoice"):
        inputs = {key: value.unsqueeze(1).expand(-1, 3, -1).contiguous() for key, value in inputs.items()}
    as_bool = dict(inputs, attention_mask=inputs["attention_mask"].bool())
    out, expected = model(**as_bool), reference(**inputs)
    name = "last_hidden_state" if class_name == "BertModel" else "logits"
    torch.testing.assert_close(getattr(out, name), getattr(expected, name))


@pytest.mark.parametrize(
    ("class_name", "config", "keys"),
    [
        ("DistilBertForMultipleChoice", "distilbert", ("position_ids",)),
        ("BertForMultipleChoice", "bert", ("token_type_ids", "position_ids")),
        ("GPT2DoubleHeadsModel", "gpt2", ("token_type_ids", "position_ids")),
    ],
)
def test_per_choice_positions_and_token_types_reach_a_wrapped_multiple_choice_model(class_name, config, keys):
    """A wrapped multiple-choice model takes every per-token input as [batch, choices, seq]. DistilBERT's and
    GPT-2's hand position_ids to their embeddings unflattened (a RuntimeError from inside transformers for the raw
    models); the call flattens them for every such model, as BERT's does itself, so each gives what it gives for the
    same values as [batch * choices, seq] (and BERT's its own result)."""
    torch.manual_seed(0)
    made = tiny_decoder_config(config) if config == "gpt2" else tiny_config(config)
    reference = getattr(transformers, class_name)(made).eval()
    model = af.wrap(copy.deepcopy(reference))
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(5, 90, (2, 3, 7), generator=generator)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    extra = {
        "position_ids": torch.randint(0, 7, (2, 3, 7), generator=generator),
        "token_type_ids": torch.randint(0, 2, (2, 3, 7), generator=generator),
    }
    inputs.update({key: extra[key] for key in keys})
    flat = {key: value.flatten(0, 1) if key in keys else value for key, value in inputs.items()}
    out = model(**inputs)
    name = "mc_logits" if class_name == "GPT2DoubleHeadsModel" else "logits"
    torch.testing.assert_close(getattr(out, name), getattr(reference(**flat), name))
    if class_name == "BertForMultipleChoice":  # flattens them itself
        torch.testing.assert_close(getattr(out, name), getattr(reference(**inputs), name))
