"""Default head pooling per encoder, and mean pooling over real tokens only."""

import json

import pytest
import torch

import adapterfusion as af
from adapterfusion.errors import ConfigError
from adapterfusion.heads.config import ClassificationHead
from adapterfusion.heads.module import PredictionHead
from adapterfusion.heads.pooling import encoder_pooling, resolve_pooling


def _declare(folder, **modes):
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 8, **modes}))
    return folder


def test_the_shipped_minilm_pools_by_mean():
    assert encoder_pooling(af.default_encoder_path()) == "mean"


@pytest.mark.parametrize(
    "modes, expected",
    [
        ({"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False}, "mean"),
        ({"pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True}, "cls"),
        ({"pooling_mode_max_tokens": True}, "cls"),  # no head pooling of ours: cls
        ({"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": True}, "cls"),  # ambiguous: cls
    ],
)
def test_sentence_transformers_declaration_decides(tmp_path, modes, expected):
    assert encoder_pooling(_declare(tmp_path, **modes)) == expected


def test_plain_folders_hub_ids_and_broken_files_fall_back_to_cls(tmp_path):
    assert encoder_pooling(tmp_path) == "cls"
    assert encoder_pooling("bert-base-uncased") == "cls"
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text("{not json")
    assert encoder_pooling(tmp_path) == "cls"


def test_explicit_pooling_wins_and_is_checked(tmp_path):
    folder = _declare(tmp_path, pooling_mode_mean_tokens=True)
    assert resolve_pooling("cls", folder) == "cls"
    assert resolve_pooling(None, folder) == "mean"
    with pytest.raises(ConfigError, match="pooling='max' is not supported; choose one of cls, mean"):
        resolve_pooling("max", folder)


def test_mean_pooling_ignores_padding_and_without_a_mask_averages_all_tokens():
    head = PredictionHead(ClassificationHead(num_labels=2, pooling="mean"), hidden_size=3)
    hidden = torch.arange(24, dtype=torch.float64).view(2, 4, 3)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    pooled = head.pool(hidden, mask)
    torch.testing.assert_close(pooled[0], hidden[0, :2].mean(0), rtol=0, atol=1e-12)
    torch.testing.assert_close(pooled[1], hidden[1].mean(0), rtol=0, atol=1e-12)
    torch.testing.assert_close(head.pool(hidden, None), hidden.mean(1), rtol=0, atol=1e-12)
