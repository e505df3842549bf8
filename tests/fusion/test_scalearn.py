"""ScaLearn (fusion/scalearn.py, FusionConfig kind='scalearn'): o = sum_n w_n ⊙ z_n + r per site.

Float64 exactness: the fast path (one stacked matmul each way) equals the literal per-adapter loop on BERT and
DistilBERT sites and on two decoder site kinds, outputs and gradients, with scale dropout on in training; and both
equal hand-made models (scales 0 = the bare encoder; w_a = c, w_b = 0 = adapter a alone with its up-projection rows
times c). Then the model API: masks, subsets, per-example routing, train_fusion, saving and loading, bad input."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import adapterfusion as af
from adapterfusion.errors import ConfigError, SerializationError
from adapterfusion.fusion import add_fusion_subset
from adapterfusion.fusion.config import FusionConfig
from adapterfusion.fusion.scalearn import ScaLearnLayer
from adapterfusion.interop import export_adapterhub
from adapterfusion.training.optimizer import parameter_groups
from tiny_decoders import tiny_decoder, tiny_decoder_inputs
from tiny_models import tiny_encoder, tiny_inputs
from tolerances import assert_close

NAMES = ("a", "b", "c")
SHAPES = {"vector": FusionConfig.scalearn(), "scalar": FusionConfig.scalearn_uniform()}


def _randomise_scales(model: af.AdaptedModel, name: str) -> None:
    with torch.no_grad():
        for site in model.sites_with_fusion(name):
            site.fusions[name].scales.normal_(0.5, 0.4)


def _scalearn(base: torch.nn.Module, config: FusionConfig, preset: str = "pfeiffer") -> af.AdaptedModel:
    """A float64 model with three random adapters and a ScaLearn fusion 's' with random scales, active."""
    model = af.wrap(base.double())
    torch.manual_seed(0)
    for name in NAMES:
        model.add_adapter(name, af.AdapterConfig.from_name(preset, reduction_factor=4, train_layer_norm=False))
        with torch.no_grad():
            for parameter in model.adapter_parameters(name):
                parameter.add_(torch.randn_like(parameter) * 0.3)
    model.add_fusion("s", NAMES, config)
    _randomise_scales(model, "s")
    model.activate(fusion="s")
    return model.eval()


def _encoder(model_type: str, config: FusionConfig) -> af.AdaptedModel:
    model = _scalearn(tiny_encoder(model_type), config)
    model.add_head("h", af.ClassificationHead(num_labels=3, dropout=0.0))
    model.activate(fusion="s", head="h")
    return model


def _both_paths(model: af.AdaptedModel, inputs: dict, train: bool) -> dict[str, tuple[torch.Tensor, list]]:
    """Logits (or the last hidden state) and every scale's gradient, fast then reference, from the same dropout
    draws (the same seed before each forward: both draw the scales' dropout mask first and only)."""
    model.train(train)
    results = {}
    for implementation in ("fast", "reference"):
        model.set_fusion_implementation(implementation)
        model.zero_grad()
        torch.manual_seed(123)
        output = model(**inputs)
        out = output.logits if output.logits is not None else output.last_hidden_state
        out.pow(2).sum().backward()
        results[implementation] = (out.detach(), [p.grad.clone() for p in model.fusion_parameters("s")])
    return results


def _assert_paths_equal(results: dict[str, tuple[torch.Tensor, list]]) -> None:
    fast, reference = results["fast"], results["reference"]
    assert_close(fast[0], reference[0], dtype=torch.float64)
    assert len(fast[1]) == len(reference[1]) > 0
    for got, want in zip(fast[1], reference[1], strict=True):
        assert_close(got, want, dtype=torch.float64)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("model_type", ["bert", "distilbert"])
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train-dropout"])
def test_fast_path_equals_the_literal_loop_on_encoders(model_type: str, shape: str, train: bool) -> None:
    model = _encoder(model_type, SHAPES[shape])
    _assert_paths_equal(_both_paths(model, tiny_inputs(), train))


@pytest.mark.parametrize("model_type", ["llama", "gpt2"])
def test_fast_path_equals_the_literal_loop_on_decoders(model_type: str) -> None:
    model = _scalearn(tiny_decoder(model_type), FusionConfig.scalearn())
    _assert_paths_equal(_both_paths(model, tiny_decoder_inputs(model_type), train=True))


@pytest.mark.parametrize("implementation", ["fast", "reference"])
def test_zero_scales_are_the_bare_encoder_and_one_nonzero_adapter_is_that_adapter_rescaled(implementation: str) -> None:
    """Against models built without ScaLearn: w = 0 leaves o = r (the Pfeiffer residual is h, so the bare
    sub-layer); w_a = c, w_b = w_c = 0 is adapter a alone with U_a and c_a multiplied row-wise by c."""
    model = _encoder("bert", FusionConfig.scalearn(scale_dropout=0.0))
    model.set_fusion_implementation(implementation)
    inputs = tiny_inputs()
    with torch.no_grad():
        for site in model.sites_with_fusion("s"):
            site.fusions["s"].scales.zero_()
        fused = model(**inputs).logits
        model.activate(head="h")
        bare = model(**inputs).logits
    assert_close(fused, bare, dtype=torch.float64)

    rescaled = copy.deepcopy(model)
    with torch.no_grad():
        for site, copied in zip(model.sites_with_fusion("s"), rescaled.sites_with_fusion("s"), strict=True):
            c = torch.linspace(-1.5, 2.0, model.hidden_size, dtype=torch.float64) + site.layer_index
            site.fusions["s"].scales[0] = c
            copied.adapters["a"].up.weight.mul_(c[:, None])
            copied.adapters["a"].up.bias.mul_(c)
        model.activate(fusion="s", head="h")
        rescaled.activate(adapter="a", head="h")
        assert_close(model(**inputs).logits, rescaled(**inputs).logits, dtype=torch.float64)


@pytest.mark.parametrize("shape", SHAPES)
def test_scales_are_reported_as_the_fusion_attentions(shape: str) -> None:
    model = _encoder("bert", SHAPES[shape])
    with torch.no_grad():
        out = model(**tiny_inputs(), output_fusion_attentions=True)
    for site in model.sites_with_fusion("s"):
        weights = out.fusion_attentions_by_site[(site.layer_index, site.position)]
        assert weights.shape == (2, 7, len(NAMES))
        expected = site.fusions["s"].scales.mean(dim=-1)
        assert_close(weights, expected.expand_as(weights), dtype=torch.float64)


@pytest.mark.parametrize("implementation", ["fast", "reference"])
def test_a_mask_zeroes_the_dropped_adapters_scales_and_a_subset_is_the_masked_fusion(implementation: str) -> None:
    model = _encoder("bert", FusionConfig.scalearn())
    inputs = tiny_inputs()
    model.set_fusion_implementation(implementation)
    with torch.no_grad():
        model.set_fusion_mask("s", ["a", "c"])
        masked = model(**inputs).logits
        model.set_fusion_mask("s", None)
        add_fusion_subset(model, "s", ["c", "a"], "ac")
        model.activate(fusion="ac", head="h")
        subset = model(**inputs).logits
        for site in model.sites_with_fusion("s"):
            site.fusions["s"].scales[1] = 0.0
        model.activate(fusion="s", head="h")
        zeroed = model(**inputs).logits
    assert model.fusion_setup("ac").adapters == ("a", "c")
    assert_close(masked, zeroed, dtype=torch.float64)
    assert_close(subset, zeroed, dtype=torch.float64)


def test_routed_rows_equal_each_row_alone() -> None:
    model = _encoder("bert", FusionConfig.scalearn_uniform())
    inputs = tiny_inputs(batch=3)
    with torch.no_grad():
        routed = model(**inputs, adapter_names=["s", None, "b"]).logits
        alone = []
        for row, choice in enumerate(({"fusion": "s"}, {}, {"adapter": "b"})):
            model.activate(head="h", **choice)
            alone.append(model(**{k: v[row : row + 1] for k, v in inputs.items()}).logits)
    assert_close(routed, torch.cat(alone), dtype=torch.float64)


def test_train_fusion_trains_only_the_scales_and_head_without_regulariser_or_weight_decay() -> None:
    model = _encoder("bert", FusionConfig.scalearn())
    model.train_fusion("s", head="h")
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    expected = {id(p) for p in model.fusion_parameters("s")} | {id(p) for p in model.get_head("h").parameters()}
    assert trainable == expected
    assert sum(p.numel() for p in model.fusion_parameters("s")) == model.num_layers * len(NAMES) * model.hidden_size
    output = model(**tiny_inputs(), labels=torch.tensor([0, 2]))
    assert output.fusion_regularization is None and torch.equal(output.loss, output.task_loss)
    decayed = {id(p) for group in parameter_groups(model, 0.01) if group["weight_decay"] > 0 for p in group["params"]}
    assert not decayed & {id(p) for p in model.fusion_parameters("s")}


def test_save_and_load_like_a_fusion(tmp_path: Path) -> None:
    model = _encoder("bert", FusionConfig.scalearn_uniform(scale_init=1.0))
    inputs = tiny_inputs()
    with torch.no_grad():
        expected = model(**inputs).logits
    model.save_pretrained(tmp_path / "setup")
    model.save_fusion("s", tmp_path / "fusion")

    restored = af.AdaptedModel.from_pretrained(tiny_encoder("bert").double(), tmp_path / "setup")
    assert restored.fusion_setup("s").config == FusionConfig.scalearn_uniform(scale_init=1.0)
    fresh = af.wrap(tiny_encoder("bert").double())
    for name in NAMES:
        fresh.load_adapter(tmp_path / "setup" / "adapters" / name)
    fresh.load_fusion(tmp_path / "fusion", name="again")
    fresh.load_head(tmp_path / "setup" / "heads" / "h")
    fresh.activate(fusion="again", head="h")
    with torch.no_grad():
        for loaded in (restored.eval(), fresh.eval()):
            assert_close(loaded(**inputs).logits, expected, dtype=torch.float64)
    layer = fresh.sites_with_fusion("again")[0].fusions["again"]
    assert isinstance(layer, ScaLearnLayer) and layer.scales.shape == (len(NAMES), 1)


def test_a_config_made_with_numpy_scalars_saves(tmp_path: Path) -> None:
    """scale_init=np.float32(2.0) was accepted, ran and trained, and then save_fusion and save_pretrained failed with
    json's TypeError, saving nothing."""
    model = _encoder("bert", FusionConfig.scalearn_uniform(scale_init=np.float32(2.0), scale_dropout=np.float64(0)))
    model.save_fusion("s", tmp_path / "fusion")
    model.save_pretrained(tmp_path / "setup")
    restored = af.AdaptedModel.from_pretrained(tiny_encoder("bert").double(), tmp_path / "setup")
    assert restored.fusion_setup("s").config == FusionConfig.scalearn_uniform(scale_init=2.0, scale_dropout=0.0)


def test_config_kinds_presets_and_serialised_form() -> None:
    assert FusionConfig.from_name("scalearn") == FusionConfig(kind="scalearn")
    assert FusionConfig.from_name("scalearn-uniform").scale_shape == "scalar"
    assert "kind" not in FusionConfig.dynamic().to_dict()  # attention configs (and spec hashes) are as before
    data = FusionConfig.scalearn(scale_dropout=0.0).to_dict()
    assert data["kind"] == "scalearn" and "query" not in data
    assert FusionConfig.from_dict(data) == FusionConfig.scalearn(scale_dropout=0.0)
    layer = ScaLearnLayer(16, 4, FusionConfig.scalearn(scale_init_std=0.0))
    assert torch.equal(layer.scales, torch.full((4, 16), 0.5))  # 2 / N


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: FusionConfig(kind="scale"), "fusion kind='scale' is not allowed; choose one of 'attention'"),
        (lambda: FusionConfig.scalearn(value=False), r"does not use \['value'\].*kind='attention'"),
        (lambda: FusionConfig(scale_shape="scalar"), r"does not use \['scale_shape'\].*kind='scalearn'"),
        (lambda: FusionConfig.scalearn(scale_shape="matrix"), "scale_shape='matrix' is not allowed"),
        (lambda: FusionConfig.scalearn(scale_dropout=1.0), "scale_dropout"),
        (lambda: FusionConfig.from_name("scalearn+"), "unknown fusion preset .scalearn\\+."),
    ],
)
def test_bad_configs_are_refused_clearly(make, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make()


def test_export_to_adapterhub_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    model = _encoder("bert", FusionConfig.scalearn())
    with pytest.raises(ConfigError, match="ScaLearn fusion .* cannot be exported to AdapterHub's format"):
        export_adapterhub(model, "fusion", "s", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_scalearn_over_adapters_with_their_own_layer_norm_is_refused() -> None:
    model = af.wrap(tiny_encoder("bert"))
    for name in ("a", "b"):
        model.add_adapter(name, af.AdapterConfig.houlsby(reduction_factor=4))
    with pytest.raises(ConfigError, match="ScaLearn cannot fuse adapters"):
        model.add_fusion("s", ["a", "b"], "scalearn")
    assert model.fusion_names == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("model_type", ["bert", "llama"])
def test_on_cuda_the_fast_path_equals_the_literal_loop(model_type: str) -> None:
    """float64 on CUDA, training mode with scale dropout: fast == loop there, outputs and scale gradients; and for
    BERT the CUDA result equals the CPU's loop in eval mode (the table's float64 row holds across BLAS orders; a
    Llama's rotary tables are computed in float32, which differs between the devices by ~1e-8, so not there)."""
    if model_type == "bert":
        model, inputs = _encoder("bert", FusionConfig.scalearn()), tiny_inputs()
    else:
        model, inputs = _scalearn(tiny_decoder("llama"), FusionConfig.scalearn()), tiny_decoder_inputs("llama")
    cpu = _both_paths(model, inputs, train=False)["reference"]
    model.to("cuda")
    on_cuda = {k: v.to("cuda") for k, v in inputs.items()}
    _assert_paths_equal(_both_paths(model, on_cuda, train=True))
    if model_type == "bert":
        cuda = _both_paths(model, on_cuda, train=False)["fast"]
        assert_close(cuda[0].cpu(), cpu[0], dtype=torch.float64)
        for got, want in zip(cuda[1], cpu[1], strict=True):
            assert_close(got.cpu(), want, dtype=torch.float64)


@pytest.mark.parametrize("preset", ["scalearn++", "scalearn-uniform++"])
def test_plus_plus_shares_one_set_of_scales_across_layers(tmp_path: Path, preset: str) -> None:
    """ScaLearn++ / ScaLearnUniform++: every site holds the same Parameter (N·d or N numbers in all), the fast path
    equals the loop, training counts it once, and it survives saving, loading and a subset with its sharing."""
    config = FusionConfig.from_name(preset)
    model = _encoder("bert", config)
    layers = [site.fusions["s"] for site in model.sites_with_fusion("s")]
    assert len(layers) == model.num_layers and all(layer.scales is layers[0].scales for layer in layers)
    _assert_paths_equal(_both_paths(model, tiny_inputs(), train=True))
    model.train_fusion("s", head="h")
    width = model.hidden_size if config.scale_shape == "vector" else 1
    assert [p.numel() for p in model.fusion_parameters("s")] == [len(NAMES) * width]
    report = {row.piece: row.trainable for row in model.parameter_report().rows if row.kind == "fusion"}
    assert report == {"s": len(NAMES) * width}

    model.eval()
    inputs = tiny_inputs()
    with torch.no_grad():
        expected = model(**inputs).logits
    model.save_pretrained(tmp_path / "setup")
    restored = af.AdaptedModel.from_pretrained(tiny_encoder("bert").double(), tmp_path / "setup").eval()
    loaded = [site.fusions["s"] for site in restored.sites_with_fusion("s")]
    assert all(layer.scales is loaded[0].scales for layer in loaded)
    with torch.no_grad():
        assert_close(restored(**inputs).logits, expected, dtype=torch.float64)
        add_fusion_subset(restored, "s", ["a", "c"], "ac")
        restored.set_fusion_mask("s", ["a", "c"])
        masked = restored(**inputs).logits
        restored.activate(fusion="ac", head="h")
        assert_close(restored(**inputs).logits, masked, dtype=torch.float64)
    subset = [site.fusions["ac"] for site in restored.sites_with_fusion("ac")]
    assert all(layer.scales is subset[0].scales for layer in subset) and subset[0].scales.shape[0] == 2


def test_shared_scales_load_only_from_copies_that_agree(tmp_path: Path) -> None:
    """A state dict holds each site's copy of shared scales: its own state dict loads back (the copies agree), but
    copies that differ, which loaded one over the other (the last layer's at every layer), are refused, and so is
    assign=True, which gave each layer its own tensor (no longer shared) without a word."""
    model = _encoder("bert", FusionConfig.scalearn_plus_plus())
    state = model.state_dict()
    model.load_state_dict(state)
    keys = sorted(key for key in state if key.endswith("fusions.s.scales"))
    assert len(keys) == model.num_layers
    state[keys[-1]] = state[keys[-1]] + 1
    with pytest.raises(SerializationError, match="differ from those loaded at the first layer"):
        model.load_state_dict(state)
    shared = model.sites_with_fusion("s")[0].fusions["s"].scales
    with pytest.raises(SerializationError, match="no longer be shared"):  # each layer was given its own tensor
        model.load_state_dict(model.state_dict(), assign=True)
    assert all(site.fusions["s"].scales is shared for site in model.sites_with_fusion("s"))
    per_layer = _encoder("bert", FusionConfig.scalearn())
    saved = per_layer.save_fusion("s", tmp_path / "s")
    document = json.loads((saved / "fusion_config.json").read_text())
    document["config"]["share_layers"] = True
    (saved / "fusion_config.json").write_text(json.dumps(document))
    target = _encoder("bert", FusionConfig.scalearn())
    target.delete_fusion("s")
    with pytest.raises(SerializationError, match="saved per layer"):
        target.load_fusion(saved)
    assert "s" not in target.fusion_names


@pytest.mark.parametrize(
    ("adapters", "options", "message"),
    [
        (["c", "c"], {}, r"names \['c'\] more than once"),  # was a subset of c alone, the copy dropped unsaid
        (3, {}, "adapters=3 has type int"),  # was a TypeError: 'int' object is not iterable
        (["a"], {"overwrite": "no"}, "overwrite='no' has type str"),  # was taken as true
    ],
)
def test_a_subset_of_a_scalearn_fusion_refuses_what_it_cannot_mean(adapters, options, message: str) -> None:
    model = _scalearn(tiny_encoder("bert"), FusionConfig.scalearn())
    with pytest.raises(ConfigError, match=message):
        add_fusion_subset(model, "s", adapters, "sub", **options)
    assert "sub" not in model.fusion_names
