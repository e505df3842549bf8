"""The decoder rows beyond issue #23's (tests/tiny_decoders.py EXTRA_DECODER_CONFIGS). test_decoder_sites.py checks
their sites against the hand computation, fusion's fast path and cached generation, as for every decoder row; here,
what that module does not: each tiny config is the shape the others are, a saved setup and a classification head
work on each, and a model type whose config chooses its blocks gets the row of the blocks it built.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from test_decoder_sites import _fused, _generating, _left_padded

import adapterfusion as af
from adapterfusion.injection.architectures import architecture_for_config
from adapterfusion.injection.site import AdapterSite
from tiny_decoders import (
    CONFIG_VARIANTS,
    EXTRA_DECODER_CONFIGS,
    HIDDEN,
    LAYERS,
    randomise_pieces,
    tiny_decoder,
    tiny_decoder_config,
    tiny_decoder_inputs,
)
from tolerances import assert_close

DECODERS = (*EXTRA_DECODER_CONFIGS, *CONFIG_VARIANTS)


# adapters 1.3.0 has a GPT-J model: its row translates AdapterHub's files (test_adapterhub_decoder_parity.py).
IN_ADAPTERHUB = {"gptj"}


def test_every_extra_tiny_decoder_is_a_decoder_row_of_the_common_shape() -> None:
    rows = {name: architecture_for_config(tiny_decoder_config(name)) for name in DECODERS}
    assert all(row.causal for row in rows.values())
    assert {name for name, row in rows.items() if row.in_adapterhub} == IN_ADAPTERHUB
    for name in DECODERS:
        config = tiny_decoder_config(name)
        model_type = CONFIG_VARIANTS[name][0] if name in CONFIG_VARIANTS else name
        assert (config.model_type, config.hidden_size, config.num_hidden_layers) == (model_type, HIDDEN, LAYERS)


@pytest.mark.parametrize("model_type", DECODERS)
def test_a_setup_saves_and_loads_to_the_same_outputs(model_type: str, tmp_path: Path) -> None:
    model = _fused(model_type).eval()
    inputs = tiny_decoder_inputs(model_type)
    with torch.no_grad():
        expected = model(**inputs).logits
    model.save_pretrained(tmp_path / "setup")
    again = af.AdaptedModel.from_pretrained(tiny_decoder(model_type, dtype=torch.float64), tmp_path / "setup").eval()
    assert again.active_fusion == "f" and again.adapter_names == model.adapter_names
    with torch.no_grad():
        assert torch.equal(again(**inputs).logits, expected)


@pytest.mark.parametrize("model_type", DECODERS)
def test_a_classification_head_pools_each_rows_last_token(model_type: str) -> None:
    """Left-padded rows: each row's logits equal the head on that row alone, unpadded."""
    model = _generating(model_type)
    model.add_head("cls", af.ClassificationHead(num_labels=3, pooling="last"))
    model.activate(fusion="f", head="cls")
    inputs = _left_padded(model_type)
    with torch.no_grad():
        logits = model(**inputs).logits
        assert logits.shape == (2, 3)
        for row, (ids, mask) in enumerate(zip(inputs["input_ids"], inputs["attention_mask"], strict=True)):
            alone = model(input_ids=ids[mask.bool()][None]).logits[0]
            assert_close(logits[row], alone, dtype=torch.float64, label=f"row {row}")


@pytest.mark.parametrize("name", CONFIG_VARIANTS)
def test_a_config_variant_is_wrapped_with_its_own_row(name: str) -> None:
    """Falcon, StableLM and GPT-NeoX build sequential or parallel-residual blocks under the same modules, as their
    config says: each config gets the row of its blocks (the hand computations in test_decoder_sites.py check each),
    and the model type's first row stays its default config's row here."""
    model_type, settings = CONFIG_VARIANTS[name]
    row = af.wrap(tiny_decoder(name)).architecture
    assert row in af.ARCHITECTURES[model_type].variants
    assert all(getattr(tiny_decoder_config(name), key) == value for key, value in row.requires if key in settings)
    assert af.wrap(tiny_decoder(model_type)).architecture is af.ARCHITECTURES[model_type]


def test_a_config_that_builds_blocks_no_row_expresses_is_refused_by_name() -> None:
    """Falcon's new decoder architecture without parallel attention builds a layer whose forward fails (it reads the
    ln_attn it did not make): wrapping refuses it, naming the settings and the rows there are, and replaces
    nothing in the model."""
    bare = tiny_decoder("falcon", new_decoder_architecture=True, parallel_attn=False)
    with pytest.raises(
        af.UnsupportedArchitectureError,
        match=r"'falcon' with parallel_attn=False, new_decoder_architecture=True, num_ln_in_parallel_attn=2 builds "
        r"blocks none of its rows.*parallel_attn=False, new_decoder_architecture=False \(sequential \(Falcon-RW\)\)",
    ):
        af.wrap(bare)
    assert not any(isinstance(module, AdapterSite) for module in bare.modules())


@pytest.mark.parametrize("multiplier", [0.0, float("nan")])
def test_a_granite_whose_residual_multiplier_no_output_can_be_divided_by_is_refused(multiplier: float) -> None:
    """The site divides its result by residual_multiplier: 0 or NaN is refused before any module is replaced."""
    bare = tiny_decoder("granite", residual_multiplier=multiplier)
    with pytest.raises(af.UnsupportedArchitectureError, match="residual_multiplier=.*finite, nonzero"):
        af.wrap(bare)
    assert not any(isinstance(module, AdapterSite) for module in bare.modules())


@pytest.mark.parametrize(
    ("name", "settings", "other", "refusal"),
    [
        # A sequential Falcon with multi_query=True caches one key/value head; get_head_shapes reads
        # num_key_value_heads, which Falcon lacks. The multi-head Falcon's cache (4 heads) is another model's.
        ("falcon", {"multi_query": True}, "falcon", "keys of 4 heads of size 8 at layer 0.*1 key/value heads"),
        # DeepSeek-V3 caches its compressed latent, one 'head' of kv_lora_rank (16) per layer, not the 4 heads of
        # size 8 its config gives. A Llama's cache of as many layers is another model's.
        ("deepseek_v3", {}, "llama", "keys of 2 heads of size 8 at layer 0.*1 key/value heads of size 16"),
    ],
)
def test_a_cache_that_get_head_shapes_misreads_passes_and_another_models_is_refused(
    name: str, settings: dict[str, bool], other: str, refusal: str
) -> None:
    """Attention that caches other keys than transformers' get_head_shapes says (forward_inputs/cache.py): the
    cache layout check must take the model's own cache, giving the full forward's logits, and still refuse
    another model's."""
    model = af.wrap(tiny_decoder(name, dtype=torch.float64, **settings))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(4))
    randomise_pieces(model, seed=3)
    model.activate(adapter="a")
    ids = tiny_decoder_inputs(name, batch=1)["input_ids"]
    with torch.no_grad():
        full = model(input_ids=ids).logits[0, -1]
        cache = model(input_ids=ids[:, :-1], use_cache=True).past_key_values
        step = model(input_ids=ids[:, -1:], attention_mask=torch.ones_like(ids), past_key_values=cache).logits[0, -1]
        assert_close(step, full, dtype=torch.float64, label="cached step")
        foreign = tiny_decoder(other, dtype=torch.float64)(input_ids=ids[:, :-1], use_cache=True).past_key_values
        with pytest.raises(af.ConfigError, match=refusal):
            model(input_ids=ids[:, -1:], attention_mask=torch.ones_like(ids), past_key_values=foreign)


def test_a_parallel_blocks_feed_forward_site_hooks_the_attention_site_only_while_it_needs_it() -> None:
    """GPT-J: Pfeiffer's feed-forward site reads r + the attention site's output through a forward hook on that
    site, held only while the adapter is active; a deep copy hooks its own attention sites."""
    model = af.wrap(tiny_decoder("gptj", dtype=torch.float64)).eval()
    inputs = tiny_decoder_inputs("gptj")
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    randomise_pieces(model, seed=5)
    attention_sites = [s for s in model.sites if s.position == "attention"]

    def hooked(sites: list[AdapterSite]) -> int:
        return sum(len(site._forward_hooks) for site in sites)

    assert hooked(attention_sites) == 0
    model.activate(adapter="a")
    assert hooked(attention_sites) == model.num_layers
    with torch.no_grad():
        adapted = model(**inputs).logits
        twin = copy.deepcopy(model)
        assert torch.equal(twin(**inputs).logits, adapted)
        twin.activate()
        assert hooked([s for s in twin.sites if s.position == "attention"]) == 0
        assert hooked(attention_sites) == model.num_layers
        model.activate(adapter="a", skip_layers=[0])
        assert hooked(attention_sites) == model.num_layers - 1
        model.activate()
    assert hooked(attention_sites) == 0


def test_a_summed_feed_forward_site_hooks_the_other_sub_layer_only_while_active() -> None:
    """GraniteMoE-shared: the shared_mlp site takes the experts' output through a forward hook on block_sparse_moe,
    held only while the site is active; a deep copy hooks its own experts, and the site called without them says so."""
    model = af.wrap(tiny_decoder("granitemoeshared", dtype=torch.float64)).eval()
    inputs = tiny_decoder_inputs("granitemoeshared")
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    randomise_pieces(model, seed=5)
    layers = model.model.base_model.layers

    def hooked(model: af.AdaptedModel) -> int:
        return sum(len(layer.block_sparse_moe._forward_hooks) for layer in model.model.base_model.layers)

    assert hooked(model) == 0
    model.activate(adapter="a")
    assert hooked(model) == model.num_layers
    with torch.no_grad():
        adapted = model(**inputs).logits
        twin = copy.deepcopy(model)
        assert torch.equal(twin(**inputs).logits, adapted)
        twin.activate()
        assert hooked(twin) == 0 and hooked(model) == model.num_layers
        model.activate(adapter="a", skip_layers=[0])
        assert hooked(model) == model.num_layers - 1
        model.add_adapter("h", af.AdapterConfig.houlsby(reduction_factor=4))  # reads no residual stream
        model.activate(adapter="h")
        with pytest.raises(af.ConfigError, match="ran without 'block_sparse_moe'"):
            layers[0].shared_mlp(torch.zeros(1, 3, HIDDEN, dtype=torch.float64))
        model.activate()
    assert hooked(model) == 0
