"""AdaptedModel: a HuggingFace encoder with adapter sites injected, plus named heads.

`wrap(model)` replaces each insertion site with an AdapterSite (injection/site.py); adapters and fusion
layers live inside those sites, heads live here. Which adapter, fusion and head run is one ActiveState value
(injection/state.py) set with `activate` or, for a block, `activated`; which parameters train is set with the
`train_*` methods. Files are not the model's business: it installs and exports Pieces (piece.py), and
serialization/formats.py translates them to and from folders in our format or AdapterHub's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn
from transformers.utils import ModelOutput

from adapterfusion import blocks, composition, generation, routing, trainable
from adapterfusion._validation import check_bool, check_choice, check_layers, require_loaded
from adapterfusion.adapters.config import AdapterConfig, resolve_adapter_config
from adapterfusion.encoders import check_wrappable
from adapterfusion.errors import ConfigError
from adapterfusion.forward_inputs import check_call
from adapterfusion.fusion.config import FusionConfig, FusionSetup, resolve_fusion_config
from adapterfusion.fusion.layer import FusionLayer
from adapterfusion.heads.config import HeadConfig
from adapterfusion.heads.module import PredictionHead
from adapterfusion.injection import controls as fusion_controls
from adapterfusion.injection import inject
from adapterfusion.injection.architectures import ArchitectureSpec, architecture_for, get_submodule
from adapterfusion.injection.placement import adapter_modules, fused_adapters, fusion_modules
from adapterfusion.injection.routing import ADAPTER, BLOCK, FUSION, Choice, RowRouting
from adapterfusion.injection.runtime import ForwardRuntime, Recorder
from adapterfusion.injection.site import AdapterSite
from adapterfusion.injection.state import ActiveState, checked, with_routes
from adapterfusion.injection.unloaded import check_wrapped
from adapterfusion.piece import PIECE_KINDS, EncoderFingerprint
from adapterfusion.pipelines import PipelineModel
from adapterfusion.serialization import model_pieces, setup


@dataclass
class AdaptedModelOutput(ModelOutput):
    """loss = task_loss + fusion_regularization while a fusion with a trainable V is trained.
    fusion_attentions[layer]: [batch, seq, N] softmax weights of the 'output' site (else 'attention' site),
    None for layers without fusion; every site's weights are in fusion_attentions_by_site[(layer, position)].
    The wrapped model's other outputs pass through under their transformers names (a decoder's past_key_values, an
    encoder-decoder's encoder_* and decoder_* states)."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    last_hidden_state: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    past_key_values: Any = None
    encoder_last_hidden_state: torch.Tensor | None = None
    encoder_hidden_states: tuple[torch.Tensor, ...] | None = None
    encoder_attentions: tuple[torch.Tensor, ...] | None = None
    decoder_hidden_states: tuple[torch.Tensor, ...] | None = None
    decoder_attentions: tuple[torch.Tensor, ...] | None = None
    cross_attentions: tuple[torch.Tensor, ...] | None = None
    task_loss: torch.Tensor | None = None
    fusion_regularization: torch.Tensor | None = None
    fusion_attentions: tuple[torch.Tensor | None, ...] | None = None
    fusion_attentions_by_site: dict[tuple[int, str], torch.Tensor] | None = None
    # A routed call whose heads give logits of different shapes: each example's logits (then `logits` is None).
    row_logits: tuple[torch.Tensor, ...] | None = None


_Forward = Callable[..., "AdaptedModelOutput"]

# Why a recording_fusion_attentions() block refuses a routed call (forward's or generate's): a site records one
# fusion's weights for all rows, and the rows of such a call run different pieces (or the batch once per child).
_ROUTED_RECORDING = (
    "recording fusion attentions records one fusion's weights for every row, which a call routing each example to "
    "its own choice (adapter_names=, an active BatchSplit or Parallel) does not run; run the fusion's examples alone "
    "inside recording_fusion_attentions(): `with model.activated(fusion=...): model(**batch)`"
)

# The wrapped model's outputs a forward hands on as they are (its loss and logits are decided per head).
_PASSED_THROUGH = frozenset(AdaptedModelOutput.__dataclass_fields__) - {"loss", "logits", "row_logits"}


def _take_own_head_output(output: AdaptedModelOutput, encoded: Mapping[str, Any]) -> None:
    """The wrapped task model's own logits and loss into `output`, and the outputs our fields do not name under their
    transformers names (a QA model's start_logits / end_logits, GPT2DoubleHeadsModel's mc_logits and mc_loss):
    `output.start_logits` and `output["start_logits"]` work as on the wrapped model."""
    output.logits, output.task_loss = encoded.get("logits"), encoded.get("loss")
    for key, value in encoded.items():
        if key not in AdaptedModelOutput.__dataclass_fields__ and value is not None:
            output[key] = value


def _explains_dtype_errors(forward: _Forward) -> _Forward:
    """`forward` turning torch's dtype mismatch into the library's error where a piece was cast by hand to another
    dtype than the encoder's (`model.get_head(name).to(torch.bfloat16)`): torch names two matrices, not the piece.
    Costs nothing until torch fails."""

    @functools.wraps(forward)
    def checked(self: AdaptedModel, *args: Any, **kwargs: Any) -> AdaptedModelOutput:
        try:
            return forward(self, *args, **kwargs)
        except RuntimeError as err:
            odd = self.pieces_of_other_dtype() if "dtype" in str(err) else {}
            if not odd:
                raise
            listed = ", ".join(f"{piece} ({dtype})" for piece, dtype in odd.items())
            dtype = self.dtype
            raise ConfigError(
                f"{listed} {'holds' if len(odd) == 1 else 'hold'} weights of another dtype than the encoder's "
                f"{dtype}, so the forward mixes dtypes; cast the whole model instead (model.to({dtype}) puts every "
                "piece in the encoder's dtype, model.to(dtype) moves all of them together)"
            ) from err

    return cast(_Forward, checked)


class AdaptedModel(nn.Module):
    """A HuggingFace encoder with an AdapterSite at each insertion site, and the named adapters, fusions and heads
    added to it. Build it with `wrap(model)` (or `from_pretrained`); `unload()` gives the plain model back.

    Pieces: add_*/delete_* (new), load_*/save_* (files, either format), install_piece/export_piece (Piece values),
    all three through serialization/model_pieces.py. What runs: activate / activated, set_fusion_mask, set_fusion_step,
    set_fusion_implementation (injection/controls.py); `state` holds it. What trains: train_adapter, train_fusion,
    train_head (trainable.py). Forward: `model(**inputs)`, or forward_parallel for every fused adapter alone and the
    fusion in one call (composition.py). Whole setups and the Hub: serialization/setup.py."""

    # The loss is a mean over the batch, not normalised by the Trainer's num_items_in_batch: without this the
    # Trainer, seeing **encoder_inputs, skips dividing by gradient_accumulation_steps.
    accepts_loss_kwargs = False

    def __init__(self, model: nn.Module) -> None:
        """Wrap `model` (AutoModel or a *For* task model of an architecture in ARCHITECTURES) in place."""
        check_wrappable(model)
        super().__init__()
        self.model = model
        # train_* freeze the encoder; unload() gives the model back with the flags it came with
        self._wrapped_requires_grad = {name: p.requires_grad for name, p in model.named_parameters()}
        self.training = model.training  # wrapping an eval-mode encoder gives an eval-mode model
        self.architecture: ArchitectureSpec = architecture_for(model)
        config: Any = model.config
        self.hidden_size = int(config.hidden_size)
        self._runtime = ForwardRuntime()  # what forwards record and reuse, shared by every site
        self.sites: list[AdapterSite] = inject.inject_sites(self, self._runtime)
        self.num_layers = 1 + self.sites[-1].layer_index  # an encoder-decoder's count both stacks
        self.fingerprint = EncoderFingerprint(
            model_type=config.model_type,
            hidden_size=self.hidden_size,
            num_layers=self.num_layers,
            name_or_path=str(getattr(config, "_name_or_path", "") or ""),
            decoder_layers=inject.decoder_layers(self),
        )
        self.heads = nn.ModuleDict().train(model.training)
        self.adapter_configs: dict[str, AdapterConfig] = {}
        self.fusion_setups: dict[str, FusionSetup] = {}  # read fusion_setup(name); change with add_/delete_fusion
        self._set_state(ActiveState())

    def encoder_layers(self) -> nn.ModuleList:
        """The HF ModuleList of encoder layers (the architecture spec says where it is)."""
        return cast(nn.ModuleList, get_submodule(cast(nn.Module, self.model.base_model), self.architecture.layers))

    def unload(self) -> nn.Module:
        """Put every original sub-module back and return the plain HuggingFace model, each parameter trainable or
        frozen as it was when wrapped (train_adapter and train_fusion freeze the encoder)."""
        self.sites = inject.unload_sites(self)  # every later use of the sites refuses, naming af.wrap
        for name, parameter in self.model.named_parameters():
            if name in self._wrapped_requires_grad:
                parameter.requires_grad_(self._wrapped_requires_grad[name])
        return self.model

    # ---- what is loaded ------------------------------------------------------------------------------
    @property
    def adapter_names(self) -> list[str]:
        """The loaded adapters, in the order they were added."""
        return list(self.adapter_configs)

    @property
    def fusion_names(self) -> list[str]:
        """The loaded fusions, in the order they were added."""
        return list(self.fusion_setups)

    @property
    def head_names(self) -> list[str]:
        """The loaded heads, in the order they were added."""
        return list(self.heads)

    def require(self, kind: str, name: str) -> None:
        """Raise NameNotFoundError, naming the loaded ones, unless `kind` ('adapter', 'fusion' or 'head') `name` is
        loaded."""
        check_choice(kind, PIECE_KINDS, "piece kind")
        loaded: dict[str, Iterable[str]] = {"adapter": self.adapter_configs, "fusion": self.fusion_setups}
        require_loaded(kind, name, loaded.get(kind, self.heads.keys()))

    def fusion_setup(self, name: str) -> FusionSetup:
        """Loaded fusion `name`'s config and the adapters it fuses."""
        self.require("fusion", name)
        return self.fusion_setups[name]

    def get_head(self, name: str) -> PredictionHead:
        """The loaded head `name` (as a PredictionHead: `heads` is an nn.ModuleDict, untyped to a type checker)."""
        self.require("head", name)
        return cast(PredictionHead, self.heads[name])

    def sites_with_adapter(self, name: str) -> list[AdapterSite]:
        """The sites that hold adapter `name` (its positions, without its leave_out layers), in layer order."""
        return [site for site in self.sites if name in site.adapters]

    def sites_with_fusion(self, name: str) -> list[AdapterSite]:
        """The sites that hold a layer of fusion `name`, in layer order."""
        return [site for site in self.sites if name in site.fusions]

    def _fusion_layers(self, name: str) -> list[FusionLayer]:
        """Fusion `name`'s attention layers, whose V the loss regularises (a ScaLearn fusion has none)."""
        layers = [site.fusions[name] for site in self.sites_with_fusion(name)]
        return [layer for layer in layers if isinstance(layer, FusionLayer)]

    def adapter_parameters(self, name: str) -> list[nn.Parameter]:
        """Adapter `name`'s parameters at every site (with Houlsby's own LayerNorm copies)."""
        return [p for site in self.sites_with_adapter(name) for p in site.adapters[name].parameters()]

    def fusion_parameters(self, name: str) -> list[nn.Parameter]:
        """Fusion `name`'s parameters at every site (Q/K/V, or ScaLearn's scales), each once: ScaLearn++ shares one
        Parameter among all its sites."""
        found = [p for site in self.sites_with_fusion(name) for p in site.fusions[name].parameters()]
        return list({id(p): p for p in found}.values())

    def encoder_parameters(self) -> list[nn.Parameter]:
        """The pretrained weights: everything in the HF model that is not an adapter or a fusion layer."""
        added = {id(p) for site in self.sites for module in (site.adapters, site.fusions) for p in module.parameters()}
        return [p for p in self.model.parameters() if id(p) not in added]

    parameter_report = trainable.parameter_report

    # ---- adding and deleting pieces (injection/inject.py) ----------------------------------------------
    def add_adapter(
        self, name: str, config: AdapterConfig | str | Mapping[str, Any] | None = None, overwrite: bool = False
    ) -> AdapterConfig:
        """Add a new adapter `name` at the sites `config` places it (a config, a preset name such as 'pfeiffer' or
        'houlsby', a dict, or None for Pfeiffer); returns the resolved config. It is not activated."""
        config = resolve_adapter_config(config)
        modules = adapter_modules(self.sites, name, config, self.num_layers, self.hidden_size)
        inject.attach_adapter(self, name, config, modules, overwrite)
        return config

    def add_fusion(
        self,
        name: str,
        adapters: Sequence[str],
        config: FusionConfig | str | Mapping[str, Any] | None = None,
        overwrite: bool = False,
    ) -> FusionConfig:
        """Add a new fusion `name` over loaded `adapters` (same placement, same leave_out layers), with `config` a
        FusionConfig, preset name ('dynamic', 'static'), dict or None ('dynamic'); returns the resolved config."""
        config = resolve_fusion_config(config)
        adapters = fused_adapters(name, adapters)
        modules = fusion_modules(self.sites, name, adapters, config, self.adapter_configs, self.hidden_size)
        inject.attach_fusion(self, name, FusionSetup(config, adapters), modules, overwrite)
        return config

    def add_head(self, name: str, config: HeadConfig, overwrite: bool = False) -> PredictionHead:
        """Add a new prediction head `name` (e.g. af.ClassificationHead(num_labels=2)); returns its module."""
        return inject.attach_head(self, name, inject.build_head(self, name, config, overwrite))

    def delete_adapter(self, name: str) -> None:
        """Remove adapter `name` (refused while a fusion uses it); if it was active, alone or in the active block,
        the bare encoder runs."""
        inject.remove_adapter(self, name)
        if self.active_adapter == name:
            self.activate(head=self.active_head)
        self._set_state(self._checked(self._state))  # an active block that used it no longer runs

    def delete_fusion(self, name: str) -> None:
        """Remove fusion `name` and its mask; if it was active, alone or in the active block, the bare encoder runs."""
        inject.remove_fusion(self, name)
        self._set_state(fusion_controls.with_mask(self._state, name, (), None))
        if self.active_fusion == name:
            self.activate(head=self.active_head)
        self._set_state(self._checked(self._state))  # an active block that used it no longer runs

    def delete_head(self, name: str) -> None:
        """Remove head `name`; if it was active, the forward returns the wrapped model's own output."""
        self.require("head", name)
        del self.heads[name]
        if self.active_head == name:
            self._set_state(dataclasses.replace(self._state, head=None))

    # ---- what runs (injection/state.py, injection/controls.py) -----------------------------------------
    @property
    def state(self) -> ActiveState:
        """What runs now, as one frozen value (every site holds the same one)."""
        return self._state

    @property
    def active_adapter(self) -> str | None:
        """The adapter activate() chose, or None."""
        return self._state.adapter

    @property
    def active_fusion(self) -> str | None:
        """The fusion activate() chose, or None."""
        return self._state.fusion

    @property
    def active_head(self) -> str | None:
        """The head the forward applies, or None (the wrapped HF model's own output)."""
        return self._state.head

    @property
    def active_block(self) -> blocks.Block | None:
        """The composition block activate() chose (blocks.py; resolved: each name with its kind), or None."""
        return self._state.block

    @property
    def skip_layers(self) -> tuple[int, ...]:
        """The layers whose sites run as the bare encoder (AdapterDrop)."""
        return self._state.skip_layers

    def activate(
        self,
        adapter: str | blocks.Block | None = None,
        fusion: str | None = None,
        head: str | None = None,
        skip_layers: Iterable[int] = (),
    ) -> None:
        """Choose what runs: one adapter, one fusion or a composition block in place of the adapter (af.Stack,
        af.Average, af.BatchSplit, af.Parallel: blocks.py), or none of them (the bare encoder); and a head or none.
        skip_layers: layers whose sites run as the bare encoder (AdapterDrop). Fusion masks and controls stay."""
        self._set_state(self._activation(adapter, fusion, head, skip_layers))

    def _activation(
        self, adapter: str | blocks.Block | None, fusion: str | None, head: str | None, skip_layers: Iterable[int]
    ) -> ActiveState:
        """The current state with activate()'s choice, checked."""
        if adapter is not None and fusion is not None:
            raise ConfigError("activate() takes an adapter or a fusion, not both (a fusion already runs its adapters)")
        skip = check_layers(skip_layers, "skip_layers", self.num_layers)
        block = blocks.resolve(self, adapter) if isinstance(adapter, blocks.Block) else None
        state = dataclasses.replace(
            self._state,
            adapter=None if isinstance(adapter, blocks.Block) else adapter,
            fusion=fusion,
            head=head,
            skip_layers=skip,
            parallel_routes=None,
            block=block,
        )
        return self._checked(state)

    @contextlib.contextmanager
    def activated(
        self,
        adapter: str | blocks.Block | None = None,
        fusion: str | None = None,
        head: str | None = None,
        skip_layers: Iterable[int] = (),
        *,
        parallel_routes: Sequence[str] | None = None,
        parallel_split_site: str | None = None,
    ) -> Iterator[ActiveState]:
        """activate(...) for the `with` block only: on leaving it, also through an exception, the state before it
        runs again (masks and fusion controls included; a piece of it deleted inside the block is left out, as
        delete_* leave an active state). parallel_routes (composition.forward_parallel, with a
        fusion): adapters of the fusion that each run alone on their own slice of a batch repeated per route
        (at the input, or at site key `parallel_split_site`)."""
        previous = self._state
        state = self._activation(adapter, fusion, head, skip_layers)
        if parallel_routes is not None:
            state = with_routes(state, parallel_routes, parallel_split_site)
        self._set_state(state)
        try:
            yield self._state
        finally:
            self._set_state(self._restorable(previous))

    def _restorable(self, state: ActiveState) -> ActiveState:
        """`state` as the pieces loaded now allow it: one whose adapter or fusion was deleted since (inside the
        `activated` block that now ends) runs the bare encoder, one whose head was deleted the wrapped model's own
        output, as delete_* leave an active state."""
        if (state.adapter is not None and state.adapter not in self.adapter_configs) or (
            state.fusion is not None and state.fusion not in self.fusion_setups
        ):
            state = dataclasses.replace(state, adapter=None, fusion=None)
        if state.head is not None and state.head not in self.heads:
            state = dataclasses.replace(state, head=None)
        return self._checked(state)

    def _checked(self, state: ActiveState) -> ActiveState:
        fusions = {name: setup.adapters for name, setup in self.fusion_setups.items()}
        return checked(state, self.adapter_configs, fusions, list(self.heads), self.num_layers)

    def _set_state(self, state: ActiveState) -> None:
        """The one place that changes what runs: the model and every site get the same value."""
        for site in self.sites:
            site.set_state(state)
        self._state = state

    def set_fusion_implementation(self, implementation: str) -> None:
        """'fast' (default) or 'reference' (the paper's equations computed literally, for checking)."""
        self._set_state(fusion_controls.with_implementation(self._state, implementation))

    def set_fusion_step(self, step: int) -> None:
        """The training step that drives the fusion softmax temperature schedule, if one is configured."""
        self._set_state(fusion_controls.with_step(self._state, step))

    def set_fusion_mask(self, fusion: str, keep: Sequence[str] | None) -> None:
        """Fuse only the adapters in `keep` (others get zero attention), or all of them with keep=None."""
        fused = self.fusion_setup(fusion).adapters
        self._set_state(fusion_controls.with_mask(self._state, fusion, fused, keep))

    # ---- what trains (trainable.py) ----------------------------------------------------------------
    train_adapter = trainable.train_adapter
    train_fusion = trainable.train_fusion
    train_head = trainable.train_head

    def fusion_regularization(self, name: str | None = None) -> torch.Tensor:
        """Sum over layers of weight * ||V - I||² for fusion `name` (default: the active fusion)."""
        name = name if name is not None else self.active_fusion
        if name is not None:
            self.require("fusion", name)
        layers = self._fusion_layers(name) if name is not None else []
        return fusion_controls.regularization(layers, next(self.model.parameters()))

    # ---- forward -------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def inference_cache(self, check_values: bool = True) -> Iterator[None]:
        """Fold each fusion's weights once and reuse them for every forward inside the block (evaluation,
        serving, generate); saves about 3·(M + N)·d² per fusion layer and forward. Weights must not change inside:
        it runs under torch.no_grad(). A later block reuses a site's last fold while its weights are unchanged,
        checked by a hash of their values on the block's first use of each site (writes through `p.data` change
        nothing else). check_values=False skips that hash, trusting the tensors' identity and version alone: for a
        caller whose weights change only by optimizer steps, in-place operations, `.to()` or loading (the server)."""
        check_wrapped(self.sites)
        check_bool(check_values, "inference_cache(check_values)")
        with self._runtime.caching(check_values, self._placement()), torch.no_grad():
            yield

    def check_cache_placement(self) -> None:
        """Inside inference_cache(): refuse a forward after the model was cast or moved in the block."""
        if self._runtime.is_caching:
            self._runtime.check_placement(self._placement())

    def _placement(self) -> tuple[torch.dtype, torch.device]:
        """(dtype, device) of the embeddings, from one lookup: checked on every forward inside the cache."""
        weight = cast(nn.Embedding, cast(Any, self.model).get_input_embeddings()).weight
        return weight.dtype, weight.device

    def recording_fusion_attentions(self, enabled: bool = True) -> contextlib.AbstractContextManager[Recorder | None]:
        """Inside the block every fusion site records its softmax weights into the yielded dict, keyed (layer,
        position): around model(...), model.model(...), forward_parallel or generate, whatever their own
        output_fusion_attentions (a call's own recording fills its output and this dict alike; after several calls
        the dict holds the last one's, during generate every position run). With enabled=False this block records
        nothing of its own and yields None; a block around it still records. One fusion's weights per site and
        call: a routed call (adapter_names=, BatchSplit, Parallel) and a Stack of two fusions are refused inside."""
        check_bool(enabled, "recording_fusion_attentions(enabled)")
        check_wrapped(self.sites)
        return self._runtime.recording(enabled)

    def recording_generation(self) -> contextlib.AbstractContextManager[None]:
        """Inside the block a recording of fusion attentions grows by the positions of each step (generation.py)."""
        return self._runtime.extending()

    generate = generation.generate

    # ---- what a transformers pipeline reads of a model (pipelines.py) ------------------------------------------
    @property
    def device(self) -> torch.device:
        """The device of the embeddings, where inputs must be."""
        return cast(nn.Embedding, cast(Any, self.model).get_input_embeddings()).weight.device

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the embeddings."""
        return cast(nn.Embedding, cast(Any, self.model).get_input_embeddings()).weight.dtype

    def can_generate(self) -> bool:
        """Whether the wrapped model has a language-model head, so `generate` works."""
        can_generate = getattr(self.model, "can_generate", None)
        return bool(callable(can_generate) and can_generate())

    def for_pipeline(
        self, adapter: str | None = None, fusion: str | None = None, head: str | None = None, task: str | None = None
    ) -> PipelineModel:
        """This model with `adapter` or `fusion` and `head` fixed, as `transformers.pipeline(task, model=...)` takes
        it (a config with the head's labels, device, can_generate); each call runs that choice and puts back what
        was active. `task`: the pipeline task it will serve, so that a head of the wrong kind or a misspelt task is
        refused now. af.pipeline(task, model, tokenizer, adapter=..., head=...) builds the pipeline in one call."""
        return PipelineModel(self, adapter=adapter, fusion=fusion, head=head, skip_layers=self.skip_layers, task=task)

    def pieces_of_other_dtype(self) -> dict[str, torch.dtype]:
        """Each adapter, fusion and head ("adapter 'a'") holding a floating-point weight of another dtype than the
        encoder's embeddings, with that dtype."""
        pieces = [(f"adapter {name!r}", self.adapter_parameters(name)) for name in self.adapter_names]
        pieces += [(f"fusion {name!r}", self.fusion_parameters(name)) for name in self.fusion_names]
        pieces += [(f"head {name!r}", list(self.heads[name].parameters())) for name in self.head_names]
        dtype = self.dtype
        odd = {}
        for piece, parameters in pieces:
            other = next((p.dtype for p in parameters if p.is_floating_point() and p.dtype != dtype), None)
            if other is not None:
                odd[piece] = other
        return odd

    @_explains_dtype_errors
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_fusion_attentions: bool = False,
        adapter_names: Sequence[Any] | None = None,
        head_names: Sequence[str] | None = None,
        **encoder_inputs: Any,
    ) -> AdaptedModelOutput:
        """Run the encoder with what is active; with an active head, its logits (and with `labels` its loss, plus the
        fusion regularisation while a fusion's V trains; with no head, a wrapped HF task model's own loss).
        output_fusion_attentions=True: each fusion site's softmax weights (AdaptedModelOutput). Other keyword arguments
        go to the encoder; forward_inputs.check_call refuses those it does not take, and every malformed input.
        adapter_names / head_names: one entry per example, an adapter, a fusion or None (the plain model) / a head,
        for a batch whose examples run different pieces (routing.py); each example gets what it would alone."""
        check_bool(output_fusion_attentions, "output_fusion_attentions")  # "no" would record: a str is truthy
        self.check_cache_placement()
        head_name = self.active_head
        inputs = dict(encoder_inputs, input_ids=input_ids, attention_mask=attention_mask)
        if isinstance(self._state.block, blocks.Parallel):  # every example once per child: a routed call
            inputs, labels, adapter_names = routing.parallel_inputs(self._state.block, inputs, labels, adapter_names)
        if adapter_names is not None or head_names is not None or isinstance(self._state.block, blocks.BatchSplit):
            return self._routed_forward(inputs, adapter_names, head_names, labels, output_fusion_attentions)
        call = check_call(self, inputs, head_name, labels)
        with self.recording_fusion_attentions(output_fusion_attentions) as recorder:
            encoded = call.encoder(**call.inputs)
        output = AdaptedModelOutput(**{key: value for key, value in encoded.items() if key in _PASSED_THROUGH})
        if head_name is None:  # the wrapped model's own output (and loss, for a task model given labels)
            _take_own_head_output(output, encoded)
        else:
            head = self.get_head(head_name)
            output.logits = head(encoded.last_hidden_state, call.head_mask, call.num_choices)
            output.task_loss = head.loss(output.logits, labels) if labels is not None else None
        if output.task_loss is not None:
            output.loss = output.task_loss
            fusion = self.active_fusion
            if self.training and fusion is not None and fusion_controls.value_trains(self._fusion_layers(fusion)):
                output.fusion_regularization = self.fusion_regularization()
                output.loss = output.loss + output.fusion_regularization
        if recorder is not None:
            output.fusion_attentions_by_site = dict(recorder)
            output.fusion_attentions = tuple(
                recorder.get((layer, "output"), recorder.get((layer, "attention"))) for layer in range(self.num_layers)
            )
        return output

    def _routed_forward(
        self,
        inputs: dict[str, Any],
        adapter_names: Sequence[Any] | None,
        head_names: Sequence[str] | None,
        labels: Any,
        output_fusion_attentions: bool,
    ) -> AdaptedModelOutput:
        """forward() with a choice per example (routing.py): the sites run each row's choice, each head its rows."""
        if self._runtime.is_recording:
            raise ConfigError(_ROUTED_RECORDING)
        routed = routing.prepare(self, inputs, adapter_names, head_names, labels, output_fusion_attentions)
        head = routed.heads[0][0]
        previous = self._state
        self._set_state(self._routed_state(routed.row_choices, head, routed.device))
        try:
            encoded = routed.call.encoder(**routed.call.inputs)
        finally:
            self._set_state(previous)
        output = AdaptedModelOutput(**{key: value for key, value in encoded.items() if key in _PASSED_THROUGH})
        if head is None:  # no head anywhere: the wrapped model's own output, as forward() gives it
            _take_own_head_output(output, encoded)
        else:
            heads = routing.apply_heads(self, routed, encoded.last_hidden_state, labels)
            output.logits, output.row_logits, output.task_loss = heads.logits, heads.row_logits, heads.task_loss
        if output.task_loss is not None:
            output.loss = output.task_loss
            trained = [name for name in routed.fusions if fusion_controls.value_trains(self._fusion_layers(name))]
            if self.training and trained:
                output.fusion_regularization = torch.stack([self.fusion_regularization(name) for name in trained]).sum()
                output.loss = output.loss + output.fusion_regularization
        return output

    def _routed_state(self, row_choices: Sequence[Choice], head: str | None, device: torch.device) -> ActiveState:
        """The state that runs row i of the encoder with row_choices[i] (routing.py; forward and generate): where
        every row chose the same, exactly what activated(...) runs, with no routing."""
        first = row_choices[0]
        if len(set(row_choices)) == 1:
            adapter, fusion = (first[1], None) if first and first[0] in (ADAPTER, BLOCK) else (None, first and first[1])
            return self._activation(adapter, fusion, head, self.skip_layers)
        fusions = dict.fromkeys(choice[1] for choice in row_choices if choice and choice[0] == FUSION)
        row_routing = RowRouting(
            choices=tuple(row_choices),
            fused={name: self.fusion_setups[name].adapters for name in fusions},
            masks=self._state.fusion_masks,
            fast=self._state.fusion_implementation == "fast",
            device=device,
        )
        return dataclasses.replace(self._activation(None, None, head, self.skip_layers), routing=row_routing)

    @contextlib.contextmanager
    def routing_copies(self, choices: Sequence[Choice]) -> Iterator[Callable[[int, torch.device], None]]:
        """Inside the block, run_rows(rows, device) makes the next forwards run a batch of `rows` rows, copies of the
        len(choices) examples in order (each repeated rows // len(choices) times, as generate repeats a prompt for
        beams), each copy with its example's choice (generation.py); what ran before is back on exit."""
        if self._runtime.is_recording:
            raise ConfigError(_ROUTED_RECORDING)
        states: dict[tuple[int, torch.device], ActiveState] = {}

        def run_rows(rows: int, device: torch.device) -> None:
            if rows % len(choices):
                raise ConfigError(
                    f"a forward of {rows} rows ran for {len(choices)} routed examples, which cannot be copies of "
                    "them; per-example choices follow generate's greedy search, sampling, beam search and "
                    "num_return_sequences, which repeat each example in place"
                )
            if (rows, device) not in states:
                copies = rows // len(choices)
                row_choices = [choice for choice in choices for _ in range(copies)]
                states[(rows, device)] = self._routed_state(row_choices, None, device)
            self._set_state(states[(rows, device)])

        previous = self._state
        try:
            yield run_rows
        finally:
            self._set_state(previous)

    forward_parallel = composition.forward_parallel
    average_adapters = blocks.average_adapters

    # ---- pieces in and out (serialization/model_pieces.py; formats: serialization/formats.py) ----------------
    layout = model_pieces.layout
    export_piece = model_pieces.export_piece
    install_piece = model_pieces.install_piece

    fusion_state_dict = model_pieces.fusion_state_dict
    save_adapter = model_pieces.save_adapter
    load_adapter = model_pieces.load_adapter
    save_fusion = model_pieces.save_fusion
    load_fusion = model_pieces.load_fusion
    save_head = model_pieces.save_head
    load_head = model_pieces.load_head

    # ---- whole setups, local or on the Hub (serialization/setup.py) --------------------------------------------
    save_pretrained = setup.save_pretrained
    from_pretrained = classmethod(setup.from_pretrained)
    push_to_hub = setup.push_to_hub


def wrap(model: nn.Module) -> AdaptedModel:
    """Inject adapter sites into a HuggingFace encoder (AutoModel or a *For* task model)."""
    return AdaptedModel(model)
