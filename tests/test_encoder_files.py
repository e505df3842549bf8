"""An encoder folder's files, each named as itself when it is what is wrong (config.json's key and value, a damaged
tokenizer or weight file, weights that do not fit the config), and one key for every spelling of one encoder folder
(adapterfusion/encoder_folders.py, encoder_loading.py, encoders.py, encoder_limits.py)."""

import json
import os
from pathlib import Path

import huggingface_hub
import pytest
import transformers
from transformers import CONFIG_MAPPING

import adapterfusion as af
from adapterfusion.encoder_limits import check_config_values
from adapterfusion.encoder_loading import load_encoder_model
from adapterfusion.encoders import encoder_key, looks_like_path, resolve_encoder
from adapterfusion.errors import ConfigError, HubError
from adapterfusion.injection.architectures import ARCHITECTURES
from adapterfusion.io.hub import OFFLINE_VARIABLES
from hub_cache import cached_repo
from tiny_models import tiny_encoder

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("encoder") / "enc"
    tiny_encoder("bert").save_pretrained(path)
    transformers.AutoTokenizer.from_pretrained(af.default_encoder_path()).save_pretrained(path)
    return path


def _copy(encoder_dir: Path, tmp_path: Path, **config) -> Path:
    path = tmp_path / "enc"
    path.mkdir()
    for file in encoder_dir.iterdir():
        (path / file.name).write_bytes(file.read_bytes())
    if config:
        saved = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps({**saved, **config}))
    return path


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"hidden_size": "32"}, "'hidden_size' the value '32' (str)"),
        ({"num_hidden_layers": -1}, "'num_hidden_layers' the value -1"),
        ({"num_attention_heads": True}, "'num_attention_heads' the value True"),
        ({"torch_dtype": "float33"}, "'torch_dtype' the value 'float33'"),
        ({"hidden_act": "nope"}, "'hidden_act' the value 'nope'"),
        ({"id2label": [0, 1]}, "'id2label' the value [0, 1]"),
        ({"layer_norm_eps": float("nan")}, "'layer_norm_eps' the value nan"),
        ({"layer_norm_eps": 0}, "'layer_norm_eps' the value 0"),
    ],
)
def test_a_bad_config_value_is_named_with_its_key_not_as_a_tokenizer_failure(encoder_dir, tmp_path, change, named):
    with pytest.raises(ConfigError) as caught:
        resolve_encoder(_copy(encoder_dir, tmp_path, **change))
    assert "config.json" in str(caught.value) and named in str(caught.value)
    assert "tokenizer" not in str(caught.value)


@pytest.mark.parametrize("name", ["tokenizer_config.json", "special_tokens_map.json", "tokenizer.json"])
def test_a_damaged_tokenizer_file_is_named(encoder_dir, tmp_path, name):
    path = _copy(encoder_dir, tmp_path)
    (path / name).write_text("[1, 2]" if name == "tokenizer.json" else "{not json")
    with pytest.raises(ConfigError, match=rf"{name} (holds a JSON list|is not a readable JSON file)"):
        resolve_encoder(path)


@pytest.mark.parametrize(
    ("layers", "said"), [(3, "lack encoder.layer.2."), (1, "hold more than that: encoder.layer.1.")]
)
def test_weights_with_other_layers_than_the_config_are_refused(encoder_dir, tmp_path, layers, said):
    """A 2-layer checkpoint under num_hidden_layers=3 loaded with a random third layer, under 1 without its second."""
    encoder = resolve_encoder(_copy(encoder_dir, tmp_path, num_hidden_layers=layers))
    with pytest.raises(ConfigError, match=rf"num_hidden_layers={layers}\): they {said}"):
        load_encoder_model(encoder)


def test_a_weight_of_another_shape_names_the_weight_and_both_shapes(encoder_dir, tmp_path):
    encoder = resolve_encoder(_copy(encoder_dir, tmp_path, vocab_size=50), tokenizer=False)
    with pytest.raises(ConfigError, match=r"word_embeddings.weight has the shape \[100, 32\].*\[50, 32\]"):
        load_encoder_model(encoder)


def test_a_damaged_weight_file_is_named(encoder_dir, tmp_path):
    path = _copy(encoder_dir, tmp_path)
    (path / "model.safetensors").write_bytes((path / "model.safetensors").read_bytes()[:64])
    with pytest.raises(ConfigError, match=r"weight file .*model.safetensors is damaged"):
        load_encoder_model(resolve_encoder(path))


def test_spellings_of_one_folder_share_one_encoder_key(tmp_path, monkeypatch):
    (tmp_path / "models" / "x" / "sub").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    spellings = ["./models/x", "models/x/", "models/../models/x", "models/x/sub/..", str(tmp_path / "models" / "x")]
    assert {encoder_key(spelling) for spelling in spellings} | {encoder_key(tmp_path / "models/x")} == {"models--x"}
    monkeypatch.chdir(tmp_path / "models")
    assert encoder_key("x") == encoder_key("./x/") == "models--x"
    assert encoder_key("org/name@v2") == "org--name_v2" and encoder_key("bert-base-uncased") == "bert-base-uncased"
    assert encoder_key("org/name@refs/pr/1") == "org--name_refs_pr_1"  # a revision may hold '/'


def test_a_revision_with_slashes_is_still_a_hub_id(tmp_path):
    assert not looks_like_path("org/name@refs/pr/1", tmp_path) and looks_like_path("org/name/sub/x", tmp_path)


def _recorded_keys() -> list[tuple[str, str, str]]:
    """(file, encoder, encoder_key) of every committed run config and store entry that records both."""
    found = []
    for path in sorted([*ROOT.glob("examples/results/**/config.json"), *ROOT.glob("adapterfusion/zoo/**/entry.json")]):
        record = json.loads(path.read_text())
        if isinstance(record, dict) and isinstance(record.get("encoder_key"), str):
            found.append((str(path), record.get("encoder"), record["encoder_key"]))
    return found


def test_keys_recorded_in_committed_files_still_match():
    recorded = _recorded_keys()
    assert recorded
    for path, encoder, key in recorded:
        if isinstance(encoder, str) and os.path.isabs(encoder):
            assert encoder_key(encoder) == key, path
        assert (ROOT / "adapterfusion/zoo/store" / key).is_dir() or "examples" in path


def test_every_supported_model_types_default_config_passes_the_value_checks():
    """No false alarm: the config each supported model type is saved with by default holds only accepted values."""
    for model_type in sorted(ARCHITECTURES):
        check_config_values(json.loads(CONFIG_MAPPING[model_type]().to_json_string()), f"{model_type}/config.json")


def test_a_partly_cached_hub_id_is_left_to_download_online(encoder_dir, tmp_path, monkeypatch):
    """A cache holding the config alone (AutoConfig.from_pretrained's) was refused as a folder without weights; online,
    from_pretrained downloads the rest, offline it is a HubError saying so."""
    cached_repo(tmp_path / "hf-cache", "org/enc", {"config.json": encoder_dir / "config.json"})
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr(huggingface_hub, "model_info", lambda repo_id, **kwargs: None)  # never asked: it is cached
    for name in OFFLINE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    assert resolve_encoder("org/enc").hub is not None
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(HubError, match="only partly in the local Hugging Face cache"):
        resolve_encoder("org/enc")
