"""Gradient accumulation: k micro-batches of b examples give the gradient of one batch of k·b (the mean loss).

transformers' Trainer leaves the division by k out when it believes the model normalises its loss by the number of
items in the whole accumulated batch, which it guesses from a `**kwargs` in the model's forward. AdaptedModel's
forward takes `**encoder_inputs` but returns a per-batch mean, so the Trainer must be told (accepts_loss_kwargs):
otherwise every accumulated gradient is k times too large, and max_grad_norm clips it differently."""

from __future__ import annotations

import torch
from transformers import TrainerCallback, TrainingArguments

import adapterfusion as af
from adapterfusion.training.trainer import AdaptedTrainer
from tiny_models import tiny_encoder, tiny_inputs


class _GradientRecorder(TrainerCallback):
    def __init__(self, model: af.AdaptedModel) -> None:
        self.model, self.gradients = model, []

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.gradients.append(
            {n: p.grad.detach().clone() for n, p in self.model.named_parameters() if p.grad is not None}
        )


def _first_step_gradients(tmp_path, accumulation: int, batch: int) -> dict[str, torch.Tensor]:
    model = af.wrap(tiny_encoder("bert", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0).double())
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.add_head("a", af.ClassificationHead(num_labels=2, dropout=0.0))
    model.double()
    model.train_adapter("a")
    inputs = tiny_inputs(batch=4, seq=6)
    rows = [
        {"input_ids": inputs["input_ids"][i], "attention_mask": inputs["attention_mask"][i], "labels": i % 2}
        for i in range(4)
    ]
    recorder = _GradientRecorder(model)
    args = TrainingArguments(
        output_dir=str(tmp_path / f"ga{accumulation}"),
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=accumulation,
        max_steps=1,
        max_grad_norm=1e9,  # no clipping: compare the raw accumulated gradients
        report_to=[],
        save_strategy="no",
        remove_unused_columns=False,
        label_names=["labels"],
        use_cpu=True,
    )
    AdaptedTrainer(model=model, args=args, train_dataset=rows, callbacks=[recorder]).train()
    assert len(recorder.gradients) == 1
    return recorder.gradients[0]


def test_two_accumulated_half_batches_give_the_gradient_of_the_whole_batch(tmp_path):
    whole = _first_step_gradients(tmp_path, accumulation=1, batch=4)
    accumulated = _first_step_gradients(tmp_path, accumulation=2, batch=2)
    assert whole.keys() == accumulated.keys() and whole
    for name in whole:
        torch.testing.assert_close(accumulated[name], whole[name], rtol=1e-10, atol=1e-12, msg=name)
