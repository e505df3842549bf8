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
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, cast

import torch
from torch import nn

from adapterfusion import (
    blocks,
    composition,
    devices,
    dtype_errors,
    forward_runtime,
    generation,
    pipelines,
    routed_forward,
    routing,
    trainable,
)
from adapterfusion._validation import check_bool, check_choice, check_layers, require_loaded
from adapterfusion.adapters.config import AdapterConfig
from adapterfusion.encoders import check_wrappable
from adapterfusion.errors import ConfigError
from adapterfusion.forward_inputs import check_call
from adapterfusion.fusion.config import FusionSetup
from adapterfusion.heads.module import PredictionHead
from adapterfusion.injection import controls as fusion_controls
from adapterfusion.injection import inject, plain_save
from adapterfusion.injection.architectures import ArchitectureSpec, architecture_for, get_submodule
from adapterfusion.injection.runtime import ForwardRuntime
from adapterfusion.injection.site import AdapterSite
from adapterfusion.injection.state import ActiveState, checked_against, restorable, with_routes
from adapterfusion.outputs import AdaptedModelOutput, add_loss, passed_through, take_own_head_output
from adapterfusion.piece import PIECE_KINDS, EncoderFingerprint
from adapterfusion.serialization import model_pieces, setup_load, setup_push, setup_save

# Which site's fusion weights output.fusion_attentions[layer] holds where a layer has several (outputs.py).
_FIRST_SITES = ("output", "attention", "cross")


class AdaptedModel(nn.Module):
    """A HuggingFace encoder with an AdapterSite at each insertion site, and the named adapters, fusions and heads
    added to it. Build it with `wrap(model)` (or `from_pretrained`); `unload()` gives the plain model back.

    Pieces: add_*/delete_* (new), load_*/save_* (files, either format), install_piece/export_piece (Piece values),
    all three through serialization/model_pieces.py. What runs: activate / activated, set_fusion_mask, set_fusion_step,
    set_fusion_implementation (injection/controls.py); `state` holds it. What trains: train_adapter, train_fusion,
    train_head (trainable.py). Forward: `model(**inputs)`, or forward_parallel for every fused adapter alone and the
    fusion in one call (composition.py). Whole setups and the Hub: serialization/setup_*.py."""

    # The loss is a mean over the batch, not normalised by the Trainer's num_items_in_batch: without this the
    # Trainer, seeing **encoder_inputs, skips dividing by gradient_accumulation_steps.
    accepts_loss_kwargs = False

    def __init__(self, model: nn.Module) -> None:
        """Wrap `model` (AutoModel or a *For* task model of an architecture in ARCHITECTURES) in place."""
        check_wrappable(model)
        devices.check_not_offloaded(model, "af.wrap")
        super().__init__()
        self.model = model
        # train_* freeze the encoder; unload() gives the model back with the flags it came with
        self._wrapped_requires_grad = {name: p.requires_grad for name, p in model.named_parameters()}
        self.training = model.training  # wrapping an eval-mode encoder gives an eval-mode model
        self.architecture: ArchitectureSpec = architecture_for(model)
        config: Any = model.config
        self.hidden_size = int(config.hidden_size)
        self.runtime = ForwardRuntime()  # what forwards record and reuse (recording, folded fusions), every site's
        self.sites: list[AdapterSite] = inject.inject_sites(self, self.runtime)
        plain_save.guard_save(model)  # its own save_pretrained writes the plain model's weights while wrapped
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
        self.set_state(ActiveState())

    def encoder_layers(self) -> nn.ModuleList:
        """The HF ModuleList of encoder layers (the architecture spec says where it is)."""
        return cast(nn.ModuleList, get_submodule(cast(nn.Module, self.model.base_model), self.architecture.layers))

    def unload(self) -> nn.Module:
        """Put every original sub-module back and return the plain HuggingFace model, each parameter trainable or
        frozen as it was when wrapped (train_adapter and train_fusion freeze the encoder)."""
        self.sites = inject.unload_sites(self)  # every later use of the sites refuses, naming af.wrap
        plain_save.release_save(self.model)
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
        loaded: dict[str, Iterable[str]] = {
            "adapter": self.adapter_configs,
            "fusion": self.fusion_setups,
            "head": self.heads.keys(),
        }
        require_loaded(kind, name, loaded[kind], {k: v for k, v in loaded.items() if k != kind})

    def fusion_setup(self, name: str) -> FusionSetup:
        """Loaded fusion `name`'s config and the adapters it fuses."""
        self.require("fusion", name)
        return self.fusion_setups[name]

    def get_head(self, name: str) -> PredictionHead:
        """The loaded head `name` (as a PredictionHead: `heads` is an nn.ModuleDict, untyped to a type checker)."""
        self.require("head", name)
        return cast(PredictionHead, self.heads[name])

    sites_with_adapter = trainable.sites_with_adapter
    sites_with_fusion = trainable.sites_with_fusion
    fusion_layers = trainable.fusion_layers
    adapter_parameters = trainable.adapter_parameters
    fusion_parameters = trainable.fusion_parameters
    encoder_parameters = trainable.encoder_parameters
    parameter_report = trainable.parameter_report
    pieces_of_other_dtype = trainable.pieces_of_other_dtype

    # ---- adding and deleting pieces (injection/inject.py) ----------------------------------------------
    add_adapter = inject.add_adapter
    add_fusion = inject.add_fusion
    add_head = inject.add_head
    delete_adapter = inject.delete_adapter
    delete_fusion = inject.delete_fusion
    delete_head = inject.delete_head

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
        self.set_state(self.state_for(adapter, fusion, head, skip_layers))

    def state_for(
        self,
        adapter: str | blocks.Block | None = None,
        fusion: str | None = None,
        head: str | None = None,
        skip_layers: Iterable[int] = (),
    ) -> ActiveState:
        """The state activate(...) would set (the current one with that choice), checked, without setting it."""
        if adapter is not None and fusion is not None:
            raise ConfigError("activate() takes an adapter or a fusion, not both (a fusion already runs its adapters)")
        skip = check_layers(skip_layers, "skip_layers", self.num_layers)
        block = blocks.resolve(self, adapter) if isinstance(adapter, blocks.Block) else None
        adapter = None if isinstance(adapter, blocks.Block) else adapter
        state = dataclasses.replace(
            self._state, adapter=adapter, fusion=fusion, head=head, skip_layers=skip, parallel_routes=None, block=block
        )
        return checked_against(self, state)

    def activated(
        self,
        adapter: str | blocks.Block | None = None,
        fusion: str | None = None,
        head: str | None = None,
        skip_layers: Iterable[int] = (),
        *,
        parallel_routes: Sequence[str] | None = None,
        parallel_split_site: str | None = None,
    ) -> contextlib.AbstractContextManager[ActiveState]:
        """activate(...) for the `with` block only (`running`). parallel_routes (composition.forward_parallel, with a
        fusion): adapters of the fusion that each run alone on their own slice of a batch repeated per route
        (at the input, or at site key `parallel_split_site`)."""
        state = self.state_for(adapter, fusion, head, skip_layers)
        if parallel_routes is not None:
            state = with_routes(state, parallel_routes, parallel_split_site)
        return self.running(state)

    @contextlib.contextmanager
    def running(self, state: ActiveState) -> Iterator[ActiveState]:
        """Run `state` inside the block; on leaving it, also through an exception, the state before it runs again
        (masks and fusion controls included), checked again as activate() checks it (injection/state.py restorable)."""
        previous = self._state
        self.set_state(state)
        try:
            yield self._state
        finally:
            self.set_state(restorable(self, previous))

    def set_state(self, state: ActiveState) -> None:
        """Run `state` from now on (`model.state`, or one from state_for), checked against the loaded pieces: the
        one place that changes what runs; the model and every site get the same value."""
        state = checked_against(self, state)
        for site in self.sites:
            site.set_state(state)
        self._state = state

    def set_fusion_implementation(self, implementation: str) -> None:
        """'fast' (default) or 'reference' (the paper's equations computed literally, for checking)."""
        self.set_state(fusion_controls.with_implementation(self._state, implementation))

    def set_fusion_step(self, step: int) -> None:
        """The training step that drives the fusion softmax temperature schedule, if one is configured."""
        self.set_state(fusion_controls.with_step(self._state, step))

    def set_fusion_mask(self, fusion: str, keep: Sequence[str] | None) -> None:
        """Fuse only the adapters in `keep` (others get zero attention), or all of them with keep=None."""
        fused = self.fusion_setup(fusion).adapters
        self.set_state(fusion_controls.with_mask(self._state, fusion, fused, keep))

    # ---- what trains (trainable.py) ----------------------------------------------------------------
    train_adapter = trainable.train_adapter
    train_fusion = trainable.train_fusion
    train_head = trainable.train_head

    def fusion_regularization(self, name: str | None = None) -> torch.Tensor:
        """Sum over layers of weight * ||V - I||² for fusion `name` (default: the active fusion)."""
        name = name if name is not None else self.active_fusion
        if name is not None:
            self.require("fusion", name)
        layers = self.fusion_layers(name) if name is not None else []
        return fusion_controls.regularization(layers, next(self.model.parameters()))

    # ---- forward -------------------------------------------------------------------------------------
    inference_cache = forward_runtime.inference_cache
    check_cache_placement = forward_runtime.check_cache_placement
    recording_fusion_attentions = forward_runtime.recording_fusion_attentions
    recording_generation = forward_runtime.recording_generation
    generate = dtype_errors.explains_dtype_errors(generation.generate)

    # ---- what a transformers pipeline reads of a model (pipelines.py) ------------------------------------------
    @property
    def device(self) -> torch.device:
        """The device of the embeddings, where inputs must be. A transformers pipeline reads it first thing as it
        is built: where it runs this model, its calls are checked from then on (pipelines.meet_pipeline)."""
        pipelines.meet_pipeline(self)
        return cast(nn.Embedding, cast(Any, self.model).get_input_embeddings()).weight.device

    to = devices.checked_to  # nn.Module's moves, with a device or dtype refused first where they cannot work
    cuda = devices.checked_cuda
    to_empty = devices.checked_to_empty

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the embeddings."""
        return cast(nn.Embedding, cast(Any, self.model).get_input_embeddings()).weight.dtype

    def can_generate(self) -> bool:
        """Whether the wrapped model has a language-model head, so `generate` works."""
        can_generate = getattr(self.model, "can_generate", None)
        return bool(callable(can_generate) and can_generate())

    config = property(pipelines.model_config)

    @property
    def generation_config(self) -> Any:
        """The wrapped model's generation settings (None where it has none)."""
        return getattr(self.model, "generation_config", None)

    for_pipeline = pipelines.for_pipeline

    @dtype_errors.explains_dtype_errors
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
        output_fusion_attentions=True: each fusion site's softmax weights (AdaptedModelOutput); refused when no
        fusion is active. Other keyword arguments go to the encoder; forward_inputs.check_call refuses those it does
        not take, and every malformed input.
        adapter_names / head_names: one entry per example, an adapter, a fusion or None (the plain model) / a head,
        for a batch whose examples run different pieces (routing.py); each example gets what it would alone."""
        check_bool(output_fusion_attentions, "output_fusion_attentions")  # "no" would record: a str is truthy
        self.check_cache_placement()
        forward_runtime.keep_state_in_recompute(self)
        head_name = self.active_head
        inputs = dict(encoder_inputs, input_ids=input_ids, attention_mask=attention_mask)
        if isinstance(self._state.block, blocks.Parallel):  # every example once per child: a routed call
            inputs, labels, adapter_names, head_names = routing.parallel_inputs(
                self._state.block, inputs, labels, adapter_names, head_names
            )
        if adapter_names is not None or head_names is not None or isinstance(self._state.block, blocks.BatchSplit):
            return routed_forward.routed_forward(
                self, inputs, adapter_names, head_names, labels, output_fusion_attentions
            )
        call = check_call(self, inputs, head_name, labels)
        composition.check_route_rows(self._state, call.rows)
        if output_fusion_attentions:
            forward_runtime.check_fusion_to_record(self)
        with self.recording_fusion_attentions(output_fusion_attentions) as recorder:
            encoded = call.encoder(**call.inputs)
        output = passed_through(encoded)
        if head_name is None:  # the wrapped model's own output (and loss, for a task model given labels)
            take_own_head_output(output, encoded)
        else:
            head = self.get_head(head_name)
            output.logits = head(encoded.last_hidden_state, call.head_mask, call.num_choices)
            output.task_loss = head.loss(output.logits, labels) if labels is not None else None
            if output.logits.dim() == 1 and pipelines.reading_pipeline() is not None:
                output.logits = output.logits.unsqueeze(-1)  # a regression head's [batch] as transformers gives it
        active = [self.active_fusion] if self.active_fusion is not None else []
        add_loss(self, output, [*active, *blocks.fusions_in(self._state.block)])
        if recorder is not None:
            output.fusion_attentions_by_site = dict(recorder)
            output.fusion_attentions = tuple(
                next((recorder[(layer, at)] for at in _FIRST_SITES if (layer, at) in recorder), None)
                for layer in range(self.num_layers)
            )
        return output

    routing_copies = routed_forward.routing_copies
    forward_parallel = dtype_errors.explains_dtype_errors(composition.forward_parallel)
    average_adapters = blocks.average_adapters

    # ---- pieces in and out (serialization/model_pieces.py; formats: serialization/formats.py) ----------------
    layout = model_pieces.layout
    export_piece = model_pieces.export_piece
    install_piece = model_pieces.install_piece

    fusion_state_dict = model_pieces.fusion_state_dict
    load_state_dict = model_pieces.load_state_dict  # names the pieces it lacks before torch lists their tensors
    save_adapter = model_pieces.save_adapter
    load_adapter = model_pieces.load_adapter
    save_fusion = model_pieces.save_fusion
    load_fusion = model_pieces.load_fusion
    save_head = model_pieces.save_head
    load_head = model_pieces.load_head

    # ---- whole setups, local or on the Hub (serialization/setup_save.py, setup_load.py, setup_push.py) ----------
    save_pretrained = setup_save.save_pretrained
    from_pretrained = classmethod(setup_load.from_pretrained)
    push_to_hub = setup_push.push_to_hub


def wrap(model: nn.Module) -> AdaptedModel:
    """Inject adapter sites into a HuggingFace encoder (AutoModel or a *For* task model)."""
    return AdaptedModel(model)
