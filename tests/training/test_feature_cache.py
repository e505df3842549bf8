"""Head-only training on cached features: same outputs and losses as the full model, the encoder run once."""

import json

import pytest
import torch
import transformers
from torch.utils.data import DataLoader

import adapterfusion as af
from adapterfusion.tasks import encode_task, load_task_data
from adapterfusion.tasks.collator import TaskCollator
from adapterfusion.tasks.registry import resolve_task
from adapterfusion.training import train
from adapterfusion.training.feature_cache import HeadOnFeatures, pooled_features
from adapterfusion.training.setups import head_config_for
from tiny_decoders import tiny_decoder


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_cached_features_give_the_full_models_logits_and_loss(tiny_encoder_dir, demo_data_dir, pooling):
    _check_cached_features(tiny_encoder_dir, demo_data_dir, "rte", pooling)


def test_cached_features_of_a_multiple_choice_task(tiny_encoder_dir, data_dir):
    _check_cached_features(tiny_encoder_dir, data_dir, "winogrande", "mean")


@pytest.mark.parametrize(("model_type", "pooling"), [("t5", "mean"), ("bart", "last"), ("llama", "last")])
def test_cached_features_of_decoders_and_encoder_decoders(tiny_encoder_dir, demo_data_dir, model_type, pooling):
    """The features are the head's own forward path: an encoder-decoder's decoder runs on the shifted input (T5's
    cached head training failed inside transformers without it)."""
    _check_cached_features(tiny_encoder_dir, demo_data_dir, "rte", pooling, model_type)


def _check_cached_features(tiny_encoder_dir, data_dir, task, pooling, model_type="bert"):
    """In float64 and eval mode, head(cached pooled features) == the AdaptedModel's own forward."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_encoder_dir)
    if model_type != "bert":  # as these models' own tokenizers: no token_type_ids
        tokenizer.model_input_names = ["input_ids", "attention_mask"]
    data, _ = load_task_data(task, data_dir, 1, max_examples={"train": 8, "validation": 8})
    encoded, _ = encode_task(task, data, tokenizer, 32)
    if model_type == "bert":
        model = af.wrap(transformers.AutoModel.from_pretrained(tiny_encoder_dir)).double()
    else:
        model = af.wrap(tiny_decoder(model_type, vocab_size=len(tokenizer), dtype=torch.float64))
    model.add_head("t", head_config_for(resolve_task(task), pooling))
    model.double().activate(head="t")
    batches = list(DataLoader(encoded["validation"], batch_size=3, collate_fn=TaskCollator(tokenizer)))
    features, labels = pooled_features(model, "t", batches)
    model.eval()
    with torch.no_grad():
        expected = [model(**batch) for batch in batches]
        cached = HeadOnFeatures(model.heads["t"]).eval()(features, labels)
    expected_logits = torch.cat([out.logits for out in expected])
    torch.testing.assert_close(cached.logits, expected_logits, rtol=0, atol=1e-12)
    expected_loss = sum(out.task_loss * len(b["labels"]) for out, b in zip(expected, batches, strict=True)) / len(
        labels
    )
    torch.testing.assert_close(cached.task_loss, expected_loss, rtol=0, atol=1e-12)


@pytest.mark.slow
def test_head_setup_runs_the_encoder_once_per_example(tmp_path, tiny_encoder_dir, demo_data_dir, monkeypatch):
    calls = []
    original = transformers.BertModel.forward

    def counting(self, *args, **kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        calls.append(ids.shape[0])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(transformers.BertModel, "forward", counting)
    common = dict(
        seed=1, encoder=tiny_encoder_dir, data_dir=demo_data_dir, max_examples={"train": 32, "validation": 16}
    )
    config = dict(epochs=3, batch_size=8, max_length=32, patience=None, learning_rate=1e-2)
    cached = train("rte", "head", output_dir=tmp_path / "cached", training_config=config, **common)
    cached_examples = sum(calls)
    calls.clear()
    plain = train(
        "rte", "head", output_dir=tmp_path / "plain", training_config={**config, "cache_features": False}, **common
    )
    # cached: train + dev once (48); plain: 3 epochs of train (96) and 3 dev evaluations (48; the best epoch's
    # metrics are read from its logged evaluation, not evaluated again)
    assert cached_examples == 48 and sum(calls) == 3 * 32 + 3 * 16
    for run in (cached, plain):
        metrics = json.loads((run.run_dir / "metrics.json").read_text())
        assert len(metrics["epochs"]) == 3 and metrics["global_step"] == 12
        assert (run.run_dir / "head" / "head.safetensors").is_file()
    # both learn the same head from the same start; only the encoder's dropout (off when cached) differs
    assert abs(cached.metrics["loss"] - plain.metrics["loss"]) < 0.2


def test_length_grouping_uses_the_longest_sequence_of_each_example(tmp_path):
    import datasets
    from transformers.trainer_pt_utils import LengthGroupedSampler

    from adapterfusion.training.batching import with_lengths
    from adapterfusion.training.config import TrainingConfig
    from adapterfusion.training.trainer import AdaptedTrainer, training_arguments

    mc = datasets.Dataset.from_dict({"input_ids": [[[1, 2], [1, 2, 3, 4]], [[5], [6]]], "label": [0, 1]})
    assert with_lengths(mc)["length"] == [4, 1]
    single = datasets.Dataset.from_dict({"input_ids": [[1] * n for n in (5, 1, 3)], "label": [0, 1, 0]})
    assert with_lengths(single)["length"] == [5, 1, 3]
    args = training_arguments(TrainingConfig(group_by_length=True), tmp_path, "accuracy")
    trainer = AdaptedTrainer(
        model=torch.nn.Linear(1, 1), args=args, train_dataset=with_lengths(single), eval_dataset=single
    )
    assert isinstance(trainer._get_train_sampler(), LengthGroupedSampler)
    plain = AdaptedTrainer(
        model=torch.nn.Linear(1, 1),
        args=training_arguments(TrainingConfig(), tmp_path, "accuracy"),
        train_dataset=single,
        eval_dataset=single,
    )
    assert not isinstance(plain._get_train_sampler(), LengthGroupedSampler)
