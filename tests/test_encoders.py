"""Encoder arguments: a Hub id stays a Hub id, a string that can only be a path must exist, a folder must hold a
model (adapterfusion/encoders.py)."""

import pytest

from adapterfusion.encoders import check_encoder, looks_like_path
from adapterfusion.errors import ConfigError


@pytest.mark.parametrize("value", ["bert-base-uncased", "sentence-transformers/all-MiniLM-L6-v2", "org/name"])
def test_hub_ids_are_left_to_the_hub(tmp_path, value):
    assert not looks_like_path(value, tmp_path)
    assert check_encoder(value, tmp_path) is None


@pytest.mark.parametrize(
    "value", ["./enc", "../enc", "/nowhere/enc", "~/enc-that-is-not-there", "a/b/c", "models\\enc", "C:/models/enc"]
)
def test_path_like_strings_that_do_not_exist_are_refused(tmp_path, value):
    assert looks_like_path(value, tmp_path)
    with pytest.raises(ConfigError, match="looks like a local path.*does not exist"):
        check_encoder(value, tmp_path)


def test_org_name_is_a_path_when_its_org_folder_exists_locally(tmp_path):
    (tmp_path / "models").mkdir()
    assert looks_like_path("models/enc", tmp_path)
    with pytest.raises(ConfigError, match=r"'models/enc' looks like a local path"):
        check_encoder("models/enc", tmp_path)


def test_an_existing_folder_must_hold_a_model(tmp_path):
    (tmp_path / "enc").mkdir()
    (tmp_path / "enc" / "vocab.txt").write_text("[PAD]\n")
    with pytest.raises(ConfigError, match=r"holds no config.json \(it holds \['vocab.txt'\]\)"):
        check_encoder("enc", tmp_path)
    (tmp_path / "enc" / "config.json").write_text("{}")
    assert check_encoder("enc", tmp_path) == tmp_path / "enc"
    assert check_encoder(tmp_path / "enc") == tmp_path / "enc"
    with pytest.raises(ConfigError, match="is a file"):
        check_encoder("enc/config.json", tmp_path)
