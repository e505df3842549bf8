"""Composition blocks (issue #24 item 2): Stack, Fuse, Average, BatchSplit, Parallel and average_adapters.

The fast path (injection/composed.py, through activate() and per-example adapter_names) is checked in float64
against a literal reference written here: each example run alone through the bare encoder, with every site's output
replaced by a forward hook that computes the block's equations from the site's inputs by hand. AdapterHub parity
is in tests/interop/test_adapterhub_blocks.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import adapterfusion as af
from adapterfusion.fusion.layer import fuse_reference
from tiny_decoders import tiny_decoder, tiny_decoder_inputs
from tiny_models import randomise, tiny_encoder, tiny_inputs
from tolerances import assert_close

CONFIGS = {
    "a": af.AdapterConfig.pfeiffer(reduction_factor=8),
    "b": af.AdapterConfig.pfeiffer(reduction_factor=16, non_linearity="tanh"),
    "c": af.AdapterConfig.pfeiffer(reduction_factor=8, leave_out=(1,)),  # not at layer 1
    "d": af.AdapterConfig.pfeiffer(reduction_factor=8),  # a's config: a and d can be averaged weight by weight
    "h": af.AdapterConfig.houlsby(reduction_factor=8),  # two sites per layer, its own LayerNorm copies
}


def _model() -> af.AdaptedModel:
    """A float64 tiny BERT with randomised adapters, a fusion 'f' over a and b, and a head."""
    model = af.wrap(tiny_encoder("bert").double())
    for name, config in CONFIGS.items():
        model.add_adapter(name, config)
        randomise(nn.ModuleList(site.adapters[name] for site in model.sites_with_adapter(name)), std=0.3)
    model.add_fusion("f", ["a", "b"], af.FusionConfig.dynamic(value_init_noise=0.05))
    for parameter in model.fusion_parameters("f"):
        parameter.data.add_(torch.randn_like(parameter) * 0.2)
    model.add_head("cls", af.ClassificationHead(num_labels=3))
    return model.eval()


@pytest.fixture(scope="module")
def model() -> af.AdaptedModel:
    torch.manual_seed(0)
    return _model()


def _inputs(batch: int) -> dict[str, torch.Tensor]:
    inputs = tiny_inputs(batch=batch, seq=8)
    inputs["attention_mask"][batch - 1, 3:] = 0
    return inputs


# ---- the literal reference ----------------------------------------------------------------------------------------
def _bottleneck(adapter: Any, x: torch.Tensor) -> torch.Tensor:
    """up(act(down(x))) * scaling, for adapters without LayerNorms inside (ln_before / ln_after)."""
    assert adapter.ln_before is None and adapter.ln_after is None
    return adapter.up(adapter.activation(adapter.down(x))) * adapter.config.scaling


def _placed(adapter: Any, site_norm: nn.Module, h: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, Any]:
    """(x, residual, LayerNorm) of one adapter at a BERT-style site, from the AdapterConfig docstring."""
    config, norm = adapter.config, adapter.layer_norm if adapter.layer_norm is not None else site_norm
    x = norm(h + r) if config.original_ln_before else h
    residual = {True: h, "post_add": h + r, False: x}[config.residual_before_ln]
    return x, residual, norm


def _literal(site: Any, node: Any, h: torch.Tensor, r: torch.Tensor, end: bool) -> torch.Tensor:
    """What `node` (a name, or a block with names) gives at a BERT site, written out."""
    site_norm = site.base_layer.LayerNorm
    if isinstance(node, str) and node in site.fusions:
        node = af.Fuse(name=node)
    if isinstance(node, af.Stack):
        present = [c for c in node.children if _held(site, c)]
        for index, child in enumerate(present):
            h = _literal(site, child, h, r, end and index == len(present) - 1)
        return h
    if isinstance(node, af.Average):
        adapters = [site.adapters[name] for name in node.children]
        x, residual, _ = _placed(adapters[0], site_norm, h, r)
        out = sum(w * (_bottleneck(a, x) + residual) for w, a in zip(node.weights, adapters, strict=True))
        norm = _placed(adapters[-1], site_norm, h, r)[2]
        return norm(out + r) if end and adapters[-1].config.original_ln_after else out
    if isinstance(node, af.Fuse):
        fusion = site.fusions[node.name]
        adapters = [site.adapters[name] for name in ("a", "b")]  # the test's one fusion
        x, residual, norm = _placed(adapters[-1], site_norm, h, r)
        out, _ = fuse_reference(fusion, adapters, x, x, residual)
        return norm(out + r) if end else out
    adapter = site.adapters[node]
    x, residual, norm = _placed(adapter, site_norm, h, r)
    out = _bottleneck(adapter, x) + residual
    return norm(out + r) if end and adapter.config.original_ln_after else out


def _held(site: Any, node: Any) -> bool:
    if isinstance(node, af.Fuse):
        return node.name in site.fusions
    if isinstance(node, af.Block):
        return any(_held(site, child) for child in node.children)
    return node in site.adapters or node in site.fusions


def _reference_row(model: af.AdaptedModel, inputs: dict, row: int, node: Any) -> torch.Tensor:
    """Example `row` alone through the bare encoder, each site's output replaced by `_literal` (None: bare)."""
    single = {key: value[row : row + 1] for key, value in inputs.items()}
    handles = []

    def hook(site: Any, args: tuple, output: torch.Tensor) -> torch.Tensor:
        if node is None or not _held(site, node):
            return output
        h = site.base_layer.dropout(site.base_layer.dense(args[0]))
        return _literal(site, node, h, args[1], end=True)

    for site in model.sites:
        handles.append(site.register_forward_hook(hook))
    try:
        with model.activated(head="cls"), torch.no_grad():
            return model(**single).logits[0]
    finally:
        for handle in handles:
            handle.remove()


def _reference(model: af.AdaptedModel, inputs: dict, nodes: list[Any]) -> torch.Tensor:
    return torch.stack([_reference_row(model, inputs, row, node) for row, node in enumerate(nodes)])


# ---- exactness ----------------------------------------------------------------------------------------------------
BLOCKS: dict[str, Callable[[], Any]] = {
    "stack": lambda: af.Stack("a", "b"),
    "stack_three_leave_out": lambda: af.Stack("c", "a", "b"),
    "stack_houlsby": lambda: af.Stack("h", "a"),  # h alone at the attention sites, its own LayerNorm copies
    "stack_fuse": lambda: af.Stack("c", af.Fuse("a", "b")),  # c's output fused (AdapterHub's issue #574)
    "stack_fusion_name": lambda: af.Stack("b", "f"),
    "average": lambda: af.Average("a", "b", "d", weights=[0.2, 0.5, 0.3]),
    "average_unnormalised": lambda: af.Average("a", "d", weights=[2.0, -0.5], normalize_weights=False),
    "stack_average": lambda: af.Stack("b", af.Average("a", "d")),
}


def _literal_node(block: Any) -> Any:
    """The block as `_literal` reads it (names; Fuse by its fusion's name)."""
    if isinstance(block, af.Fuse):
        return af.Fuse(name="f")
    if isinstance(block, af.Average):
        return af.Average(*block.children, weights=block.weights, normalize_weights=False)
    if isinstance(block, af.Stack):
        return af.Stack(*(_literal_node(c) for c in block.children))
    return block


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_an_activated_block_equals_its_literal_equations(model: af.AdaptedModel, name: str) -> None:
    inputs = _inputs(2)
    block = BLOCKS[name]()
    with model.activated(block, head="cls"), torch.no_grad():
        fast = model(**inputs).logits
    assert_close(fast, _reference(model, inputs, [_literal_node(block)] * 2))


def test_blocks_as_per_example_choices_equal_each_example_alone(model: af.AdaptedModel) -> None:
    inputs = _inputs(6)
    names = [af.Stack("a", "b"), "a", None, af.Stack("c", af.Fuse("a", "b")), af.Average("a", "d"), "f"]
    with model.activated(head="cls"), torch.no_grad():
        routed = model(**inputs, adapter_names=names).logits
    assert_close(routed, _reference(model, inputs, [_literal_node(n) for n in names]))


def test_batch_split_gives_each_row_its_child(model: af.AdaptedModel) -> None:
    inputs = _inputs(5)
    block = af.BatchSplit("a", af.Stack("b", "a"), None, "f", batch_sizes=[1, 2, 1, 1])
    with model.activated(block, head="cls"), torch.no_grad():
        fast = model(**inputs).logits
    nodes = ["a", af.Stack("b", "a"), af.Stack("b", "a"), None, "f"]
    assert_close(fast, _reference(model, inputs, nodes))


def test_parallel_runs_the_batch_once_per_child_in_adapterhubs_layout(model: af.AdaptedModel) -> None:
    inputs = _inputs(2)
    with model.activated(af.Parallel("a", af.Stack("b", "a"), "f"), head="cls"), torch.no_grad():
        out = model(**inputs)
    assert out.logits.shape[0] == 6 and out.last_hidden_state.shape[0] == 6
    twice = {key: value.repeat(3, 1) for key, value in inputs.items()}
    nodes = ["a", "a", af.Stack("b", "a"), af.Stack("b", "a"), "f", "f"]
    assert_close(out.logits, _reference(model, twice, nodes))


def test_parallel_matches_forward_parallel(model: af.AdaptedModel) -> None:
    inputs = _inputs(3)
    model.add_head("a", af.ClassificationHead(num_labels=3), overwrite=True)
    with torch.no_grad():
        expected = model.forward_parallel("f", heads={"a": "cls", "b": "cls"}, fusion_head="cls", **inputs)
        with model.activated(af.Parallel("a", "b", "f"), head="cls"):
            logits = model(**inputs).logits
    model.delete_head("a")
    assert_close(logits, torch.cat([*expected.adapter_logits.values(), expected.fusion_logits]))


def test_stack_of_one_is_the_adapter_and_stacks_are_graded(model: af.AdaptedModel) -> None:
    inputs = _inputs(2)
    with torch.no_grad():
        with model.activated("a"):
            alone = model(**inputs).last_hidden_state
        with model.activated(af.Stack("a")):
            assert_close(model(**inputs).last_hidden_state, alone)
    model.train()
    with model.activated(af.Stack("a", af.Fuse("a", "b")), head="cls"):
        loss = model(**inputs, labels=torch.tensor([0, 2])).loss
        loss.backward()
    model.eval()
    grads = {name: [p.grad for p in model.adapter_parameters(name)] for name in ("a", "b")}
    assert all(g is not None and g.abs().sum() > 0 for g in grads["a"] + grads["b"])
    model.zero_grad(set_to_none=True)


def test_average_adapters_averages_every_weight(model: af.AdaptedModel) -> None:
    assert model.average_adapters("ad", {"a": 1.0, "d": 3.0}) == CONFIGS["a"]
    for site in model.sites_with_adapter("ad"):
        for key, value in site.adapters["ad"].state_dict().items():
            a, d = site.adapters["a"].state_dict()[key], site.adapters["d"].state_dict()[key]
            assert_close(value, 0.25 * a + 0.75 * d)
    assert model.adapter_configs["ad"] == CONFIGS["a"]
    model.delete_adapter("ad")
    with pytest.raises(af.ConfigError, match="adapter 'b' has reduction_factor=16.0 but 'a' has reduction_factor=8"):
        model.average_adapters("ab", ["a", "b"])
    with pytest.raises(af.NameNotFoundError, match="zz"):
        af.average_adapters(model, "az", ["a", "zz"])
    with pytest.raises(af.ConfigError, match="one of the adapters it averages"):
        model.average_adapters("a", ["a", "d"], overwrite=True)
    assert "ab" not in model.adapter_names and "az" not in model.adapter_names


def test_a_block_on_a_decoder_equals_each_example_alone() -> None:
    torch.manual_seed(0)
    model = af.wrap(tiny_decoder("llama").double())
    for name in ("a", "b"):
        model.add_adapter(name, CONFIGS[name])
        randomise(nn.ModuleList(site.adapters[name] for site in model.sites_with_adapter(name)), std=0.3)
    model.eval()
    inputs = tiny_decoder_inputs("llama", batch=3)
    choices = [af.Stack("a", "b"), af.Average("a", "b", weights=[0.4, 0.6]), "a"]
    with torch.no_grad():
        routed = model(**inputs, adapter_names=choices).logits
        for row, choice in enumerate(choices):
            with model.activated(choice):
                single = {key: value[row : row + 1] for key, value in inputs.items()}
                alone = model(**single).logits[0]
            valid = inputs["attention_mask"][row].bool()
            assert_close(routed[row][valid], alone[valid])
    with model.activated(af.BatchSplit("a", "b", batch_sizes=[1, 2])), pytest.raises(af.ConfigError, match="wrapped"):
        model.model(**inputs)  # the wrapped model alone cannot lay out the batch (model.generate routes it)


# ---- activation, saving, refusals ------------------------------------------------------------------------------
def test_activation_keeps_the_old_api_and_puts_back_what_ran(model: af.AdaptedModel, tmp_path) -> None:
    model.activate("a", head="cls")
    with model.activated(af.Stack("a", "b")) as state:
        assert state.block == af.Stack(("adapter", "a"), ("adapter", "b")) and model.active_adapter is None
        assert model.active_block is state.block
    assert model.active_adapter == "a" and model.active_block is None
    model.activate(af.Stack("a", "f"), head="cls")
    model.save_pretrained(tmp_path / "setup")
    loaded = af.AdaptedModel.from_pretrained(tiny_encoder("bert").double(), tmp_path / "setup")
    assert loaded.active_block is None  # a block is a value, not a saved piece
    model.activate(fusion="f")
    assert model.active_block is None and model.active_fusion == "f"
    model.activate()


BAD: dict[str, tuple[Callable[[], Any], type[Exception], str]] = {
    "unknown adapter": (lambda: af.Stack("a", "nope"), af.NameNotFoundError, "'nope' is neither"),
    "fusion in Average": (lambda: af.Average("a", "f"), af.ConfigError, "Average takes adapters only"),
    "Fuse of no fusion": (lambda: af.Stack("a", af.Fuse("b", "a")), af.NameNotFoundError, "no loaded fusion"),
    "Fuse of the wrong fusion": (lambda: af.Fuse("b", "a", name="f"), af.ConfigError, "which fuses"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_blocks_are_refused_on_activation(model: af.AdaptedModel, case: str) -> None:
    make, error, match = BAD[case]
    model.activate()
    with pytest.raises(error, match=match):
        model.activate(make())
    assert model.active_block is None


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: af.Stack(), "has no children"),
        (lambda: af.Average(weights=[]), "has no children"),  # was max()'s ValueError on an empty sequence
        (lambda: af.Average(weights=[], normalize_weights=False), "has no children"),
        (lambda: af.Average("a", "b", weights=[1.0]), "one finite number per adapter"),
        (lambda: af.Average("a", "b", weights={"w": "x" * 10**6}), r"^Average\(weights=\{'w': 'x{60,80}\.\.\.'\}\): "),
        (lambda: af.Average("a", "b", weights=[1.0, -1.0]), "sum to 0"),
        (lambda: af.BatchSplit("a", "b", batch_sizes=[1]), "one row count per child"),
        (lambda: af.BatchSplit("a", batch_sizes=[-1]), "an int >= 0"),
        (lambda: af.Stack("a", af.BatchSplit("a", batch_sizes=1)), "Stack cannot hold BatchSplit"),
        (lambda: af.Average(af.Stack("a")), "Average cannot hold Stack"),
        (lambda: af.Fuse("a", af.Stack("b")), "Fuse cannot hold Stack"),
        (lambda: af.BatchSplit(af.Parallel("a"), batch_sizes=1), "BatchSplit cannot hold Parallel"),
        (lambda: af.Stack("a", 3), "has type int"),
        (lambda: af.Stack(None), "has type NoneType"),
    ],
)
def test_malformed_blocks_are_refused_when_made(make: Callable[[], Any], match: str) -> None:
    with pytest.raises(af.ConfigError, match=match):
        make()


def test_bad_calls_with_blocks_are_refused(model: af.AdaptedModel) -> None:
    inputs = _inputs(3)
    with model.activated(af.BatchSplit("a", "b", batch_sizes=[1, 1])), pytest.raises(af.ConfigError, match="covers 2"):
        model(**inputs)
    with pytest.raises(af.ConfigError, match="cannot be one example's choice"):
        model(**inputs, adapter_names=["a", af.BatchSplit("a", batch_sizes=1), "b"])
    with model.activated(af.Parallel("a", "b")), pytest.raises(af.ConfigError, match="without it"):
        model(**inputs, adapter_names=["a", "b", "a"])
    with pytest.raises(af.ConfigError, match="either in the"):
        model.average_adapters("x", {"a": 1.0}, weights=[1.0])


def test_a_block_given_to_train_adapter_or_train_fusion_says_how_to_train_under_it() -> None:
    """train_adapter(af.Stack(...)) said only that it expected a string: train one piece, then activate the block."""
    model = _model()
    with pytest.raises(af.ConfigError, match=r"train_adapter\(Stack.*model.train_adapter\('b'\), then .*activate"):
        model.train_adapter(af.Stack("a", "b"))
    with pytest.raises(af.ConfigError, match=r"train_fusion\(Fuse.*model.train_fusion\('f'\)"):
        model.train_fusion(af.Fuse(name="f"))
    model.train_adapter("b", head="cls")
    model.activate(af.Stack("a", "b"), head="cls")  # what that says: b trains, under the Stack
    model(**_inputs(2), labels=torch.tensor([0, 1])).loss.backward()
    assert all(p.grad is not None for p in model.adapter_parameters("b"))
    assert all(p.grad is None for p in model.adapter_parameters("a"))


def test_parallel_routes_take_their_own_heads_and_a_stack_caches_its_fusion(model: af.AdaptedModel) -> None:
    inputs = _inputs(2)
    model.add_head("two", af.ClassificationHead(num_labels=2))
    with torch.no_grad():
        with model.activated(af.Parallel("a", af.Stack("b", "f"))):
            out = model(**inputs, head_names=["cls", "cls", "two", "two"])  # one head per row of the repeated batch
        with model.activated("a", head="cls"):
            assert_close(torch.stack(out.row_logits[:2]), model(**inputs).logits)
        with model.activated(af.Stack("b", "f"), head="two"):
            stacked = model(**inputs, output_fusion_attentions=True)
            assert_close(torch.stack(out.row_logits[2:]), stacked.logits)
            assert stacked.fusion_attentions is not None and stacked.fusion_attentions[0].shape[-1] == 2
            with model.inference_cache():  # the fusion folded once, reused inside the Stack
                assert_close(model(**inputs).logits, stacked.logits)
        with model.activated(af.Parallel("a", af.Stack("b", "f"))):  # one head per example: each copy takes it
            per_example = model(**inputs, head_names=["cls", "two"])
            per_row = model(**inputs, head_names=["cls", "two", "cls", "two"])
            for got, want in zip(per_example.row_logits, per_row.row_logits, strict=True):
                assert torch.equal(got, want)
            with pytest.raises(af.ConfigError, match=r"3 entries for a batch of 2 examples under a Parallel .* \(4, "):
                model(**inputs, head_names=["cls"] * 3)
    model.delete_head("two")


@pytest.mark.parametrize("preset", ["houlsby", "pfeiffer"])
@pytest.mark.parametrize("model_type", ["distilbert", "modernbert", "t5", "bart", "gemma2"])
def test_blocks_reduce_to_one_adapter_at_every_kind_of_site(model_type: str, preset: str) -> None:
    """At each kind of site (DistilBERT/BART: the block adds r and normalises; T5/Gemma2: pre-norm; ModernBERT: no
    r visible): a Stack with an adapter whose up-projection is zero, on either side, and an Average of an adapter
    with its own copy, each give that adapter alone."""
    torch.manual_seed(0)
    decoder = model_type in ("t5", "bart", "gemma2")
    base = tiny_decoder(model_type) if decoder else tiny_encoder(model_type)
    model = af.wrap(base.double()).eval()
    options = {"train_layer_norm": False} if preset == "houlsby" else {}  # no LayerNorm copies at every kind
    config = getattr(af.AdapterConfig, preset)(reduction_factor=8, **options)
    for name in ("a", "zero", "copy"):
        model.add_adapter(name, config)
    randomise(nn.ModuleList(site.adapters["a"] for site in model.sites_with_adapter("a")), std=0.3)
    for site in model.sites_with_adapter("a"):
        site.adapters["copy"].load_state_dict(site.adapters["a"].state_dict())
        randomise(site.adapters["zero"].down, std=0.3)
        nn.init.zeros_(site.adapters["zero"].up.weight)
        nn.init.zeros_(site.adapters["zero"].up.bias)
    inputs = tiny_decoder_inputs(model_type) if decoder else tiny_inputs(batch=2)
    with torch.no_grad():
        with model.activated("a"):
            alone = model(**inputs).logits if decoder else model(**inputs).last_hidden_state
        with model.activated():
            bare = model(**inputs).logits if decoder else model(**inputs).last_hidden_state
        assert (alone - bare).abs().max() > 1e-3
        for block in (af.Stack("a", "zero"), af.Stack("zero", "a"), af.Average("a", "copy")):
            with model.activated(block):
                out = model(**inputs)
            assert_close(out.logits if decoder else out.last_hidden_state, alone)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_blocks_on_cuda_equal_the_cpu(model: af.AdaptedModel) -> None:
    """The blocks' index and mask tensors are made on the inputs' device: float64 on CUDA equals the CPU."""
    inputs = _inputs(4)
    model.set_fusion_mask("f", ["b"])
    calls = [
        (af.Stack("c", af.Fuse("a", "b")), {}),
        (af.BatchSplit("a", af.Average("a", "d"), None, batch_sizes=[1, 2, 1]), {}),
        (af.Parallel("a", af.Stack("b", "a")), {}),
        (None, {"adapter_names": ["a", af.Stack("b", "f"), None, af.Average("a", "d")]}),
    ]
    try:
        with torch.no_grad():
            expected = []
            for block, options in calls:
                with model.activated(block, head="cls"):
                    expected.append(model(**inputs, **options).logits)
            model.cuda()
            on_cuda = {key: value.cuda() for key, value in inputs.items()}
            for (block, options), cpu in zip(calls, expected, strict=True):
                with model.activated(block, head="cls"):
                    assert_close(model(**on_cuda, **options).logits.cpu(), cpu)
    finally:
        model.cpu()
        model.set_fusion_mask("f", None)


def test_huge_finite_average_weights_are_scaled_not_overflowed(model: af.AdaptedModel) -> None:
    """[1e308, 1e308] overflow when summed; they mean equal weights, in a block and in a weight-space average."""
    assert af.Average("a", "d", weights=[1e308, 1e308]).weights == (0.5, 0.5)
    assert af.Average("a", "d", weights=[1e308, -5e307]).weights == (2.0, -1.0)
    model.average_adapters("ad", ["a", "d"], weights=[5e307, 1.5e308])  # sum: inf
    for site in model.sites_with_adapter("ad"):
        for key, value in site.adapters["ad"].state_dict().items():
            a, d = site.adapters["a"].state_dict()[key], site.adapters["d"].state_dict()[key]
            assert_close(value, 0.25 * a + 0.75 * d)
    model.delete_adapter("ad")


def test_deleting_a_piece_of_the_active_block_deactivates_the_block(model: af.AdaptedModel) -> None:
    """The block no longer runs what it was made of: the bare encoder runs (with the head kept), not a block
    silently missing a child."""
    inputs = _inputs(2)
    with model.activated(head="cls"), torch.no_grad():
        bare = model(**inputs).logits
    for block, delete, fused in (
        (lambda: af.Stack("e", "b"), lambda: model.delete_adapter("e"), False),
        (lambda: af.Average("a", "e"), lambda: model.delete_adapter("e"), False),
        (lambda: af.Stack("a", af.Fuse("a", "e")), lambda: model.delete_fusion("g"), True),
    ):
        model.add_adapter("e", CONFIGS["a"])
        if fused:
            model.add_fusion("g", ["a", "e"])
        model.activate(block(), head="cls")
        delete()
        assert model.active_block is None and model.active_head == "cls"
        with torch.no_grad():
            assert_close(model(**inputs).logits, bare)
        if "e" in model.adapter_names:
            model.delete_adapter("e")
    model.activate()


def test_a_fuse_block_trains_with_its_fusions_regulariser():
    """Alone a Fuse block is its fusion, in a Stack its fusion still trains: its V regulariser belongs in the loss
    (it was left out, 0.64 against 0.86, with other gradients), also for routed rows that run the block."""
    model = af.wrap(tiny_encoder("bert", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0).double())
    for name in ("a", "b"):
        model.add_adapter(name, "pfeiffer")
    model.add_fusion("f", ["a", "b"])
    model.add_head("h", af.ClassificationHead(num_labels=2))
    randomise(model, std=0.1)
    model.double().train_fusion("f", head="h")
    model.train()
    batch, labels = tiny_inputs(batch=2), torch.tensor([0, 1])

    def loss(**routing: Any) -> Any:
        torch.manual_seed(0)  # the head's dropout draws the same masks in every call
        return model(**batch, labels=labels, **routing)

    expected = loss()
    assert expected.fusion_regularization is not None and expected.fusion_regularization > 0
    for choice in (af.Fuse("a", "b"), af.Stack(af.Fuse("a", "b"))):
        with model.activated(choice, head="h"):
            assert_close(loss().loss, expected.loss, dtype=torch.float64)
    routed = loss(adapter_names=[af.Fuse("a", "b"), af.Fuse("a", "b")], head_names=["h", "h"])
    assert_close(routed.loss, expected.loss, dtype=torch.float64)


def test_train_head_keeps_the_active_block_running():
    """train_head keeps what runs (documented); it switched an active block off, changing the logits by 1.5."""
    model = af.wrap(tiny_encoder("bert").double())
    for name in ("a", "b"):
        model.add_adapter(name, "pfeiffer")
    model.add_head("h", af.ClassificationHead(num_labels=2))
    randomise(model, std=0.1)
    model.double().eval()
    model.activate(af.Stack("a", "b"), head="h")
    block, before = model.active_block, model(**tiny_inputs()).logits
    model.train_head("h")
    assert model.active_block == block
    assert_close(model.eval()(**tiny_inputs()).logits, before, dtype=torch.float64)


def test_a_block_that_no_longer_fits_a_replaced_piece_stops_with_a_warning():
    """Replacing (overwrite=True) the fusion an active Stack fuses by one over other adapters kept the Stack running
    the new fusion over the old adapter list, a state activate() refuses; a replacement that fits keeps running."""
    model = af.wrap(tiny_encoder("bert").double())
    for name in ("a", "b", "c"):
        model.add_adapter(name, "pfeiffer")
    model.add_fusion("f", ["a", "b"])
    model.activate(af.Stack("c", af.Fuse("a", "b")))
    model.add_fusion("f", ["a", "b"], overwrite=True)
    assert model.active_block == af.Stack(("adapter", "c"), af.Fuse(("adapter", "a"), ("adapter", "b"), name="f"))
    with pytest.warns(UserWarning, match="the fusion 'f' was replaced, and what ran before cannot run"):
        model.add_fusion("f", ["a", "b", "c"], overwrite=True)
    assert model.active_block is None and model.active_fusion is None


def test_a_mask_or_routes_that_no_longer_fit_a_replaced_fusion_stop_with_a_warning():
    """A fusion mask over adapters the replacing fusion lacks was dropped without a word, so the new fusion ran
    unmasked; parallel routes were not checked again at all. Both now stop as a block that no longer fits does."""
    model = af.wrap(tiny_encoder("bert").double())
    for name in ("a", "b", "c"):
        model.add_adapter(name, "pfeiffer")
    model.add_fusion("f", ["a", "b", "c"])
    model.set_fusion_mask("f", ["a", "c"])
    model.activate(fusion="f")
    with pytest.warns(UserWarning, match=r"the mask of fusion 'f' keeps \['a', 'c'\], which it no longer fuses"):
        model.add_fusion("f", ["a", "b"], overwrite=True)
    assert model.active_fusion is None
    with model.activated(fusion="f", parallel_routes=["a", "b"]):
        with pytest.warns(UserWarning, match="the fusion 'f' was replaced, and what ran before cannot run"):
            model.add_fusion("f", ["b", "c"], overwrite=True)
        assert model.active_fusion is None and model.state.parallel_routes is None


def _placed_otherwise(model: af.AdaptedModel) -> None:
    """Replace adapter d by one placed otherwise than a (another LayerNorm and residual option)."""
    config = af.AdapterConfig.pfeiffer(reduction_factor=8, original_ln_before=False, residual_before_ln=False)
    model.add_adapter("d", config, overwrite=True)


@pytest.mark.parametrize(
    ("block", "replace", "match"),
    [
        (
            af.Stack("h", af.Fuse("a", "b")),
            lambda model: model.add_fusion("f", ["a", "b", "d"], overwrite=True),
            r"fusion 'f', which fuses \['a', 'b', 'd'\]",
        ),
        (af.Average("a", "d"), _placed_otherwise, "adapter 'd' has original_ln_before=False"),
    ],
    ids=["fuse-of-a-replaced-fusion", "average-of-a-replaced-adapter"],
)
def test_a_block_put_back_by_activated_is_checked_again(block: Any, replace: Callable, match: str) -> None:
    """On leaving `with model.activated(...)` the block active before came back unchecked: a fusion or adapter
    replaced inside (overwrite=True) left it running a combination activate() refuses, without a word. It now stops
    with a warning, leaving the state and outputs of the same replacement made outside a `with` block."""
    torch.manual_seed(0)
    inside = _model()
    torch.manual_seed(0)
    outside = _model()
    for model in (inside, outside):
        model.activate(block, head="cls", skip_layers=[1])
    resolved = inside.active_block
    with pytest.warns(UserWarning, match=f"replaced inside the `with` block.*{match}"):
        with inside.activated("a", head="cls"):
            replace(inside)
    with pytest.warns(UserWarning, match=match):
        replace(outside)
    assert inside.state == outside.state
    assert (inside.active_block, inside.active_adapter, inside.head_names, inside.skip_layers) == (
        None,
        None,
        ["cls"],
        (1,),
    )
    with pytest.raises(af.ConfigError, match=match):  # what ran before, as activate() judges it now
        inside.activate(resolved, head="cls")
    with torch.no_grad():
        assert torch.equal(inside(**_inputs(3)).logits, outside(**_inputs(3)).logits)


def test_a_block_put_back_by_activated_keeps_running_a_replacement_that_fits() -> None:
    """A replacement the block still fits changes nothing but the piece, inside a `with` block as outside one."""
    model = _model()
    model.activate(af.Stack("h", af.Fuse("a", "b")), head="cls")
    before = model.active_block
    with model.activated("a"):
        model.add_fusion("f", ["a", "b"], overwrite=True)
    assert model.active_block == before and model.active_head == "cls"
