"""Span ablation (experiments/span_ablation.py): each span's evaluation against an independent computation, a model
whose adapter has its up-projection zeroed in exactly those layers (a zero bottleneck output leaves a site as the
bare encoder computes it), on a tiny 4-layer BERT with random adapter weights; the spans, the batching and the
record's round trip."""

from __future__ import annotations

import copy

import pytest
import torch
import transformers
from datasets import Dataset

import adapterfusion as af
from adapterfusion.errors import ConfigError
from adapterfusion.experiments.span_ablation import SpanAblation, ablate_spans, layer_spans, length_sorted_batches
from adapterfusion.scoring import predict, score
from adapterfusion.tasks.registry import get_task
from tiny_models import VOCAB, randomise, tiny_encoder

LAYERS = 4


def _model() -> af.AdaptedModel:
    model = af.wrap(tiny_encoder(num_hidden_layers=LAYERS))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.add_head("a", af.ClassificationHead(num_labels=2))
    with torch.no_grad():
        for parameter in model.adapter_parameters("a"):
            parameter.normal_(0.0, 0.5)  # a strong adapter, so removing it from a layer changes the logits
    randomise(model.heads["a"], std=0.5)
    return model.eval()


def _batches(count: int = 3, size: int = 8, seq: int = 9) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(3)
    out = []
    for _ in range(count):
        mask = torch.ones(size, seq, dtype=torch.long)
        mask[::3, -3:] = 0
        out.append(
            {
                "input_ids": torch.randint(5, VOCAB, (size, seq), generator=generator),
                "attention_mask": mask,
                "labels": torch.randint(0, 2, (size,), generator=generator),
            }
        )
    return out


def _zeroed(model: af.AdaptedModel, layers: range) -> af.AdaptedModel:
    """A copy whose adapter outputs nothing in `layers`: the independent reference for skipping them."""
    copied = copy.deepcopy(model)
    with torch.no_grad():
        for site in copied.sites_with_adapter("a"):
            if site.layer_index in layers:
                site.adapters["a"].up.weight.zero_()
                site.adapters["a"].up.bias.zero_()
    return copied


def test_layer_spans_are_every_contiguous_span_once():
    assert layer_spans(3) == [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)]
    spans = layer_spans(12)
    assert len(spans) == 12 * 13 // 2 == len(set(spans))
    assert all(0 <= i <= j < 12 for i, j in spans)
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ConfigError, match="num_layers"):
            layer_spans(bad)


def test_each_span_equals_a_model_with_exactly_those_layers_zeroed():
    model, task, batches = _model(), get_task("rte"), _batches()
    result = ablate_spans(model, task, "a", "a", batches)
    assert set(result.spans) == set(layer_spans(LAYERS)) and result.num_layers == LAYERS
    assert result.metric == "accuracy" and result.examples == 24

    def reference(layers: range) -> dict[str, float]:
        copied = _zeroed(model, layers)
        copied.activate(adapter="a", head="a")
        return score(task, predict(copied, batches))

    for (i, j), metrics in [((-1, -1), result.baseline), *result.spans.items()]:
        expected = reference(range(i, j + 1)) if i >= 0 else reference(range(0))
        assert metrics["accuracy"] == expected["accuracy"], (i, j)
        assert metrics["loss"] == pytest.approx(expected["loss"], rel=1e-5, abs=1e-6), (i, j)
    losses = {round(m["loss"], 6) for m in result.spans.values()}
    assert len(losses) > LAYERS  # the spans do differ, so the comparison above could fail
    # the full span is the bare encoder under the head
    model.activate(adapter=None, head="a")
    bare = score(task, predict(model, batches))
    assert result.spans[(0, LAYERS - 1)]["loss"] == pytest.approx(bare["loss"], rel=1e-5)
    assert model.skip_layers == ()  # the evaluations leave the model's state as it was


def test_drop_is_the_span_score_minus_the_baseline_in_points():
    result = SpanAblation(
        task="rte",
        metric="accuracy",
        num_layers=2,
        examples=10,
        baseline={"accuracy": 0.8},
        spans={(0, 0): {"accuracy": 0.7}, (0, 1): {"accuracy": 0.5}, (1, 1): {"accuracy": 0.8}},
    )
    assert result.drop(0, 0) == pytest.approx(-10.0)
    assert result.drop(0, 1) == pytest.approx(-30.0)
    assert result.drop(1, 1) == 0.0
    again = SpanAblation.from_dict(result.to_dict())
    assert again.spans == result.spans and again.baseline == result.baseline and again.num_layers == 2
    with pytest.raises(ConfigError, match="span-ablation"):
        SpanAblation.from_dict({"best": {"accuracy": 0.5}, "metric_for_best": "accuracy"})


def test_length_sorted_batches_keep_every_example_and_the_scores(tiny_encoder_dir):
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_encoder_dir)
    lengths = [7, 3, 12, 5, 5, 9, 4]
    dataset = Dataset.from_dict(
        {"input_ids": [[101] + [1000 + k] * (n - 2) + [102] for k, n in enumerate(lengths)], "label": [0, 1] * 3 + [0]}
    )
    batches, ordered = length_sorted_batches(dataset, tokenizer, 3)
    assert [len(b["input_ids"]) for b in batches] == [3, 3, 1]
    assert [len(row["input_ids"]) for row in ordered] == sorted(lengths)
    assert sorted(map(tuple, ordered["input_ids"])) == sorted(map(tuple, dataset["input_ids"]))
    labels = torch.cat([b["labels"] for b in batches]).tolist()
    assert labels == ordered["label"]  # each batch's labels are its own examples'
    with pytest.raises(ConfigError, match="batch_size"):
        length_sorted_batches(dataset, tokenizer, 0)


def test_unknown_adapter_or_metric_is_refused():
    model, task = _model(), get_task("rte")
    with pytest.raises(ConfigError, match="no adapter 'b'"):
        ablate_spans(model, task, "b", "a", _batches(1))
    with pytest.raises(ConfigError, match="not a metric"):
        ablate_spans(model, task, "a", "a", _batches(1), metric="f1")


def test_one_batch_in_place_of_the_batches_is_refused():
    """It was iterated as its keys: an AttributeError from inside predict."""
    with pytest.raises(ConfigError, match=r"predict takes an iterable of batches .* got one batch; pass \[batch\]"):
        ablate_spans(_model(), get_task("rte"), "a", "a", _batches(1)[0])


@pytest.mark.slow
def test_a_zoo_of_decoder_adapters_is_ablated_with_the_tokenizer_it_trained_with(demo_data_dir, tmp_path):
    """ablate_zoo loaded the tokenizer as transformers gives it: on a Llama saved with a BERT tokenizer it made
    token_type_ids, which the model's forward refuses, so a store of decoder adapters could not be ablated. Its
    baseline is now the trained run's own ablation baseline."""
    from adapterfusion.experiments.span_ablation import ablate_run, ablate_zoo
    from adapterfusion.training import train
    from tiny_decoders import tiny_decoder

    tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
    tiny_decoder("llama", vocab_size=len(tokenizer), num_hidden_layers=2).save_pretrained(tmp_path / "llama")
    tokenizer.save_pretrained(tmp_path / "llama")
    run = train(
        "rte",
        "st-a",
        encoder=tmp_path / "llama",
        data_dir=demo_data_dir,
        output_dir=tmp_path / "runs",
        store=tmp_path / "store",
        training_config={"max_steps": 1, "batch_size": 4, "max_length": 32, "patience": None},
        max_examples={"train": 8, "validation": 4},
    )
    zoo = ablate_zoo(
        "rte",
        zoo=tmp_path / "store",
        encoder=tmp_path / "llama",
        data_dir=demo_data_dir,
        max_examples=4,
        max_length=32,
        batch_size=4,
    )
    own = ablate_run(run.run_dir, max_examples=4, batch_size=4)
    assert zoo.num_layers == 2 and len(zoo.spans) == 3
    assert zoo.examples == own.examples == 4
    assert zoo.baseline["accuracy"] == own.baseline["accuracy"]
    assert abs(zoo.baseline["loss"] - own.baseline["loss"]) < 1e-5
