"""train() on decoders: a decoder folder as `encoder`, classification through a head that pools the last
non-padding token, stage 1 into the store and AdapterFusion over stored decoder adapters."""

from __future__ import annotations

import pytest
import torch

from adapterfusion.training import AdapterStore, train

FAST = dict(max_steps=3, batch_size=8, max_length=48, learning_rate=1e-2, logging_steps=1, patience=None)
SLICE = {"train": 24, "validation": 16}


@pytest.mark.slow
def test_st_a_and_fusion_train_on_a_decoder(tiny_decoder_dir, demo_data_dir, tmp_path) -> None:
    store = AdapterStore(tmp_path / "store")
    common = dict(encoder=tiny_decoder_dir, data_dir=demo_data_dir, output_dir=tmp_path / "runs", store=store)
    for task in ("rte", "sst2"):
        result = train(task, "st-a", seed=1, training_config=FAST, max_examples=SLICE, **common)
        assert 0 <= result.metrics["accuracy"] <= 1 and len(result.epoch_metrics) >= 1
        head = result.model.get_head(task)
        assert head.config.pooling == "last"  # a decoder's default: what it has read whole
    before = {k: v.clone() for k, v in result.model.model.state_dict().items() if ".adapters." not in k}
    fused = train(
        "rte",
        "fusion-st-a",
        seed=1,
        training_config=FAST,
        max_examples=SLICE,
        setup_options={"sources": ["sst2"]},
        **common,
    )
    model = fused.model
    assert model.architecture.causal and model.fusion_setup("fusion_rte").adapters == ("sst2", "rte")
    after = {k: v for k, v in model.model.state_dict().items() if k in before}
    assert all(torch.equal(before[k], after[k]) for k in before)  # the decoder stayed frozen
    assert (tmp_path / "runs" / "rte" / "fusion-st-a" / "seed-1" / "fusion").is_dir()


@pytest.mark.slow
def test_an_experiment_file_takes_a_decoder_as_its_encoder(tiny_decoder_dir, tmp_path) -> None:
    from adapterfusion.experiments import run_experiment
    from tiny_experiments import tiny_experiment

    summary = run_experiment(tiny_experiment(tiny_decoder_dir, tmp_path / "out"), progress=False)
    assert summary.ok and len(summary.ran) == 6, summary  # head, st-a and fusion-st-a on two tasks
    assert (tmp_path / "out" / "report" / "tables.md").is_file()


@pytest.mark.slow
def test_mt_a_trains_on_a_decoder(tiny_decoder_dir, demo_data_dir, tmp_path) -> None:
    from adapterfusion.training import train_multitask

    result = train_multitask(
        ["rte", "sst2"],
        seed=1,
        encoder=tiny_decoder_dir,
        data_dir=demo_data_dir,
        output_dir=tmp_path,
        training_config=FAST,
        max_examples=SLICE,
    )
    model = result.model
    assert model.architecture.causal and {model.get_head(t).config.pooling for t in ("rte", "sst2")} == {"last"}


def test_a_decoder_saved_with_a_bert_tokenizer_trains_without_token_type_ids(demo_data_dir, tmp_path) -> None:
    """The tokenizer makes token_type_ids, which a Llama's forward takes none of: every classification run failed at
    its first step ('LlamaModel.forward takes no token_type_ids'), leaving an unfinished run folder. Its tokenizer,
    as every recipe loads it, now makes only what the model takes; a BERT keeps its segment ids."""
    import transformers

    import adapterfusion as af
    from adapterfusion.encoder_loading import load_tokenizer
    from adapterfusion.encoders import resolve_encoder
    from tiny_decoders import tiny_decoder

    tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
    assert "token_type_ids" in tokenizer("a", "b")
    tiny_decoder("llama", vocab_size=tokenizer.vocab_size).save_pretrained(tmp_path / "llama")
    tokenizer.save_pretrained(tmp_path / "llama")
    assert set(load_tokenizer(resolve_encoder(tmp_path / "llama"))("a", "b")) == {"input_ids", "attention_mask"}
    assert "token_type_ids" in load_tokenizer(resolve_encoder(af.default_encoder_path()))("a", "b")
    result = train(
        "rte",
        "st-a",
        encoder=tmp_path / "llama",
        data_dir=demo_data_dir,
        output_dir=tmp_path / "runs",
        training_config=dict(FAST, max_steps=1),
        max_examples={"train": 8, "validation": 4},
    )
    assert (result.run_dir / "metrics.json").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["llama", "t5"])
def test_a_decoder_run_is_evaluated_and_pruned_with_the_tokenizer_it_trained_with(
    model_type, demo_data_dir, tmp_path
) -> None:
    """rebuild_run loaded the tokenizer as transformers gives it, not as training loads it: a decoder or T5 saved
    with a BERT tokenizer trained, and then `adapterfusion evaluate` and `prune` of the run failed ('LlamaModel.forward
    takes no token_type_ids'); a decoder tokenizer without a pad token could not pad the dev batches. Now scored as
    training scored it."""
    import json

    import transformers

    import adapterfusion as af
    from adapterfusion.evaluation import evaluate_run
    from adapterfusion.pruning import prune_fusion
    from tiny_decoders import tiny_decoder

    tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
    tokenizer.eos_token, tokenizer.pad_token = "[SEP]", None  # as decoders' tokenizers are: an eos, no pad
    tiny_decoder(model_type, vocab_size=len(tokenizer)).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    common = dict(
        encoder=tmp_path / "model",
        data_dir=demo_data_dir,
        output_dir=tmp_path / "runs",
        store=AdapterStore(tmp_path / "store"),
        training_config=dict(FAST, max_steps=1),
        max_examples={"train": 8, "validation": 6},
    )
    for task in ("rte", "cb"):
        train(task, "st-a", **common)
    fused = train("rte", "fusion-st-a", setup_options={"sources": ["cb"]}, **common)
    recorded = json.loads(fused.metrics_path.read_text())["best"]
    result = evaluate_run(fused.run_dir)
    assert result["metrics"]["accuracy"] == recorded["accuracy"]
    assert abs(result["metrics"]["loss"] - recorded["loss"]) < 1e-5
    pruned = prune_fusion(fused.run_dir, keep=1, repeats=1, timing_batches=1)
    assert len(pruned.after.adapters) == 1 and pruned.before.metrics["accuracy"] == recorded["accuracy"]
