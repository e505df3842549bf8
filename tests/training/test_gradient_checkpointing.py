"""TrainingConfig.gradient_checkpointing: with every encoder layer recomputed in the backward pass (adapter sites and
fusions inside it), the gradients of the trained pieces are those of the plain backward, in float64 to the tight
tolerance, with dropout on, for every supported architecture; fit() turns it on for the run and off afterwards."""

import copy
import json

import pytest
import torch

import adapterfusion as af
from adapterfusion.training import TrainingError, train
from adapterfusion.training.callbacks import FusionStepCallback
from adapterfusion.training.gradient_checkpointing import checkpointed_activations
from tiny_decoders import randomise_pieces, tiny_decoder, tiny_decoder_inputs
from tiny_models import TINY_CONFIGS, randomise, tiny_encoder, tiny_inputs
from tolerances import assert_close


def _model(model_type: str, piece: str) -> af.AdaptedModel:
    model = af.wrap(tiny_encoder(model_type))
    # houlsby: both sites of each layer (without its LayerNorm copies, which not every architecture allows)
    config = (
        af.AdapterConfig.from_name("houlsby", reduction_factor=4, train_layer_norm=False)
        if piece == "adapter"
        else af.AdapterConfig.from_name("pfeiffer", reduction_factor=4)
    )
    for name in ("a", "b"):
        model.add_adapter(name, config)
    model.add_fusion("f", ["a", "b"])
    model.add_head("h", af.ClassificationHead(num_labels=2))
    randomise(model, std=0.1)  # no zero up-projection: every trained tensor gets a non-trivial gradient
    model.double()
    model.train_adapter("a", head="h") if piece == "adapter" else model.train_fusion("f", head="h")
    return model.train()


def _gradients_and_site_calls(model: af.AdaptedModel) -> tuple[dict[str, torch.Tensor], int]:
    calls = []
    handles = [site.register_forward_pre_hook(lambda *_: calls.append(1)) for site in model.sites]
    try:
        torch.manual_seed(7)  # the same dropout masks in both passes
        model(**tiny_inputs(batch=3, seq=9), labels=torch.tensor([0, 1, 1])).loss.backward()
    finally:
        for handle in handles:
            handle.remove()
    # The fusion's key bias adds the same score to every adapter, so the softmax cancels it: its gradient is exactly 0.
    gradients = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad and p.grad is not None}
    model.zero_grad(set_to_none=True)
    return gradients, len(calls)


@pytest.mark.slow
@pytest.mark.parametrize("piece", ["adapter", "fusion"])
@pytest.mark.parametrize("model_type", sorted(TINY_CONFIGS))
def test_checkpointed_gradients_equal_the_plain_ones(model_type, piece):
    model = _model(model_type, piece)
    if not model.model.supports_gradient_checkpointing:  # MPNet in transformers 5.x: a clear error, not a silent no-op
        with pytest.raises(TrainingError, match="does not support gradient checkpointing.*=False"):
            with checkpointed_activations(model):
                pass
        return
    plain, plain_calls = _gradients_and_site_calls(model)
    with checkpointed_activations(model):
        checkpointed, checkpointed_calls = _gradients_and_site_calls(model)
    again, _ = _gradients_and_site_calls(model)
    assert checkpointed_calls == 2 * plain_calls  # each site ran again in the backward pass
    assert plain.keys() == checkpointed.keys() and plain
    for name in plain:
        assert plain[name].abs().max() > 0 or name.endswith("key.bias"), name
        assert_close(checkpointed[name], plain[name], label=name)
        assert torch.equal(again[name], plain[name]), name  # switched off again: the plain pass, bit for bit
    assert not hasattr(model.model, "_require_grads_hook")


@pytest.mark.slow
def test_a_run_with_gradient_checkpointing_equals_the_plain_run(
    tmp_path, tiny_float64_encoder_dir, demo_data_dir, monkeypatch
):
    seen = []
    original = FusionStepCallback.on_step_begin

    def on_step_begin(self, args, state, control, **kwargs):
        seen.append(any(getattr(m, "gradient_checkpointing", False) for m in self.model.modules()))
        return original(self, args, state, control, **kwargs)

    monkeypatch.setattr(FusionStepCallback, "on_step_begin", on_step_begin)
    settings = dict(max_steps=3, batch_size=8, max_length=32, learning_rate=3e-3, logging_steps=1, patience=None)
    runs = {
        flag: train(
            "rte",
            "st-a",
            seed=2,
            encoder=tiny_float64_encoder_dir,
            data_dir=demo_data_dir,
            output_dir=tmp_path / str(flag),
            max_examples={"train": 24, "validation": 8},
            training_config={**settings, "gradient_checkpointing": flag},
        )
        for flag in (False, True)
    }
    assert seen == [False] * 3 + [True] * 3
    assert not any(getattr(m, "gradient_checkpointing", False) for m in runs[True].model.modules())
    losses = {
        flag: [e["loss"] for e in json.loads(r.metrics_path.read_text())["train_losses"]] for flag, r in runs.items()
    }
    assert_close(losses[True], losses[False], dtype=torch.float64, label="training losses")
    for (name, checkpointed), (_, plain) in zip(
        runs[True].model.named_parameters(), runs[False].model.named_parameters(), strict=True
    ):
        assert_close(checkpointed, plain, label=name)


def _routed_gradients(
    model_type: str, reentrant: bool | None, how: str, copied: bool = False
) -> tuple[float, dict[str, torch.Tensor]]:
    """Loss and gradients of two adapters trained in one call, row 0 on a and row 1 on b, through `how`: the layers
    that checkpointing recomputes in backward() must run each row's adapter again, not the model's active one."""
    model = af.wrap(tiny_decoder(model_type, dtype=torch.float64))
    for name in ("a", "b"):
        model.add_adapter(name, "pfeiffer")
    randomise_pieces(model, 1, std=0.5)
    model.train_adapter("a")
    model.train()
    for name, parameter in model.named_parameters():
        if ".adapters.b." in name:
            parameter.requires_grad_(True)
    if reentrant is not None:
        model.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    if copied:  # a copy of a model whose layers were wrapped: the copy's recompute replays the copy's state
        model(**tiny_decoder_inputs(model_type, 2, 7), adapter_names=["a", "b"])
        model = copy.deepcopy(model)
    inputs = tiny_decoder_inputs(model_type, 2, 7)
    labels = inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, -100)
    if how == "adapter_names":
        output = model(**inputs, labels=labels, adapter_names=["a", "b"])
    elif how == "batch_split":
        with model.activated(af.BatchSplit("a", "b", batch_sizes=[1, 1])):
            output = model(**inputs, labels=labels)
    else:  # activated for the call only: backward() runs after the block
        with model.activated(adapter="b"):
            output = model(**inputs, labels=labels)
    output.loss.backward()
    return output.loss.item(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("reentrant", [True, False])
@pytest.mark.parametrize(
    ("model_type", "how"), [("llama", "adapter_names"), ("gpt2", "batch_split"), ("llama", "block")]
)
def test_routed_and_block_calls_recompute_with_their_own_state(model_type: str, how: str, reentrant: bool) -> None:
    """(They gave other gradients silently with use_reentrant=True, up to 3e-2 off with adapter b's missing, and
    torch's CheckpointError with use_reentrant=False.)"""
    loss, expected = _routed_gradients(model_type, None, how)
    checkpointed_loss, gradients = _routed_gradients(model_type, reentrant, how, copied=how == "block")
    assert checkpointed_loss == pytest.approx(loss, rel=1e-12) and gradients.keys() == expected.keys()
    for name, gradient in gradients.items():
        assert_close(gradient, expected[name], dtype=torch.float64, label=name)


def test_forward_parallel_recomputes_its_routes() -> None:
    def gradients(reentrant: bool | None) -> dict[str, torch.Tensor]:
        model = _model("bert", "fusion")
        for name in ("a", "b"):
            model.add_head(name, af.ClassificationHead(num_labels=2))
        model.double()
        if reentrant is not None:
            model.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
        torch.manual_seed(7)
        output = model.forward_parallel("f", heads={"a": "a", "b": "b"}, fusion_head="h", **tiny_inputs(3, 7))
        (output.fusion_logits.sum() + sum(v.sum() for v in output.adapter_logits.values())).backward()
        return {n: p.grad for n, p in model.named_parameters() if p.grad is not None}

    expected = gradients(None)
    for reentrant in (True, False):
        got = gradients(reentrant)
        assert got.keys() == expected.keys()
        for name, gradient in got.items():
            assert_close(gradient, expected[name], dtype=torch.float64, label=name)
