"""What belongs to a saved setup: no piece is saved into its folder or its piece folders but by its own
save_pretrained, its index's pieces each have their folder, and no two of its pieces share a folder on a
case-insensitive file system (adapterfusion/piece.py setup_holding, adapterfusion/serialization/)."""

import pytest

import adapterfusion as af
from adapterfusion.errors import ConfigError, SerializationError
from adapterfusion.piece import setup_holding
from tiny_models import tiny_encoder


@pytest.fixture
def saved(tmp_path):
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.add_head("h", af.ClassificationHead(num_labels=2))
    return model, model.save_pretrained(tmp_path / "setup")


def test_setup_holding_names_the_setup_of_its_part_folders_only(saved, tmp_path):
    _, setup = saved
    for inside in ("", "adapters", "adapters/a", "adapters/new/deeper", "heads/h"):
        assert setup_holding(setup / inside) == setup.resolve()
    for outside in ("other", "other/adapters"):
        assert setup_holding(setup / outside) is None
    assert setup_holding(tmp_path) is None


def test_a_setup_saves_over_itself_but_takes_no_piece_saved_into_it(saved):
    model, setup = saved
    model.save_pretrained(setup)
    before = {p: p.read_bytes() for p in setup.rglob("*") if p.is_file()}
    with pytest.raises(ConfigError, match="is part of the saved setup"):
        model.save_adapter("a", setup / "adapters" / "a")
    with pytest.raises(ConfigError, match="is the saved setup"):
        model.save_head("h", setup)
    assert {p: p.read_bytes() for p in setup.rglob("*") if p.is_file()} == before
    assert af.AdaptedModel.from_pretrained(tiny_encoder("bert"), setup).adapter_names == ["a"]


def test_a_listed_piece_without_its_folder_is_named_before_the_base_loads(saved):
    _, setup = saved
    (setup / "heads" / "h").rename(setup / "heads" / "H")
    with pytest.raises(SerializationError, match=r"lists the head 'h'.*'H' differs from it only in case"):
        af.AdaptedModel.from_pretrained(tiny_encoder("bert"), setup)


def test_pieces_whose_names_differ_only_in_case_are_not_saved_together(tmp_path):
    model = af.wrap(tiny_encoder("bert"))
    for name in ("rte", "RTE"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
    with pytest.raises(ConfigError, match="differ only in case"):
        model.save_pretrained(tmp_path / "setup")
    assert not (tmp_path / "setup").exists()
    assert model.save_pretrained(tmp_path / "one", adapters="rte").is_dir()
