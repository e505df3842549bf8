"""Bad-input cases at one boundary, the files of runs and stores that must outlive a later run: an AdapterStore
and a run's encoder_key name an encoder by the last two parts of its path, so another encoder whose path ends alike
(/a/models/bert, /b/models/bert) lands on the first one's store entries, which it must never replace, and on its
interrupted runs, which it must not resume (and must say why: another encoder, not other weights at its path)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import datasets
import transformers

import adapterfusion as af
from adapterfusion.demo import demo_data_dir
from adapterfusion.training import AdapterStore, TrainingError
from catalogue import Action, BadInput, cli

B = BadInput
GROUP = "silent acceptances"  # an earlier result replaced without a word (data loss)
COLLISION = ("holds the adapter of another encoder", "last two parts of its path", "store of their own")


def _encoder_at(path: Path, seed: int) -> af.AdaptedModel:
    """A tiny random BERT (weights from `seed`) saved with the shipped tokenizer at `path`, wrapped."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
    config = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        vocab_size=tokenizer.vocab_size, max_position_embeddings=512,
    )  # fmt: skip
    transformers.set_seed(seed)
    transformers.BertModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return af.wrap(transformers.AutoModel.from_pretrained(path))


def _stored_for_a(folder: Path) -> AdapterStore:
    """The store `folder/store` holding the rte st-a adapter (seed 1) of the encoder at folder/a/models/bert."""
    model = _encoder_at(folder / "a" / "models" / "bert", seed=0)
    model.add_adapter("rte", af.AdapterConfig.pfeiffer(reduction_factor=4))
    store = AdapterStore(folder / "store")
    store.put_model(model, "rte", None, str(folder / "a" / "models" / "bert"), "rte", "st-a", 1)
    return store


def _put_model_of_b(folder: Path) -> Action:
    store = _stored_for_a(folder)
    other = _encoder_at(folder / "b" / "models" / "bert", seed=1)
    other.add_adapter("rte", af.AdapterConfig.pfeiffer(reduction_factor=4))
    encoder = str(folder / "b" / "models" / "bert")
    return lambda: store.put_model(other, "rte", None, encoder, "rte", "st-a", 1, overwrite=True)


def _train_adapter_of_b(folder: Path) -> Action:
    """train-adapter of encoder b, refused once b's weights are loaded (its data is tokenised by then): the progress
    bars of that work are switched off, and nothing is truncated (no notice), so stderr holds the error line alone."""
    _stored_for_a(folder)
    _encoder_at(folder / "b" / "models" / "bert", seed=1)
    argv = ["--encoder", str(folder / "b" / "models" / "bert"), "--store", str(folder / "store"), "--overwrite"]

    def action() -> str:
        datasets.disable_progress_bars()
        transformers.utils.logging.disable_progress_bar()
        try:
            return cli(
                "train-adapter", "--task", "rte", "--seed", "1", "--data-dir", str(demo_data_dir()), "--output-dir",
                str(folder / "runs"), "--max-steps", "1", "--max-examples", "16", "--max-length", "512", *argv,
            )  # fmt: skip
        finally:
            datasets.enable_progress_bars()
            transformers.utils.logging.enable_progress_bar()

    return action


def _resume_on_b(folder: Path) -> Action:
    """An rte st-a run on <dir>/a/models/bert cut short after its checkpoint (its metrics.json removed, as a kill
    would leave it), then train(..., resume=True) on <dir>/b/models/bert (other weights, the same encoder_key)."""
    _encoder_at(folder / "a" / "models" / "bert", seed=0)
    _encoder_at(folder / "b" / "models" / "bert", seed=1)
    settings = {"max_steps": 1, "batch_size": 8, "max_length": 32, "patience": None, "keep_checkpoints": True}
    common = dict(output_dir=folder / "runs", data_dir=demo_data_dir(), max_examples=16, training_config=settings)
    run = af.training.train("rte", "st-a", encoder=str(folder / "a" / "models" / "bert"), **common)
    run.metrics_path.unlink()
    other = str(folder / "b" / "models" / "bert")
    return lambda: af.training.train("rte", "st-a", encoder=other, resume=True, **common)


def _case(id: str, tried: str, prepare: Callable[[Path], Action], cli: bool = False) -> BadInput:
    return B(id, GROUP, tried, TrainingError, COLLISION, prepare, cli=cli)


CASES: tuple[BadInput, ...] = (
    _case(
        "store-put-another-encoder-same-key",
        "AdapterStore.put_model(..., overwrite=True) of encoder /b/models/bert into a store holding the same task's "
        "adapter of /a/models/bert (other weights, same folder name models--bert; replaced it without a word)",
        _put_model_of_b,
    ),
    _case(
        "train-adapter-another-encoder-same-key",
        "adapterfusion train-adapter --encoder <dir>/b/models/bert --store S --overwrite, where S holds the rte "
        "adapter of <dir>/a/models/bert (other weights, same folder name models--bert; trained, then replaced it)",
        _train_adapter_of_b,
        cli=True,
    ),
    B(
        "train-resume-another-encoder-same-key",
        GROUP,
        "train(..., resume=True) of an interrupted run on <dir>/a/models/bert, with <dir>/b/models/bert (other "
        "weights, same encoder_key; said that other weights were saved at the encoder's path)",
        TrainingError,
        ("cannot resume", "the encoder was", "a/models/bert'", "b/models/bert'", "checkpoints"),
        _resume_on_b,
    ),
)
