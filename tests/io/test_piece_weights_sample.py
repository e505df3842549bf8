"""A saved piece records a sample digest of the encoder's weights, and loading it into an encoder of the same
architecture and sizes but other weights (another checkpoint) warns: it was trained for the weights it was saved
from. The same weights (also reloaded from their files), files saved before the record, AdapterHub files and a
whole setup (warned once, by its own full digest) stay silent."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import adapterfusion as af
from adapterfusion.encoder_identity import encoder_sample_digest
from adapterfusion.piece import WEIGHTS_SAMPLE
from tiny_models import tiny_encoder


def _with_adapter(seed: int = 0) -> af.AdaptedModel:
    model = af.wrap(tiny_encoder(seed=seed))
    model.add_adapter("a")
    return model


def _load_quietly(model: af.AdaptedModel, folder: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", af.BaseModelMismatchWarning)
        model.load_adapter(folder)


def test_an_adapter_loaded_into_another_checkpoint_warns(tmp_path: Path) -> None:
    _with_adapter(seed=0).save_adapter("a", tmp_path / "a")
    recorded = json.loads(next((tmp_path / "a").glob("*.json")).read_text())["base_model"][WEIGHTS_SAMPLE]
    assert recorded == encoder_sample_digest(af.wrap(tiny_encoder(seed=0)))
    with pytest.warns(af.BaseModelMismatchWarning, match="other weights than this one"):
        af.wrap(tiny_encoder(seed=1)).load_adapter(tmp_path / "a")


def test_the_same_weights_load_silently_also_from_their_files(tmp_path: Path) -> None:
    _with_adapter(seed=0).save_adapter("a", tmp_path / "a")
    _load_quietly(af.wrap(tiny_encoder(seed=0)), tmp_path / "a")
    tiny_encoder(seed=0).save_pretrained(tmp_path / "encoder")
    reloaded = type(tiny_encoder()).from_pretrained(tmp_path / "encoder")
    _load_quietly(af.wrap(reloaded), tmp_path / "a")


def test_one_changed_weight_value_changes_the_sample_only_where_sampled() -> None:
    """The digest reads a sample of the layers' weights: a change to a sampled value is seen (a first element
    always is)."""
    model = af.wrap(tiny_encoder(seed=0))
    before = encoder_sample_digest(model)
    with torch.no_grad():
        next(iter(model.encoder_layers().parameters())).view(-1)[0] += 1.0
    assert encoder_sample_digest(model) != before


def test_weights_a_checkpoint_lacks_do_not_count(tmp_path: Path) -> None:
    """roberta-base has no pooler weights: AutoModel draws a new pooler on every load. Two loads of the same
    checkpoint differ there and nowhere else, and must not warn."""
    _with_adapter(seed=0).save_adapter("a", tmp_path / "a")
    encoder = tiny_encoder(seed=0)
    torch.manual_seed(123)
    encoder.pooler.dense.reset_parameters()
    _load_quietly(af.wrap(encoder), tmp_path / "a")


def test_files_saved_before_the_record_load_silently(tmp_path: Path) -> None:
    _with_adapter(seed=0).save_adapter("a", tmp_path / "a")
    config_file = next((tmp_path / "a").glob("*.json"))
    document = json.loads(config_file.read_text())
    del document["base_model"][WEIGHTS_SAMPLE]
    config_file.write_text(json.dumps(document))
    _load_quietly(af.wrap(tiny_encoder(seed=1)), tmp_path / "a")


def test_a_setup_on_other_weights_warns_once(tmp_path: Path) -> None:
    model = _with_adapter(seed=0)
    model.save_pretrained(tmp_path / "setup")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        af.AdaptedModel.from_pretrained(tiny_encoder(seed=1), tmp_path / "setup")
    mismatches = [w for w in caught if issubclass(w.category, af.BaseModelMismatchWarning)]
    assert len(mismatches) == 1 and "weights differ" in str(mismatches[0].message)
    # a piece of the setup loaded alone is checked by its own record
    with pytest.warns(af.BaseModelMismatchWarning, match="other weights than this one"):
        af.wrap(tiny_encoder(seed=1)).load_adapter(tmp_path / "setup" / "adapters" / "a")


def test_a_setup_loaded_again_from_one_place_warns_once_under_default_filters(tmp_path: Path) -> None:
    """Python shows a warning once per place by default; silencing the pieces' own check with a warnings filter
    reset that record, and three loads in a loop printed three warnings."""
    _with_adapter(seed=0).save_pretrained(tmp_path / "setup")
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import adapterfusion as af; from tiny_models import tiny_encoder\n"
        "for seed in (1, 2, 3):\n"
        "    af.AdaptedModel.from_pretrained(tiny_encoder(seed=seed), sys.argv[2])\n"
    )
    tests = str(Path(__file__).resolve().parents[1])
    done = subprocess.run(
        [sys.executable, "-c", code, tests, str(tmp_path / "setup")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("BaseModelMismatchWarning") == 1, done.stderr
