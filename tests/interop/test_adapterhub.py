"""AdapterHub interop: parity with outputs recorded by `adapters` 1.3.0 (tests/fixtures/adapterhub/), safe loading
of legacy .bin files, refusal of unsupported options, and export -> import round trips."""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import os
import pickle
import shutil
import sys
from pathlib import Path
from unittest import mock

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModel, AutoTokenizer

import adapterfusion as af
from adapterfusion.interop import export_adapterhub, is_adapterhub_dir
from adapterfusion.interop.adapterhub_config import (
    adapter_config_from_adapterhub,
    adapter_config_to_adapterhub,
    fusion_config_from_adapterhub,
    fusion_config_to_adapterhub,
    head_config_from_adapterhub,
)
from adapterfusion.io import atomic
from tiny_decoders import tiny_decoder
from tiny_models import tiny_encoder
from tolerances import assert_close

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "adapterhub"
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "make_adapterhub_fixtures.py"
KINDS = ("bert", "roberta")
ADAPTERS = ("pf", "pf_relu", "pf3", "hb", "hb_pre")
FUSIONS = {"dynamic": ("pf", "pf_relu", "pf3"), "static": ("pf_relu", "pf3")}
BIN = {"adapter": "pytorch_adapter.bin", "fusion": "pytorch_model_adapter_fusion.bin", "head": "pytorch_model_head.bin"}
SAFE = {
    "adapter": "adapter.safetensors",
    "fusion": "model_adapter_fusion.safetensors",
    "head": "model_head.safetensors",
}


@functools.cache
def recorded(kind: str) -> dict[str, torch.Tensor]:
    return load_file(str(FIXTURES / kind / "outputs.safetensors"))


def fresh_model(kind: str) -> af.AdaptedModel:
    model = af.wrap(AutoModel.from_pretrained(FIXTURES / kind / "base_model"))
    return model.eval()


def only(directory: Path, piece: str, fmt: str, tmp_path: Path) -> Path:
    """A copy of a fixture folder holding only the .bin or only the .safetensors weights."""
    target = tmp_path / f"{directory.name}-{fmt}"
    shutil.copytree(directory, target)
    (target / (SAFE if fmt == "bin" else BIN)[piece]).unlink(missing_ok=True)
    assert (target / (BIN if fmt == "bin" else SAFE)[piece]).is_file()
    return target


def edited_copy(directory: Path, config_file: str, tmp_path: Path, config: dict | None = None, **top) -> Path:
    """A copy of a fixture folder whose JSON has `config` entries and top-level keys replaced."""
    target = tmp_path / directory.name
    shutil.copytree(directory, target)
    document = json.loads((target / config_file).read_text())
    document["config"].update(config or {})
    document.update(top)
    (target / config_file).write_text(json.dumps(document))
    return target


def run(model: af.AdaptedModel, kind: str):
    rec = recorded(kind)
    with torch.no_grad():
        return model(
            input_ids=rec["input_ids"],
            attention_mask=rec["attention_mask"],
            output_hidden_states=True,
            output_fusion_attentions=model.active_fusion is not None,  # refused where no fusion runs
        )


def assert_matches(output, kind: str, setup: str) -> None:
    """The recordings are float32 outputs of another library on another machine: the float32 row applies."""
    rec = recorded(kind)
    close = functools.partial(assert_close, dtype=torch.float32)
    close(output.last_hidden_state, rec[f"{setup}.last_hidden_state"])
    for i in (0, 1):
        close(output.hidden_states[i], rec[f"{setup}.hidden_states.{i}"])
    close(output.logits, rec[f"{setup}.logits"])
    for layer in (0, 1):
        key = f"{setup}.fusion_attention.layer{layer}.output_adapter"
        if key in rec:
            close(output.fusion_attentions_by_site[(layer, "output")], rec[key])


# ---- parity with adapters 1.3.0 ----------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("adapter", ADAPTERS)
@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_adapter_and_head_match_adapters(kind, adapter, fmt, tmp_path):
    model = fresh_model(kind)
    name = model.load_adapter(only(FIXTURES / kind / "adapters" / adapter, "adapter", fmt, tmp_path))
    head = model.load_head(only(FIXTURES / kind / "heads" / "cls", "head", fmt, tmp_path))
    assert (name, head) == (adapter, "cls")
    model.activate(adapter=name, head=head)
    assert_matches(run(model, kind), kind, adapter)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fusion", FUSIONS)
@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_fusion_matches_adapters(kind, fusion, fmt, tmp_path):
    model = fresh_model(kind)
    for adapter in ("pf", "pf_relu", "pf3"):
        model.load_adapter(FIXTURES / kind / "adapters" / adapter)
    name = model.load_fusion(only(FIXTURES / kind / "fusions" / fusion, "fusion", fmt, tmp_path))
    assert model.fusion_setup(name).adapters == FUSIONS[fusion]
    model.load_head(FIXTURES / kind / "heads" / "cls")
    for implementation in ("fast", "reference"):
        model.set_fusion_implementation(implementation)
        model.activate(fusion=name, head="cls")
        assert_matches(run(model, kind), kind, f"fusion_{fusion}")


@pytest.mark.parametrize("kind", KINDS)
def test_bare_encoder_and_head_match_adapters(kind):
    model = fresh_model(kind)
    model.load_head(FIXTURES / kind / "heads" / "cls")
    model.activate(head="cls")
    assert_matches(run(model, kind), kind, "bare")


def test_imported_configs_and_dropouts():
    model = fresh_model("bert")
    model.load_adapter(FIXTURES / "bert" / "adapters" / "hb")
    assert model.adapter_configs["hb"].positions == ("attention", "output")
    assert model.adapter_configs["hb"].non_linearity == "swish" and not model.adapter_configs["hb"].train_layer_norm
    for adapter in ("pf", "pf_relu", "pf3"):
        model.load_adapter(FIXTURES / "bert" / "adapters" / adapter)
    config = model.fusion_setup(model.load_fusion(FIXTURES / "bert" / "fusions" / "dynamic")).config
    # dropout_prob None: adapters falls back to the encoder's attention dropout for the scores.
    assert config.score_dropout == model.model.config.attention_probs_dropout_prob
    head = model.heads[model.load_head(FIXTURES / "bert" / "heads" / "cls")].config
    # adapters wrote transformers' default names (LABEL_0, LABEL_1) for a head given none: it has no label names, so
    # load_head(labels=[...]) accepts it as it accepts such a head saved by save_head
    assert (head.kind, head.layers, head.activation, head.labels) == ("classification", 2, "tanh", None)
    assert head.dropout == model.model.config.hidden_dropout_prob


def test_adapter_with_its_own_skip_order_matches_adapters(tmp_path):
    """pf_ln: new LayerNorms before and after, residual after the pretrained LayerNorm, skip connection added
    before ln_after (adapter_residual_before_ln=True): imported via skip_before_ln_after. Only a .bin exists."""
    model = fresh_model("bert")
    name = model.load_adapter(FIXTURES / "bert" / "adapters" / "pf_ln")
    assert model.adapter_configs[name].skip_before_ln_after is True
    model.activate(adapter=name, head=model.load_head(FIXTURES / "bert" / "heads" / "cls"))
    assert_matches(run(model, "bert"), "bert", "pf_ln")


# ---- fusion options the fixtures do not record, against the fixture script's independent reference ----------
def _reference_module():
    """The fixture script as a module (it imports its sibling scripts/fixture_runs.py)."""
    spec = importlib.util.spec_from_file_location("make_adapterhub_fixtures", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    with mock.patch.object(sys, "path", [str(SCRIPT.parent), *sys.path]):
        spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "options",
    [
        {"residual_before": True},
        {"temperature": True},
        {"query_before_ln": True, "value_before_softmax": False},
        {"residual_before": True, "value": False},
    ],
)
def test_fusion_options_match_reference_semantics(options, tmp_path):
    """residual_before (adapters adds the residual to keys too) and the per-call temperature, checked against
    ref_fusion of scripts/make_adapterhub_fixtures.py, which re-implements adapters' BertFusion."""
    ref = _reference_module()
    folder = edited_copy(FIXTURES / "bert" / "fusions" / "dynamic", "adapter_fusion_config.json", tmp_path, options)
    document = json.loads((folder / "adapter_fusion_config.json").read_text())
    weights = load_file(str(folder / SAFE["fusion"]))
    if not document["config"]["value"]:
        weights = {k: v for k, v in weights.items() if ".value." not in k}
    (folder / BIN["fusion"]).unlink()
    save_file(weights, str(folder / SAFE["fusion"]))

    model = fresh_model("bert")
    adapters = {}
    for adapter in FUSIONS["dynamic"]:
        model.load_adapter(FIXTURES / "bert" / "adapters" / adapter)
        cfg = json.loads((FIXTURES / "bert" / "adapters" / adapter / "adapter_config.json").read_text())["config"]
        adapters[adapter] = (cfg, load_file(str(FIXTURES / "bert" / "adapters" / adapter / SAFE["adapter"])))
    name = model.load_fusion(folder)
    model.activate(fusion=name)
    model.double().eval()  # float64 on both sides: the two computations must agree up to rounding
    torch.manual_seed(3)
    hidden, x = torch.randn(2, 5, 64, dtype=torch.float64), torch.randn(2, 5, 32, dtype=torch.float64)
    site = next(s for s in model.sites if s.layer_index == 1 and s.position == "output")
    prefix = "bert.encoder.layer.1.output."

    def strip(state, container):
        return {k[len(prefix + container) :]: v.double() for k, v in state.items() if k.startswith(prefix + container)}

    refs = [ref.RefAdapter(cfg, strip(state, f"adapters.{a}.")) for a, (cfg, state) in adapters.items()]
    fusion_w = strip(weights, f"adapter_fusion_layer.{document['name']}.")
    ln = site.pretrained_layer_norm
    with torch.no_grad():
        h = site.base_layer.dense(hidden)  # the sub-layer's own projection, which the site runs before the fusion
        expected, probs = ref.ref_fusion(document["config"], fusion_w, refs, h, x, ln)
        for implementation in ("fast", "reference"):
            model.set_fusion_implementation(implementation)
            with model.recording_fusion_attentions() as recorder:
                got = site(hidden, x)  # called as BertLayer calls its output sub-layer
            assert_close(got, expected)
            assert_close(recorder[(1, "output")], probs)


# ---- safety ------------------------------------------------------------------------------------------
class _RunsCode:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))  # unpickling would create the marker file


@pytest.mark.parametrize("writer", ["torch.save", "pickle.dump"])
def test_malicious_bin_is_refused_without_running_code(writer, tmp_path):
    folder = tmp_path / "evil"
    shutil.copytree(FIXTURES / "bert" / "adapters" / "pf", folder)
    (folder / SAFE["adapter"]).unlink()
    marker = tmp_path / "pwned"
    payload = {"bert.encoder.layer.0.output.adapters.pf.adapter_up.weight": _RunsCode(marker)}
    with open(folder / BIN["adapter"], "wb") as handle:
        torch.save(payload, handle) if writer == "torch.save" else pickle.dump(payload, handle)
    assert not marker.exists()
    model = fresh_model("bert")
    with pytest.raises(af.SerializationError, match="unsafe"):
        model.load_adapter(folder)
    assert not marker.exists()
    assert model.adapter_names == []


# ---- unsupported options -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "option, value",
    [
        ("use_gating", True),
        ("scaling", "learned"),
        ("scaling", "channel"),
        ("phm_layer", True),
        ("is_parallel", True),
        ("non_linearity", "gelu_new"),
        ("architecture", "lora"),
        ("some_future_option", True),
    ],
)
def test_unsupported_adapter_options_are_refused(option, value, tmp_path):
    folder = edited_copy(FIXTURES / "bert" / "adapters" / "pf", "adapter_config.json", tmp_path, config={option: value})
    model = fresh_model("bert")
    with pytest.raises(af.ConfigError, match=option):
        model.load_adapter(folder)
    assert model.adapter_names == []


@pytest.mark.parametrize("option", ["non_linearity", "reduction_factor", "mh_adapter", "output_adapter"])
def test_a_config_lacking_a_required_option_is_refused(option, tmp_path):
    """BnConfig has no default for these (adapters refuses such a config); we filled ours in, so a swish adapter
    whose non_linearity was lost imported as relu, with other outputs and no word."""
    folder = edited_copy(FIXTURES / "bert" / "adapters" / "pf", "adapter_config.json", tmp_path)
    document = json.loads((folder / "adapter_config.json").read_text())
    del document["config"][option]
    (folder / "adapter_config.json").write_text(json.dumps(document))
    model = fresh_model("bert")
    with pytest.raises(af.ConfigError, match=f"lacks {option}, which BnConfig requires"):
        model.load_adapter(folder)
    assert model.adapter_names == []


def test_bad_arguments_and_odd_config_values_get_library_errors(tmp_path):
    """A misspelt or listed kind raised KeyError or TypeError, a None folder TypeError; label2id with a string value
    and a listed init_weights raised TypeError from sorting and hashing inside the importer (a listed init_weights
    is now refused by name, as adapters fails on it)."""
    from adapterfusion.interop import load_adapterhub

    model = fresh_model("bert")
    for kind in ("adaptr", ["adapter"]):
        with pytest.raises(af.ConfigError, match="is not loadable; choose one of 'adapter', 'fusion', 'head'"):
            load_adapterhub(model, kind, FIXTURES / "bert" / "adapters" / "pf")
        with pytest.raises(af.ConfigError, match="is not exportable"):
            export_adapterhub(model, kind, "x", tmp_path / "x")
    with pytest.raises(af.ConfigError, match="the AdapterHub adapter folder None is not a path"):
        load_adapterhub(model, "adapter", None)
    ours = fresh_model("bert")
    ours.add_adapter("mine", "pfeiffer")
    ours.save_adapter("mine", tmp_path / "mine")  # its options were listed as unknown AdapterHub ones
    with pytest.raises(af.SerializationError, match="saved by save_adapter .*load it with model.load_adapter"):
        load_adapterhub(model, "adapter", tmp_path / "mine")
    odd = edited_copy(
        FIXTURES / "bert" / "adapters" / "pf", "adapter_config.json", tmp_path, config={"init_weights": ["bert"]}
    )
    with pytest.raises(af.ConfigError, match=r"init_weights=\['bert'\] is none of adapters' init schemes"):
        model.load_adapter(odd)  # init only, but adapters itself fails on it: not a file adapters loads
    head = edited_copy(
        FIXTURES / "bert" / "heads" / "cls", "head_config.json", tmp_path, config={"label2id": {"no": 0, "yes": "1"}}
    )
    assert model.load_head(head) in model.head_names  # label names that do not count 0..n-1 are not used


def test_a_cross_attention_adapter_needs_an_encoder_decoder(tmp_path):
    """cross_adapter=True is our 'cross' position (tests/decoders: T5 and BART); an encoder has no such site."""
    folder = edited_copy(
        FIXTURES / "bert" / "adapters" / "pf", "adapter_config.json", tmp_path, config={"cross_adapter": True}
    )
    model = fresh_model("bert")
    with pytest.raises(af.ConfigError, match="cross-attention"):
        model.load_adapter(folder)
    assert model.adapter_names == []


@pytest.mark.parametrize(
    "option, value",
    [
        ("dropout", "0.1"),
        ("dropout", None),
        ("dropout", 1.5),
        ("stochastic_depth", "0"),
        ("stochastic_depth", 2.0),
        ("init_weights", "xavier"),
        ("init_weights", None),
        ("init_weights_seed", "7"),
        ("scaling", 2),
        ("scaling", None),
        ("leave_out", None),
        ("non_linearity", 3),
        ("residual_before_ln", "yes"),
        ("ln_after", "no"),
        ("reduction_factor", "16"),
    ],
)
def test_option_values_adapters_itself_fails_on_are_refused_by_name(option, value, tmp_path):
    """Options we drop on import (dropout, stochastic_depth, init_weights, init_weights_seed) or read loosely still
    make adapters fail when it builds the adapter from a value of the wrong type: such a file is refused, naming the
    option and the file, not loaded as if it were a valid AdapterHub adapter."""
    folder = edited_copy(FIXTURES / "bert" / "adapters" / "pf", "adapter_config.json", tmp_path, config={option: value})
    model = fresh_model("bert")
    with pytest.raises(af.ConfigError, match=rf"adapter_config\.json: .*{option}="):
        model.load_adapter(folder)
    assert model.adapter_names == []


@pytest.mark.parametrize(
    "option, value",
    [
        ("original_ln_before", None),  # adapters reads its flags by truth value: null is false there too
        ("residual_before_ln", None),  # `not None`: the residual is h, as for False
        ("init_weights_seed", 7),
        ("stochastic_depth", -0.5),  # adapters adds DropPath only for a value > 0
        ("dropout", 1),
        ("phm_dim", "4"),  # read only by a PHM layer, which is refused anyway
    ],
)
def test_option_values_adapters_reads_as_we_do_still_load(option, value, tmp_path):
    folder = edited_copy(FIXTURES / "bert" / "adapters" / "pf", "adapter_config.json", tmp_path, config={option: value})
    model = fresh_model("bert")
    assert model.load_adapter(folder) in model.adapter_names


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("bias", None, "bias=None .*without a bias"),
        ("bias", 1, "bias=1 has type int"),
        ("use_pooler", "no", "use_pooler='no' has type str"),
        ("label2id", ["a", "b"], "label2id=\\['a', 'b'\\] has type list"),
        ("num_labels", "2", "num_labels='2' has type str"),
        ("num_labels", 2**70, "num_labels=1180591620717411303424 must be at most 2147483647 \\(a torch dimension\\)"),
    ],
)
def test_head_option_values_adapters_reads_otherwise_are_refused(option, value, message, tmp_path):
    folder = edited_copy(FIXTURES / "bert" / "heads" / "cls", "head_config.json", tmp_path, config={option: value})
    with pytest.raises(af.ConfigError, match=rf"head_config\.json: .*{message}"):
        fresh_model("bert").load_head(folder)


def test_an_integer_scaling_is_exported_as_the_float_adapters_requires(tmp_path):
    """adapters takes a constant scaling only as a float (isinstance(scaling, float)); 2 written as 2 fails there."""
    model = fresh_model("bert")
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4, scaling=2))
    export_adapterhub(model, "adapter", "a", tmp_path / "a")
    written = json.loads((tmp_path / "a" / "adapter_config.json").read_text())["config"]["scaling"]
    assert written == 2.0 and isinstance(written, float)
    assert fresh_model("bert").load_adapter(tmp_path / "a") == "a"


@pytest.mark.parametrize("option, value", [("use_pooler", True), ("head_type", "dependency_parsing"), ("bias", False)])
def test_unsupported_head_options_are_refused(option, value, tmp_path):
    folder = edited_copy(FIXTURES / "bert" / "heads" / "cls", "head_config.json", tmp_path, config={option: value})
    with pytest.raises(af.ConfigError, match=option):
        fresh_model("bert").load_head(folder)


def test_wrong_hidden_size_is_refused(tmp_path):
    folder = edited_copy(FIXTURES / "bert" / "adapters" / "pf", "adapter_config.json", tmp_path, hidden_size=64)
    with pytest.raises(af.IncompatibleModelError, match="hidden_size"):
        fresh_model("bert").load_adapter(folder)


def test_keys_without_model_prefix_are_accepted(tmp_path):
    """Saved from adapters.init(BertModel), keys have no 'bert.' prefix."""
    folder = tmp_path / "hb"
    shutil.copytree(FIXTURES / "bert" / "adapters" / "hb", folder)
    state = load_file(str(folder / SAFE["adapter"]))
    save_file({k[len("bert.") :]: v for k, v in state.items()}, str(folder / SAFE["adapter"]))
    model = fresh_model("bert")
    model.load_head(FIXTURES / "bert" / "heads" / "cls")
    model.activate(adapter=model.load_adapter(folder), head="cls")
    assert_matches(run(model, "bert"), "bert", "hb")


# ---- export ------------------------------------------------------------------------------------------
def _ours_with_everything(kind: str) -> af.AdaptedModel:
    model = fresh_model(kind)
    for adapter in ADAPTERS:
        model.load_adapter(FIXTURES / kind / "adapters" / adapter)
    model.load_fusion(FIXTURES / kind / "fusions" / "dynamic", name="dyn")
    model.load_head(FIXTURES / kind / "heads" / "cls")
    # An adapter with new LayerNorms before and after (exported with adapters' duplicated LayerNorm keys).
    model.add_adapter("lnb", af.AdapterConfig.pfeiffer(reduction_factor=4, ln_before=True, ln_after=True))
    with torch.no_grad():
        for p in model.adapter_parameters("lnb"):
            p.add_(torch.randn_like(p) * 0.1)
    return model


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("use_safetensors", [True, False])
def test_export_then_import_gives_identical_outputs(kind, use_safetensors, tmp_path):
    source = _ours_with_everything(kind)
    target = fresh_model(kind)
    for adapter in (*ADAPTERS, "lnb"):
        folder = export_adapterhub(source, "adapter", adapter, tmp_path / adapter, use_safetensors=use_safetensors)
        assert is_adapterhub_dir(folder, "adapter")
        assert target.load_adapter(folder) == adapter
    assert (
        target.load_fusion(export_adapterhub(source, "fusion", "dyn", tmp_path / "dyn", use_safetensors))
        == "pf-pf_relu-pf3"
    )
    target.load_head(export_adapterhub(source, "head", "cls", tmp_path / "cls", use_safetensors))
    document = json.loads((tmp_path / "dyn" / "adapter_fusion_config.json").read_text())
    assert document["name"] == "pf,pf_relu,pf3" and document["version"].startswith("adapters.")
    for setup in [dict(adapter=a) for a in (*ADAPTERS, "lnb")] + [dict(fusion="dyn")]:
        source.activate(head="cls", **setup)
        target.activate(head="cls", **(setup if "adapter" in setup else dict(fusion="pf-pf_relu-pf3")))
        ours, theirs = run(source, kind), run(target, kind)
        assert torch.equal(ours.logits, theirs.logits) and torch.equal(ours.last_hidden_state, theirs.last_hidden_state)


def test_exported_files_use_adapterhub_names(tmp_path):
    source = _ours_with_everything("bert")
    export_adapterhub(source, "adapter", "lnb", tmp_path / "a")
    state = load_file(str(tmp_path / "a" / SAFE["adapter"]))
    names = {k.split(".adapters.lnb.")[1] for k in state if k.startswith("bert.encoder.layer.0.output.")}
    assert names == {
        f"{m}.{p}"
        for m in ("adapter_norm_before", "adapter_down.0", "adapter_down.1", "adapter_up", "adapter_norm_after")
        for p in ("weight", "bias")
    }
    export_adapterhub(source, "head", "cls", tmp_path / "h", use_safetensors=False)
    assert set(torch.load(tmp_path / "h" / BIN["head"], weights_only=True)) == {
        f"heads.cls.{i}.{p}" for i in (1, 4) for p in ("weight", "bias")
    }


@pytest.mark.parametrize(
    "config",
    [
        af.AdapterConfig.pfeiffer(reduction_factor=8, non_linearity="leaky_relu", ln_after=True),
        af.AdapterConfig.houlsby(reduction_factor={"default": 4, "1": 2}, train_layer_norm=False, leave_out=(0,)),
        af.AdapterConfig(residual_before_ln="post_add", original_ln_after=False, scaling=0.25, init="zero_up"),
        af.AdapterConfig(residual_before_ln=False, ln_before=True, ln_after=True, init="bert"),
    ],
)
def test_adapter_config_round_trip(config):
    assert adapter_config_from_adapterhub(adapter_config_to_adapterhub(config)) == config


@pytest.mark.parametrize(
    "config",
    [
        af.FusionConfig.dynamic(score_dropout=0.1),
        af.FusionConfig.static(score_dropout=0.2),
        af.FusionConfig.dynamic(
            temperature=True, residual_before=True, query_before_ln=True, value_before_softmax=False, score_dropout=0.1
        ),
    ],
)
def test_fusion_config_round_trip(config):
    assert fusion_config_from_adapterhub(fusion_config_to_adapterhub(config)) == config


def test_export_refuses_what_adapterhub_cannot_hold():
    model = fresh_model("bert")
    model.add_adapter("h", af.AdapterConfig.houlsby())  # train_layer_norm=True: a private LayerNorm copy
    with torch.no_grad():
        model.sites_with_adapter("h")[0].adapters["h"].layer_norm.weight.add_(1.0)
    with pytest.raises(af.ConfigError, match="train_layer_norm"):
        export_adapterhub(model, "adapter", "h", "/nonexistent/never-written")
    model.add_adapter("p", "pfeiffer")
    model.add_fusion("f", ["p"], af.FusionConfig.dynamic(temperature=True, temperature_steps=10))
    with pytest.raises(af.ConfigError, match="temperature_steps"):
        export_adapterhub(model, "fusion", "f", "/nonexistent/never-written")


def test_own_format_still_loads(tmp_path):
    model = fresh_model("bert")
    model.add_adapter("mine", "pfeiffer")
    model.save_adapter("mine", tmp_path / "mine")
    assert not is_adapterhub_dir(tmp_path / "mine", "adapter")
    assert fresh_model("bert").load_adapter(tmp_path / "mine") == "mine"


@pytest.mark.parametrize(
    "config",
    [
        af.RegressionHead(layers=1, dropout=0.2),
        af.MultipleChoiceHead(num_labels=4, activation="relu"),
        af.ClassificationHead(num_labels=3, labels=("a", "b", "c"), layers=3, activation="gelu"),
    ],
)
def test_head_round_trip(config, tmp_path):
    source = fresh_model("bert")
    source.add_head("h", config)
    target = fresh_model("bert")
    target.load_head(export_adapterhub(source, "head", "h", tmp_path / "h"))
    assert target.heads["h"].config == source.heads["h"].config == dataclasses.replace(config, pooling="cls")
    for p, q in zip(source.heads["h"].parameters(), target.heads["h"].parameters(), strict=True):
        assert torch.equal(p, q)


def test_a_bert_generation_head_is_exported_for_adapters_bert_generation_model(tmp_path):
    """BERT-generation's base model is BertGenerationEncoder, whose flex-head model in adapters 1.3.0 is
    BertGenerationAdapterModel (the head file names it; was refused as 'no BertGenerationEncoderAdapterModel')."""
    source = af.wrap(tiny_encoder("bert-generation"))
    source.add_head("h", af.ClassificationHead(num_labels=3))
    folder = export_adapterhub(source, "head", "h", tmp_path / "h")
    assert json.loads((folder / "head_config.json").read_text())["model_class"] == "BertGenerationAdapterModel"
    target = af.wrap(tiny_encoder("bert-generation"))
    target.load_head(folder)
    for p, q in zip(source.heads["h"].parameters(), target.heads["h"].parameters(), strict=True):
        assert torch.equal(p, q)


def test_an_interrupted_export_leaves_nothing_in_the_way_of_its_retry(tmp_path, monkeypatch):
    """#F9: cut off after the weights, an export used to leave them behind, and its retry refused them as maybe
    not ours. Both files are now written before either is renamed into place."""
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", "pfeiffer")
    original, calls = atomic.create_temp_file, [0]

    def interrupted(final):
        calls[0] += 1
        if calls[0] == 2:
            raise KeyboardInterrupt
        return original(final)

    monkeypatch.setattr(atomic, "create_temp_file", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export_adapterhub(model, "adapter", "a", tmp_path / "hub")
    monkeypatch.undo()
    assert not (tmp_path / "hub").exists()
    export_adapterhub(model, "adapter", "a", tmp_path / "hub")
    assert sorted(p.name for p in (tmp_path / "hub").iterdir()) == ["adapter.safetensors", "adapter_config.json"]


def test_an_export_cut_off_between_its_renames_is_refused_until_exported_again(tmp_path, monkeypatch):
    """New weights beside the old config loaded without a word as neither adapter (AdapterHub's format has no
    digest to tell). The export keeps a pending file beside them from the first rename to the last."""
    folder = tmp_path / "hub"
    for seed in (0, 1):
        model = af.wrap(tiny_encoder("bert"))
        torch.manual_seed(seed)
        model.add_adapter("a", af.AdapterConfig.pfeiffer(non_linearity=("relu", "tanh")[seed]))
        if seed == 0:
            export_adapterhub(model, "adapter", "a", folder)
    real = atomic.os.replace

    def cut_off(source, target):
        if Path(target).name == "adapter_config.json":  # the weights are in place, the config is not
            raise KeyboardInterrupt
        return real(source, target)

    monkeypatch.setattr(atomic.os, "replace", cut_off)
    with pytest.raises(KeyboardInterrupt):
        export_adapterhub(model, "adapter", "a", folder, overwrite=True)
    monkeypatch.undo()
    with pytest.raises(af.SerializationError, match="was interrupted between writing its files.*export it again"):
        fresh_model("bert").load_adapter(folder)
    export_adapterhub(model, "adapter", "a", folder, overwrite=True)
    loaded = fresh_model("bert")
    assert loaded.adapter_configs[loaded.load_adapter(folder)].non_linearity == "tanh"
    assert sorted(p.name for p in folder.iterdir()) == ["adapter.safetensors", "adapter_config.json"]


@pytest.mark.parametrize(
    ("head_type", "layers"), [("classification", 2), ("multiple_choice", 2), ("tagging", 1), ("question_answering", 1)]
)
def test_head_options_left_out_take_the_defaults_of_adapters_head_class(head_type, layers):
    """adapters builds a tagging or question-answering head with one layer unless told otherwise (its head classes'
    defaults); a config without 'layers' was read as two, and the saved weights then did not fit."""
    assert head_config_from_adapterhub({"head_type": head_type}, 0.1).layers == layers


def test_head_options_that_adapters_head_class_does_not_take_are_refused():
    """adapters passes every option to the head class, which fails on one it does not take; a misspelt option was
    dropped unread here (a relu head built as tanh). label2id and id2label are read before, so both are allowed."""
    config = {"head_type": "classification", "num_labels": 2, "activation_function": "relu"}
    with pytest.raises(af.ConfigError, match=r"classification head option\(s\) \['activaton'\]"):
        head_config_from_adapterhub({**config, "activaton": "gelu"}, 0.1)
    with pytest.raises(af.ConfigError, match=r"question_answering head option\(s\) \['use_pooler'\]"):
        head_config_from_adapterhub({"head_type": "question_answering", "use_pooler": False}, 0.1)
    head = head_config_from_adapterhub({**config, "label2id": {"a": 0, "b": 1}, "id2label": {"0": "a"}}, 0.1)
    assert head.activation == "relu" and head.labels == ("a", "b")


def test_head_configs_without_an_activation_or_a_head_model_are_refused(tmp_path):
    """An AdapterHub head with activation_function=None (no activation between its layers) was read as tanh; a head
    exported for a model type adapters 1.3.0 has no head model for (Qwen2) named a class its load_head refuses; a
    CamemBERT adapter exported although adapters.init refuses CamemBERT."""
    config = {"head_type": "classification", "num_labels": 2, "layers": 2, "activation_function": None}
    with pytest.raises(af.ConfigError, match="activation_function=None is not supported"):
        head_config_from_adapterhub(config, 0.1)
    one_layer = head_config_from_adapterhub({**config, "layers": 1}, 0.1)
    assert one_layer.layers == 1
    qwen = af.wrap(tiny_decoder("qwen2"))
    qwen.add_head("h", af.ClassificationHead(num_labels=2, pooling="last"))
    with pytest.raises(af.UnsupportedArchitectureError, match="no head model for 'qwen2'.*Qwen2AdapterModel"):
        export_adapterhub(qwen, "head", "h", tmp_path / "qwen")
    camembert = af.wrap(tiny_encoder("camembert"))
    camembert.add_adapter("a")
    with pytest.raises(af.UnsupportedArchitectureError, match="not CamemBERT, Data2Vec-text or ERNIE"):
        export_adapterhub(camembert, "adapter", "a", tmp_path / "camembert")


def test_post_add_adapters_are_not_exported_where_adapterhub_gives_no_layer_norm(tmp_path):
    """adapters 1.3.0 loaded a 'post_add' adapter exported from GPT-2 or Llama and failed on its first forward
    (UnboundLocalError: its pre-norm sites have no LayerNorm); on BERT-style sites it exports as before."""
    config = af.AdapterConfig.pfeiffer(reduction_factor=4, residual_before_ln="post_add")
    for model_type in ("gpt2", "llama"):
        model = af.wrap(tiny_decoder(model_type))
        model.add_adapter("a", config)
        with pytest.raises(af.ConfigError, match="'post_add' cannot be exported for"):
            export_adapterhub(model, "adapter", "a", tmp_path / model_type)
        assert not (tmp_path / model_type).exists()
    bert = af.wrap(tiny_encoder())
    bert.add_adapter("a", config)
    assert is_adapterhub_dir(export_adapterhub(bert, "adapter", "a", tmp_path / "bert"), "adapter")


@pytest.mark.parametrize(
    ("saved", "loaded", "message"),
    [
        (4, 2, "is of layer [23], and this bert encoder has 2 layers; it was saved from an encoder with at least [34]"),
        (2, 4, "holds weights for the sites of layers \\[0, 1\\] but none for layers \\[2, 3\\]"),
    ],
)
def test_an_adapterhub_adapter_of_another_layer_count_is_refused_naming_the_counts(tmp_path, saved, loaded, message):
    """Loaded into an encoder of another depth, it was 'weights do not match the saved config (missing [...])' or
    'not at an adapter site', naming neither count."""
    model = af.wrap(tiny_encoder("bert", num_hidden_layers=saved))
    model.add_adapter("a", "pfeiffer")
    export_adapterhub(model, "adapter", "a", tmp_path / "a")
    with pytest.raises(af.IncompatibleModelError, match=message):
        af.wrap(tiny_encoder("bert", num_hidden_layers=loaded)).load_adapter(tmp_path / "a")


def test_an_export_again_into_its_folder_needs_overwrite(tmp_path):
    """Exporting an adapter again after more training was refused with no way through but another folder; now
    overwrite=True replaces the AdapterHub files of that kind (what is read back is the newer adapter), removing an
    earlier export's weights of the other format, which adapters could load instead; nothing else there is touched."""
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", "pfeiffer")
    export_adapterhub(model, "adapter", "a", tmp_path / "hub", use_safetensors=False)
    (tmp_path / "hub" / "notes.txt").write_text("mine")
    with pytest.raises(
        af.ConfigError,
        match=r"already holds adapter_config.json, pytorch_adapter.bin of an AdapterHub adapter.*overwrite=True",
    ):
        export_adapterhub(model, "adapter", "a", tmp_path / "hub")
    with torch.no_grad():  # "more training"
        for name, parameter in model.named_parameters():
            if ".adapters.a." in name:
                parameter.add_(0.5)
    export_adapterhub(model, "adapter", "a", tmp_path / "hub", overwrite=True)
    assert sorted(p.name for p in (tmp_path / "hub").iterdir()) == [
        "adapter.safetensors",
        "adapter_config.json",
        "notes.txt",
    ]
    back = af.wrap(tiny_encoder("bert"))
    back.load_adapter(tmp_path / "hub")
    for key, value in back.export_piece("adapter", "a").tensors.items():
        assert torch.equal(value, model.export_piece("adapter", "a").tensors[key]), key


def test_an_export_over_our_own_save_names_it_and_bad_folders_get_our_error(tmp_path):
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", "pfeiffer")
    model.save_adapter("a", tmp_path / "ours")
    with pytest.raises(af.ConfigError, match=r"of an adapter saved by save_adapter.*overwrite=True"):
        export_adapterhub(model, "adapter", "a", tmp_path / "ours")
    export_adapterhub(model, "adapter", "a", tmp_path / "ours", use_safetensors=False, overwrite=True)
    assert sorted(p.name for p in (tmp_path / "ours").iterdir()) == ["adapter_config.json", "pytorch_adapter.bin"]
    for bad in (None, 5, ""):
        with pytest.raises(af.ConfigError, match="is not a path"):
            export_adapterhub(model, "adapter", "a", bad)
    # the path is judged before anything in the folder is looked at (a NUL was a raw ValueError from os.scandir)
    os.mkfifo(tmp_path / "fifo")
    for bad, found in (("a\0b", "NUL character"), (tmp_path / "fifo", "FIFO"), (tmp_path / "ours" / "x" / "y", None)):
        if found is None:  # a path through a file
            (tmp_path / "ours" / "x").write_text("mine")
            found = "is a file, not a folder"
        with pytest.raises(af.ConfigError, match=found):
            export_adapterhub(model, "adapter", "a", bad, overwrite=True)
    assert (tmp_path / "ours" / "x").read_text() == "mine"


def test_an_export_over_our_save_keeps_weights_files_the_save_did_not_write(tmp_path):
    """A user's own pytorch_adapter.bin, then save_adapter into that folder, then export_adapterhub(overwrite=True)
    there removed the .bin as the replaced adapter's leftover weights: save_adapter never writes a .bin, so it is
    kept (the new adapter.safetensors is read first, so it hides nothing). A user's model_head.safetensors beside a
    head saved by save_head would hide a .bin export, which is refused, leaving every file as it was."""
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", "pfeiffer")
    model.add_head("h", af.ClassificationHead(num_labels=2))
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "pytorch_adapter.bin").write_bytes(b"my own weights")
    model.save_adapter("a", folder)
    export_adapterhub(model, "adapter", "a", folder, overwrite=True)
    assert (folder / "pytorch_adapter.bin").read_bytes() == b"my own weights"
    back = af.wrap(tiny_encoder("bert"))
    back.load_adapter(folder)
    for key, value in back.export_piece("adapter", "a").tensors.items():
        assert torch.equal(value, model.export_piece("adapter", "a").tensors[key]), key

    heads = tmp_path / "heads"
    heads.mkdir()
    (heads / "model_head.safetensors").write_bytes(b"my own head")
    model.save_head("h", heads)
    before = _digests(heads)
    with pytest.raises(af.ConfigError, match=r"holds model_head.safetensors, which is not part of the head"):
        export_adapterhub(model, "head", "h", heads, use_safetensors=False, overwrite=True)
    assert _digests(heads) == before


def _digests(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def test_saves_and_exports_into_a_model_folder_are_refused_and_change_nothing(tmp_path):
    """save_adapter / save_fusion / save_head and export_adapterhub into a folder that holds a HuggingFace model
    (config.json, model.safetensors, tokenizer files, a model card): none of our file names is one of the model's,
    but the mix is harmful (with peft installed, transformers' from_pretrained reads an adapter_config.json beside a
    model as a PEFT adapter and fails on ours), so each is refused, naming the folder and its model files, and
    leaves every file as it was; save_pretrained refuses such a folder as a whole. A subfolder is a folder of its
    own."""
    model = af.wrap(tiny_encoder("bert"))
    for name in ("a", "b"):
        model.add_adapter(name, "pfeiffer")
    model.add_fusion("f", ["a", "b"])
    model.add_head("h", af.ClassificationHead(num_labels=2))
    folder = tmp_path / "model"
    tiny_encoder("bert").save_pretrained(folder)
    AutoTokenizer.from_pretrained(af.default_encoder_path()).save_pretrained(folder)
    (folder / "README.md").write_text("the model's card")
    (folder / "pytorch_model.bin").write_bytes(b"the model's pickled weights")
    before = _digests(folder)
    held = r"holds a HuggingFace model \(config\.json, model\.safetensors, pytorch_model\.bin\)"
    for kind, name in (("adapter", "a"), ("fusion", "f"), ("head", "h")):
        peft = ".*PEFT adapter" if kind == "adapter" else ""
        with pytest.raises(af.ConfigError, match=rf"save_{kind}: .*{held}; each {kind} goes into a folder{peft}"):
            getattr(model, f"save_{kind}")(name, folder)
        with pytest.raises(af.ConfigError, match=rf"export_adapterhub: .*{held}"):
            export_adapterhub(model, kind, name, folder, use_safetensors=False, overwrite=True)
    with pytest.raises(af.ConfigError, match="is not empty.*is not a saved setup"):
        model.save_pretrained(folder)
    assert _digests(folder) == before and sorted(p.name for p in folder.iterdir() if p.is_dir()) == []
    model.save_adapter("a", folder / "adapters" / "a")
    export_adapterhub(model, "head", "h", folder / "hub-head")
    assert _digests(folder) == before


def test_a_folder_is_a_model_folder_by_its_config_or_weights_only(tmp_path):
    """A run folder's config.json (no model_type) and an AdapterHub head's model_head.safetensors are no model."""
    from adapterfusion.encoder_folders import model_files_in

    (tmp_path / "config.json").write_text(json.dumps({"task": "rte", "setup": "st-a"}))
    (tmp_path / "model_head.safetensors").write_bytes(b"")
    (tmp_path / "model_adapter_fusion.safetensors").write_bytes(b"")
    assert model_files_in(tmp_path) == []
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"")
    (tmp_path / "tiny.gguf").write_bytes(b"")
    assert model_files_in(tmp_path) == ["model-00001-of-00002.safetensors", "tiny.gguf"]
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    assert model_files_in(tmp_path)[0] == "config.json"
    assert model_files_in(tmp_path / "missing") == []


@pytest.mark.parametrize("overwrite", [False, True])
def test_an_export_never_replaces_another_librarys_config_of_the_same_name(tmp_path, overwrite):
    """A PEFT adapter's adapter_config.json was replaced by export_adapterhub(..., overwrite=True), and without it
    was called 'an adapter saved by save_adapter'."""
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", "pfeiffer")
    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8}))
    before = _digests(tmp_path)
    with pytest.raises(af.ConfigError, match="neither an AdapterHub adapter nor one that save_adapter wrote"):
        export_adapterhub(model, "adapter", "a", tmp_path, overwrite=overwrite)
    assert _digests(tmp_path) == before


@pytest.mark.parametrize(
    ("model_type", "deeper", "part"),
    [
        ("t5", {"num_layers": 2, "num_decoder_layers": 3}, "decoder"),
        ("t5", {"num_layers": 3, "num_decoder_layers": 2}, "encoder"),
        ("bart", {"encoder_layers": 2, "decoder_layers": 3}, "decoder"),
        ("bart", {"encoder_layers": 3, "decoder_layers": 2}, "encoder"),
    ],
)
def test_an_encoder_decoder_adapter_of_a_deeper_stack_names_that_stack(tmp_path, model_type, deeper, part):
    """Only the encoder's layers were counted: a T5 or BART adapter from a deeper decoder, or a deeper encoder whose
    extra layer the model's decoder numbering covers, was 'not at an adapter site ... expected encoder.block.<i>'."""
    model = af.wrap(tiny_decoder(model_type, **deeper))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    export_adapterhub(model, "adapter", "a", tmp_path / "a")
    with pytest.raises(
        af.IncompatibleModelError, match=f"is of layer 2 of its {part}, and this .* {part} has 2 layers"
    ):
        af.wrap(tiny_decoder(model_type)).load_adapter(tmp_path / "a")
