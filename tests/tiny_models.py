"""Tiny randomly initialised HuggingFace encoders built from config objects (hidden 32, 2 layers, 4 heads,
intermediate 64, vocab 100) and inputs for them, so no test ever downloads anything.

A plain module, not a fixture file: test modules import these helpers (`from tiny_models import tiny_encoder`);
tests/ is on sys.path because pytest inserts the folder of tests/conftest.py."""

from __future__ import annotations

import copy

import torch
import transformers

import adapterfusion as af

HIDDEN, LAYERS, HEADS, INTERMEDIATE, VOCAB = 32, 2, 4, 64, 100

_BERT_STYLE = dict(
    hidden_size=HIDDEN,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    intermediate_size=INTERMEDIATE,
    vocab_size=VOCAB,
    max_position_embeddings=64,
)

# model_type -> (Config class name, kwargs). Every key of af.ARCHITECTURES must have a row here.
TINY_CONFIGS: dict[str, tuple[str, dict]] = {
    "bert": ("BertConfig", dict(_BERT_STYLE)),
    "roberta": ("RobertaConfig", dict(_BERT_STYLE, pad_token_id=1)),
    "xlm-roberta": ("XLMRobertaConfig", dict(_BERT_STYLE, pad_token_id=1)),
    "camembert": ("CamembertConfig", dict(_BERT_STYLE, pad_token_id=1)),
    "electra": ("ElectraConfig", dict(_BERT_STYLE, embedding_size=HIDDEN)),
    "data2vec-text": ("Data2VecTextConfig", dict(_BERT_STYLE, pad_token_id=1)),
    "ernie": ("ErnieConfig", dict(_BERT_STYLE)),
    "bert-generation": ("BertGenerationConfig", dict(_BERT_STYLE)),  # BertGenerationEncoder (is_decoder=False)
    # ALBERT: one group of two distinct layers (inner_group_num), run num_hidden_layers=2 times over
    "albert": ("AlbertConfig", dict(_BERT_STYLE, embedding_size=16, inner_group_num=2)),
    "deberta": ("DebertaConfig", dict(_BERT_STYLE)),
    "deberta-v2": ("DebertaV2Config", dict(_BERT_STYLE)),
    "mpnet": ("MPNetConfig", dict(_BERT_STYLE, pad_token_id=1)),
    "distilbert": (
        "DistilBertConfig",
        dict(
            dim=HIDDEN,
            n_layers=LAYERS,
            n_heads=HEADS,
            hidden_dim=INTERMEDIATE,
            vocab_size=VOCAB,
            max_position_embeddings=64,
        ),
    ),
    "modernbert": (
        "ModernBertConfig",
        dict(
            _BERT_STYLE,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            cls_token_id=3,
            sep_token_id=4,
            global_attn_every_n_layers=1,
            local_attention=16,
        ),
    ),
}


def tiny_config(model_type: str = "bert", **overrides):
    class_name, kwargs = TINY_CONFIGS[model_type]
    config = getattr(transformers, class_name)(**{**kwargs, **overrides})
    if hasattr(config, "_attn_implementation"):
        config._attn_implementation = "eager"
    return config


def tiny_encoder(model_type: str = "bert", seed: int = 0, **overrides) -> torch.nn.Module:
    """A tiny randomly initialised HuggingFace encoder in eval mode; the same seed gives the same weights."""
    torch.manual_seed(seed)
    model = transformers.AutoModel.from_config(tiny_config(model_type, **overrides))
    return model.eval()


def tiny_pair(model_type: str = "bert", **overrides) -> tuple[torch.nn.Module, af.AdaptedModel]:
    """(untouched reference copy, wrapped model) with identical weights."""
    model = tiny_encoder(model_type, **overrides)
    reference = copy.deepcopy(model)
    return reference, af.wrap(model)


def tiny_inputs(batch: int = 2, seq: int = 7, seed: int = 1) -> dict[str, torch.Tensor]:
    """Token ids avoid 0..4 (the special ids of the tiny configs); the second row is padded at the end."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, VOCAB, (batch, seq), generator=generator)
    attention_mask = torch.ones(batch, seq, dtype=torch.long)
    if batch > 1:
        attention_mask[1, -2:] = 0
    return {"input_ids": input_ids, "attention_mask": attention_mask}


@torch.no_grad()
def randomise(module: torch.nn.Module, std: float = 0.5) -> None:
    """Overwrite every parameter of `module` with clearly non-trivial random values."""
    for parameter in module.parameters():
        parameter.normal_(0.0, std)
