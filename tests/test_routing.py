"""Per-example routing (issue #24 item 1): `model(**batch, adapter_names=[...], head_names=[...])` must give, in
float64, each example exactly what that example alone gives with its choice activated (the independent reference:
one ordinary forward per example), and compute the adapter rows with one gathered batched matmul per site."""

from __future__ import annotations

import contextlib

import pytest
import torch
import transformers
from torch.overrides import TorchFunctionMode

import adapterfusion as af
from tiny_decoders import randomise_pieces, tiny_decoder, tiny_decoder_inputs
from tiny_models import randomise, tiny_config, tiny_encoder, tiny_inputs
from tolerances import assert_close

PFEIFFER = {
    "a": af.AdapterConfig.pfeiffer(reduction_factor=8),
    "b": af.AdapterConfig.pfeiffer(reduction_factor=16),  # another bottleneck size: zero-padded in the stack
    "c": af.AdapterConfig.pfeiffer(reduction_factor=8, leave_out=(1,)),  # not at layer 1: bare there
    "s": af.AdapterConfig.pfeiffer(reduction_factor=8, scaling=0.5),
}
HOULSBY = {
    "h1": af.AdapterConfig.houlsby(reduction_factor=8),  # own LayerNorm copies, two sites per layer
    "h2": af.AdapterConfig.houlsby(reduction_factor=8),
}


def _randomised(model: af.AdaptedModel, name: str) -> None:
    randomise(torch.nn.ModuleList(site.adapters[name] for site in model.sites_with_adapter(name)), std=0.3)


def _model(model_type: str = "bert", configs: dict | None = None) -> af.AdaptedModel:
    """A float64 tiny encoder with randomised adapters, a randomised fusion 'f' over a and b, and heads."""
    model = af.wrap(tiny_encoder(model_type).double())
    for name, config in (configs if configs is not None else {**PFEIFFER, **HOULSBY}).items():
        model.add_adapter(name, config)
        _randomised(model, name)
    model.add_fusion("f", ["a", "s"], af.FusionConfig.dynamic(value_init_noise=0.05))
    for parameter in model.fusion_parameters("f"):
        parameter.data.add_(torch.randn_like(parameter) * 0.2)
    model.add_head("two", af.ClassificationHead(num_labels=2))
    model.add_head("three", af.ClassificationHead(num_labels=3))
    model.add_head("other", af.ClassificationHead(num_labels=2))
    return model.eval()


def _inputs(batch: int) -> dict[str, torch.Tensor]:
    inputs = tiny_inputs(batch=batch, seq=9)
    inputs["attention_mask"][batch - 1, 3:] = 0
    return inputs


def _alone(model: af.AdaptedModel, inputs: dict, row: int, choice, head: str | None, **options):
    """Example `row` run by itself with `choice` (an adapter, a fusion or None) and `head` activated."""
    single = {key: value[row : row + 1] for key, value in inputs.items()}
    fusion = choice if choice in model.fusion_setups else None
    with model.activated(adapter=None if fusion else choice, fusion=fusion, head=head):
        return model(**single, **options)


@pytest.mark.parametrize("model_type", ["bert", "distilbert", "albert"])
def test_each_example_equals_it_alone(model_type):
    """Adapters of two placements (Pfeiffer, Houlsby with own LayerNorms where the site has them), sizes, scaling and
    leave_out, a fusion and the plain model in one batch, with two heads of one output size. DistilBERT's blocks
    apply their LayerNorms themselves (PRE_RESIDUAL sites)."""
    own_norms = model_type == "bert"
    houlsby = {name: af.AdapterConfig.houlsby(reduction_factor=8, train_layer_norm=own_norms) for name in HOULSBY}
    model = _model(model_type, {**PFEIFFER, **houlsby})
    choices = ["a", "b", None, "f", "h1", "c", "s", "h2", "a"]
    heads = ["two", "other", "two", "two", "other", "two", "two", "other", "two"]
    inputs = _inputs(len(choices))
    out = model(**inputs, adapter_names=choices, head_names=heads)
    assert out.logits.shape == (len(choices), 2) and out.row_logits is None
    for row, (choice, head) in enumerate(zip(choices, heads, strict=True)):
        assert_close(out.logits[row], _alone(model, inputs, row, choice, head).logits[0], label=f"row {row} {choice}")
    assert model.state.routing is None and model.active_adapter is None  # nothing of the call stays


def test_inside_the_inference_cache_routed_rows_follow_the_weights_across_calls():
    """inference_cache() keeps each site's stacked adapter weights and fusion folds between calls (a server's
    batches): calls alternating between mixes give what they give outside it, and an in-place weight change (an
    optimizer step) between calls shows at once."""
    model = _model("bert", PFEIFFER)
    inputs = _inputs(4)
    mixes = [["a", "b", "f", None], ["s", "a", "c", "f"], ["a", "b", "f", None]]
    expected = [model(**inputs, adapter_names=mix).last_hidden_state for mix in mixes]
    for mix, wanted in zip(mixes, expected, strict=True):
        with model.inference_cache():
            assert_close(model(**inputs, adapter_names=mix).last_hidden_state, wanted, label=str(mix))
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():  # random changes: a constant added to every feature would vanish in BERT's LayerNorm
        for weight in (model.sites_with_adapter("b")[0].adapters["b"].up.bias, model.fusion_parameters("f")[0]):
            weight.add_(torch.randn(weight.shape, generator=generator, dtype=weight.dtype))
    changed = model(**inputs, adapter_names=mixes[0]).last_hidden_state
    assert not torch.allclose(changed[1], expected[0][1]) and not torch.allclose(changed[2], expected[0][2])
    with model.inference_cache():
        assert_close(model(**inputs, adapter_names=mixes[0]).last_hidden_state, changed, label="after the change")


def test_gradients_turned_back_on_inside_the_inference_cache_are_refused():
    """inference_cache() runs under no_grad and keeps the adapter stacks and fusion folds it makes: with
    torch.enable_grad() inside, the first routed call's stacks carried its autograd graph, and the second call's
    backward failed in torch ("backward through the graph a second time"); an activated fusion's first one did."""
    model = _model("bert", PFEIFFER)
    inputs, mix = _inputs(3), ["a", "f", None]
    expected = model(**inputs, adapter_names=mix).last_hidden_state.detach()
    calls = [
        lambda: model(**inputs, adapter_names=mix),
        lambda: model.forward_parallel("f", heads={"a": "two"}, fusion_head="two", **inputs),
    ]
    for call in calls:
        with model.inference_cache(), torch.enable_grad():
            with pytest.raises(af.ConfigError, match=r"gradients enabled inside inference_cache\(\).*outside the"):
                call()
    with model.inference_cache():
        assert_close(model(**inputs, adapter_names=mix).last_hidden_state, expected, label="the cache still runs")
    model(**inputs, adapter_names=mix).last_hidden_state.sum().backward()  # and gradients flow outside it


@pytest.mark.parametrize("cached", [False, True])
def test_adapters_with_their_own_layer_norms_and_other_placements(cached):
    """New LayerNorms inside the adapters (gathered per row), the other residual placements and non-linearities (each
    a group of its own at a site); also inside inference_cache(), where each group gathers from a stack of every
    adapter at the site that shares its placement (LayerNorm copies stacked with them)."""
    inside = dict(reduction_factor=8, ln_before=True, ln_after=True, residual_before_ln=False)
    configs = {
        "a": af.AdapterConfig.pfeiffer(reduction_factor=8),
        "s": af.AdapterConfig.pfeiffer(reduction_factor=4),
        "n1": af.AdapterConfig.pfeiffer(**inside),
        "n2": af.AdapterConfig.pfeiffer(**inside, skip_before_ln_after=False),
        "n3": af.AdapterConfig.pfeiffer(**inside, skip_before_ln_after=False),
        "post": af.AdapterConfig.pfeiffer(reduction_factor=8, residual_before_ln="post_add", original_ln_before=False),
        "g": af.AdapterConfig.pfeiffer(reduction_factor=8, non_linearity="gelu"),
    }
    model = _model(configs={**configs, **HOULSBY})
    choices = ["n1", "a", "n3", "post", "g", "n2", "s", "n3", "f", "h2", "h1"]
    inputs = _inputs(len(choices))
    with model.inference_cache() if cached else contextlib.nullcontext():
        out = model(**inputs, adapter_names=choices)
    for row, choice in enumerate(choices):
        alone = _alone(model, inputs, row, choice, None).last_hidden_state[0]
        assert_close(out.last_hidden_state[row], alone, label=f"row {row} {choice}")


def test_hidden_states_of_each_example_without_head():
    """No head: the encoder's output per example (every layer's hidden states) as it alone."""
    model = _model()
    choices = ["b", "h1", None, "f"]
    inputs = _inputs(len(choices))
    out = model(**inputs, adapter_names=choices, output_hidden_states=True)
    for row, choice in enumerate(choices):
        alone = _alone(model, inputs, row, choice, None, output_hidden_states=True)
        assert_close(out.last_hidden_state[row], alone.last_hidden_state[0], label=f"row {row}")
        for layer, states in enumerate(out.hidden_states):
            assert_close(states[row], alone.hidden_states[layer][0], label=f"row {row} layer {layer}")


@pytest.mark.parametrize("model_type", ["llama", "gpt2"])
def test_decoders_route_each_example(model_type):
    """Pre-norm decoder blocks (the residual taken from the norm in front) and GPT-2's blocks."""
    model = af.wrap(tiny_decoder(model_type, dtype=torch.float64))
    for name in ("a", "b", "c"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
        _randomised(model, name)
    model.add_fusion("f", ["a", "b"])
    model.eval()
    choices = ["a", "c", None, "f", "b"]
    inputs = tiny_decoder_inputs(model_type, batch=len(choices))
    out = model(**inputs, adapter_names=choices)
    for row, choice in enumerate(choices):
        assert_close(out.logits[row], _alone(model, inputs, row, choice, None).logits[0], label=f"row {row}")


def test_an_encoder_decoder_step_on_encoder_outputs_routes_each_example():
    """A decoder step given the encoder's outputs (no input_ids, as generate() makes it) routes each example as the
    full forward does (it raised a KeyError looking for input_ids or inputs_embeds)."""
    model = af.wrap(tiny_decoder("t5", dtype=torch.float64))
    model.add_adapter("a", "pfeiffer")
    randomise_pieces(model, 1, std=0.5)
    model.eval()
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(5, 100, (2, 6), generator=generator)
    decoder_ids = torch.randint(5, 100, (2, 4), generator=generator)
    mask = torch.ones_like(ids)
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids, adapter_names=["a", None])
        encoded = (full.encoder_last_hidden_state,)
        routed = model(
            encoder_outputs=encoded, attention_mask=mask, decoder_input_ids=decoder_ids, adapter_names=["a", None]
        )
    assert_close(routed.logits, full.logits, dtype=torch.float64)


def test_heads_of_different_sizes_give_logits_per_example_and_the_mean_loss():
    model = _model()
    choices, heads = ["a", "b", "f", None], ["two", "three", "three", "two"]
    inputs, labels = _inputs(4), torch.tensor([1, 2, 0, 1])
    out = model(**inputs, adapter_names=choices, head_names=heads, labels=labels)
    assert out.logits is None and len(out.row_logits) == 4
    losses = []
    for row, (choice, head) in enumerate(zip(choices, heads, strict=True)):
        alone = _alone(model, inputs, row, choice, head).logits[0]
        assert_close(out.row_logits[row], alone, label=f"row {row}")
        losses.append(torch.nn.functional.cross_entropy(alone[None], labels[row : row + 1]))
    assert_close(out.loss, torch.stack(losses).mean())


def test_gradients_reach_each_examples_adapter():
    """Training through routing: each adapter's gradient is the one of its own examples' loss."""
    model = _model(configs=PFEIFFER)
    for parameter in [*model.adapter_parameters("a"), *model.adapter_parameters("b")]:
        parameter.requires_grad_(True)
    inputs, labels = _inputs(4), torch.tensor([1, 0, 1, 1])
    model.activate(head="two")
    routed = model(**inputs, adapter_names=["a", "b", "b", "a"], labels=labels)
    routed.loss.backward()
    got = {name: [p.grad.clone() for p in model.adapter_parameters(name)] for name in ("a", "b")}
    model.zero_grad()
    total = 0
    for name, rows in (("a", [0, 3]), ("b", [1, 2])):
        with model.activated(adapter=name, head="two"):
            part = {key: value[rows] for key, value in inputs.items()}
            total = total + model(**part, labels=labels[rows]).loss * len(rows) / 4
    total.backward()
    for name in ("a", "b"):
        for mine, reference in zip(got[name], model.adapter_parameters(name), strict=True):
            assert_close(mine, reference.grad, label=name)


@pytest.mark.parametrize("model_type", ["bert", "llama"])
@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_groups_without_plain_rows(model_type, grad):
    """Every row routed, in two kinds of group or more (Pfeiffer adapters, Houlsby adapters, a fusion), so no row
    takes the plain sub-layer's output: the groups fill a new tensor, in place at inference and out of place while
    gradients flow, where each adapter's and the fusion's gradient is still the one of its own examples' loss."""
    if model_type == "bert":
        model = _model(configs={**PFEIFFER, **HOULSBY})
        choices = ["a", "h1", "f", "b", "h2", "a"]
        inputs = _inputs(len(choices))
    else:
        model = af.wrap(tiny_decoder(model_type, dtype=torch.float64))
        for name in ("a", "b", "h1"):
            model.add_adapter(name, HOULSBY[name] if name in HOULSBY else af.AdapterConfig.pfeiffer(reduction_factor=4))
            _randomised(model, name)
        model.add_fusion("f", ["a", "b"], af.FusionConfig.dynamic(value_init_noise=0.05))
        model.add_head("two", af.ClassificationHead(num_labels=2, pooling="last"))
        model.eval()
        choices = ["a", "h1", "f", "b", "a"]
        inputs = tiny_decoder_inputs(model_type, batch=len(choices))
    model.activate(head="two")
    labels = torch.tensor([1, 0, 1, 1, 0, 1][: len(choices)])
    trained = [*model.fusion_parameters("f"), *model.adapter_parameters("a"), *model.adapter_parameters("h1")]
    for parameter in trained:
        parameter.requires_grad_(grad)
    with torch.set_grad_enabled(grad):
        out = model(**inputs, adapter_names=choices, labels=labels)
    references = []
    for row, choice in enumerate(choices):
        alone = _alone(model, inputs, row, choice, "two", labels=labels[row : row + 1])
        assert_close(out.logits[row], alone.logits[0], label=f"row {row} {choice}")
        references.append(alone.loss)
    if not grad:
        return
    out.loss.backward()
    got = [parameter.grad.clone() for parameter in trained]
    model.zero_grad()
    torch.stack(references).mean().backward()
    for mine, parameter in zip(got, trained, strict=True):
        assert_close(mine, parameter.grad)


class _CountBatchedMatmuls(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.baddbmm, torch.bmm, torch.Tensor.baddbmm):
            self.count += 1
        return func(*args, **(kwargs or {}))


def test_one_gathered_matmul_each_way_per_site_whatever_the_number_of_adapters():
    """Eight distinct adapters (and a plain row) cost the same batched matmuls as two: one down and one up per site."""
    configs = {f"x{i}": af.AdapterConfig.pfeiffer(reduction_factor=8) for i in range(8)}
    model = _model(configs={**configs, "a": configs["x0"], "s": configs["x1"]})
    counts = {}
    for names in (["x0", "x1"], list(configs)):
        choices = [*names, None]
        with _CountBatchedMatmuls() as counter, torch.no_grad():
            model(**_inputs(len(choices)), adapter_names=choices)
        counts[len(names)] = counter.count
    assert counts[2] == counts[8] == 2 * len(model.sites_with_adapter("x0"))


def test_one_choice_for_every_row_runs_as_activated():
    model = _model()
    inputs = _inputs(3)
    with model.activated(fusion="f", head="two"):
        expected = model(**inputs).logits
    model.activate(head="two")
    assert torch.equal(model(**inputs, adapter_names=["f"] * 3).logits, expected)


def test_multiple_choice_head_routes_whole_examples():
    model = _model(configs=PFEIFFER)
    model.add_head("mc", af.MultipleChoiceHead())
    model.activate(head="mc")
    inputs = {key: value.view(2, 2, -1) for key, value in _inputs(4).items()}
    out = model(**inputs, adapter_names=["b", "a"])
    for row, choice in enumerate(["b", "a"]):
        assert_close(out.logits[row], _alone(model, inputs, row, choice, "mc").logits[0], label=f"example {row}")


def test_a_wrapped_multiple_choice_model_routes_whole_examples():
    """BertForMultipleChoice flattens [batch, choices, seq] itself: each example's choice runs all its choices (the
    rows were matched to examples one to one, so examples ran other examples' adapters, silently)."""
    model = af.wrap(transformers.BertForMultipleChoice(tiny_config("bert")).double().eval())
    for name in ("a", "b"):
        model.add_adapter(name, PFEIFFER[name])
        _randomised(model, name)
    inputs = {key: value.view(2, 2, -1) for key, value in _inputs(4).items()}
    labels = torch.tensor([1, 0])
    out = model(**inputs, labels=labels, adapter_names=["b", None])
    rows = [_alone(model, {**inputs, "labels": labels}, row, choice, None) for row, choice in enumerate(["b", None])]
    for row, alone in enumerate(rows):
        assert_close(out.logits[row], alone.logits[0], label=f"example {row}")
    assert_close(out.loss, (rows[0].loss + rows[1].loss) / 2, label="the model's own loss")


# ---- refusals --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "names, error, words",
    [
        (["a"], af.ConfigError, ("1 entries", "batch of 3")),
        ("a", af.ConfigError, ("adapter_names='a'", "list")),
        (["a", "zz", None], af.NameNotFoundError, ("adapter_names[1]", "'zz'", "'a'", "'f'")),
        (["a", 3, None], af.ConfigError, ("adapter_names[1]", "int")),
        (["a", {"fusion": "a"}, None], af.NameNotFoundError, ("'a'",)),
    ],
)
def test_bad_adapter_names_are_refused(names, error, words):
    model = _model(configs=PFEIFFER)
    with pytest.raises(error) as caught:
        model(**_inputs(3), adapter_names=names)
    for word in words:
        assert word in str(caught.value)


def test_a_name_of_both_an_adapter_and_a_fusion_must_say_which():
    model = _model(configs=PFEIFFER)
    model.add_fusion("a", ["a", "b"])
    with pytest.raises(af.ConfigError, match="both an adapter and a fusion"):
        model(**_inputs(2), adapter_names=["a", None])
    out = model(**_inputs(2), adapter_names=[{"fusion": "a"}, {"adapter": "a"}])
    assert_close(out.last_hidden_state[0], _alone(model, _inputs(2), 0, "a", None).last_hidden_state[0])
    with model.activated(adapter="a"):
        alone = model(**{key: value[1:] for key, value in _inputs(2).items()})
    assert_close(out.last_hidden_state[1], alone.last_hidden_state[0])


def test_bad_head_names_and_fusion_attentions_are_refused():
    model = _model(configs=PFEIFFER)
    with pytest.raises(af.NameNotFoundError, match="nope"):
        model(**_inputs(2), adapter_names=["a", "b"], head_names=["two", "nope"])
    with pytest.raises(af.ConfigError, match="head_names has 1 entries"):
        model(**_inputs(2), head_names=["two"])
    with pytest.raises(af.ConfigError, match="output_fusion_attentions"):
        model(**_inputs(2), adapter_names=["f", "a"], output_fusion_attentions=True)
    with pytest.raises(af.ConfigError, match="not supported by forward_parallel"):
        model.forward_parallel("f", heads={"a": "two", "s": "two"}, fusion_head="two", **_inputs(2), head_names=["x"])


def test_unknown_keyword_of_a_model_passing_kwargs_on_is_refused():
    """GPT-2's forward hands an untyped **kwargs to its attention: a typo was swallowed there."""
    model = af.wrap(tiny_decoder("gpt2"))
    inputs = tiny_decoder_inputs("gpt2")
    with pytest.raises(af.ConfigError, match="takes no 'use_cahce'"):
        model(**inputs, use_cahce=False)
    model(**inputs, use_cache=False, output_attentions=True)  # transformers' own keywords still pass
