"""AdaptedModel: a HuggingFace encoder with adapter sites injected, plus named heads.

`wrap(model)` replaces each insertion site with an AdapterSite (injection/site.py); adapters and fusion
layers live inside those sites, heads live here. Which adapter, fusion and head run is one ActiveState value
(injection/state.py) set with `activate` or, for a block, `activated`; which parameters train is set with the
`train_*` methods. Files are not the model's business: it installs and exports Pieces (piece.py), and
io/formats.py translates them to and from folders in our format or AdapterHub's.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn
from transformers.utils import ModelOutput

from adapterfusion._validation import (
    check_bool,
    check_choice,
    check_layers,
    check_piece_name,
    naming_file,
    require_loaded,
)
from adapterfusion.adapters.config import AdapterConfig, resolve_adapter_config
from adapterfusion.adapters.placement import adapter_modules
from adapterfusion.encoders import check_wrappable
from adapterfusion.errors import ConfigError, NameNotFoundError, SerializationError
from adapterfusion.forward_inputs import check_call
from adapterfusion.fusion.config import FusionConfig, FusionSetup, resolve_fusion_config
from adapterfusion.fusion.layer import FusionLayer
from adapterfusion.fusion.placement import fused_adapters, fusion_modules
from adapterfusion.heads.config import HeadConfig, check_head_labels
from adapterfusion.heads.module import PredictionHead
from adapterfusion.injection.architectures import ArchitectureSpec, architecture_for, get_submodule
from adapterfusion.injection.runtime import ForwardRuntime, Recorder
from adapterfusion.injection.site import FUSION_IMPLEMENTATIONS, AdapterSite
from adapterfusion.injection.state import ActiveState, checked, kept_adapters, with_routes
from adapterfusion.injection.unloaded import UnloadedSites, check_wrapped
from adapterfusion.io.formats import read_piece, write_piece
from adapterfusion.io.pieces import check_weights
from adapterfusion.io.setup import load_setup, piece_source, push_setup, save_setup
from adapterfusion.parameters import ParameterReport, build_parameter_report
from adapterfusion.piece import PIECE_KINDS, EncoderFingerprint, EncoderLayout, Piece, by_site, param_key

if TYPE_CHECKING:
    from adapterfusion.composition import ParallelOutput


@dataclass
class AdaptedModelOutput(ModelOutput):
    """loss = task_loss + fusion_regularization while a fusion with a trainable V is trained.
    fusion_attentions[layer]: [batch, seq, N] softmax weights of the 'output' site (else 'attention' site),
    None for layers without fusion; every site's weights are in fusion_attentions_by_site[(layer, position)]."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    last_hidden_state: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    task_loss: torch.Tensor | None = None
    fusion_regularization: torch.Tensor | None = None
    fusion_attentions: tuple[torch.Tensor | None, ...] | None = None
    fusion_attentions_by_site: dict[tuple[int, str], torch.Tensor] | None = None


class AdaptedModel(nn.Module):
    """A HuggingFace encoder with an AdapterSite at each insertion site, and the named adapters, fusions and heads
    added to it. Build it with `wrap(model)` (or `from_pretrained`); `unload()` gives the plain model back.

    Pieces: add_*/delete_* (new), load_*/save_* (files, either format), install_piece/export_piece (Piece values).
    What runs: activate / activated, set_fusion_mask, set_fusion_step, set_fusion_implementation; `state` holds it.
    What trains: train_adapter, train_fusion, train_head. Forward: `model(**inputs)`, or forward_parallel for every
    fused adapter alone and the fusion in one call."""

    # The loss is a mean over the batch, not normalised by the Trainer's num_items_in_batch: without this the
    # Trainer, seeing **encoder_inputs, skips dividing by gradient_accumulation_steps.
    accepts_loss_kwargs = False

    def __init__(self, model: nn.Module) -> None:
        """Wrap `model` (AutoModel or a *For* task model of an architecture in ARCHITECTURES) in place."""
        check_wrappable(model)
        super().__init__()
        self.model = model
        self.training = model.training  # wrapping an eval-mode encoder gives an eval-mode model
        self.architecture: ArchitectureSpec = architecture_for(model)
        config: Any = model.config
        self.hidden_size = int(config.hidden_size)
        layers = self.encoder_layers()
        self.num_layers = len(layers)
        self._runtime = ForwardRuntime()  # what forwards record and reuse, shared by every site
        self.fingerprint = EncoderFingerprint(
            model_type=config.model_type,
            hidden_size=self.hidden_size,
            num_layers=self.num_layers,
            name_or_path=str(getattr(config, "_name_or_path", "") or ""),
        )
        self.sites: list[AdapterSite] = []
        for index, layer in enumerate(layers):
            for position in ("attention", "output"):
                self.sites.append(self._inject(layer, index, position))
        self.heads = nn.ModuleDict()
        self.adapter_configs: dict[str, AdapterConfig] = {}
        self._fusion_setups: dict[str, FusionSetup] = {}
        self._set_state(ActiveState())

    def encoder_layers(self) -> nn.ModuleList:
        """The HF ModuleList of encoder layers (the architecture spec says where it is)."""
        return cast(nn.ModuleList, get_submodule(cast(nn.Module, self.model.base_model), self.architecture.layers))

    def _inject(self, layer: nn.Module, index: int, position: str) -> AdapterSite:
        spec = self.architecture.site(position)
        parent_path, _, attribute = spec.path.rpartition(".")
        parent = get_submodule(layer, parent_path) if parent_path else layer
        base = getattr(parent, attribute)
        layer_norm = get_submodule(layer, spec.layer_norm) if spec.layer_norm else None
        site = AdapterSite(base, spec, index, position, parent_layer_norm=layer_norm, runtime=self._runtime)
        setattr(parent, attribute, site)
        return site

    def unload(self) -> nn.Module:
        """Put every original sub-module back and return the plain HuggingFace model."""
        layers = self.encoder_layers()
        for site in self.sites:
            parent_path, _, attribute = site.spec.path.rpartition(".")
            layer = layers[site.layer_index]
            parent = get_submodule(layer, parent_path) if parent_path else layer
            setattr(parent, attribute, site.unwrap())
        self.sites = UnloadedSites()  # every later use of the sites refuses, naming af.wrap
        return self.model

    # ---- bookkeeping ---------------------------------------------------------------------------------
    @property
    def adapter_names(self) -> list[str]:
        """The loaded adapters, in the order they were added."""
        return list(self.adapter_configs)

    @property
    def fusion_names(self) -> list[str]:
        """The loaded fusions, in the order they were added."""
        return list(self._fusion_setups)

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
            "fusion": self._fusion_setups,
            "head": self.heads.keys(),
        }
        require_loaded(kind, name, loaded[kind])

    def fusion_setup(self, name: str) -> FusionSetup:
        """Loaded fusion `name`'s config and the adapters it fuses."""
        self.require("fusion", name)
        return self._fusion_setups[name]

    def sites_with_adapter(self, name: str) -> list[AdapterSite]:
        """The sites that hold adapter `name` (its positions, without its leave_out layers), in layer order."""
        return [site for site in self.sites if name in site.adapters]

    def sites_with_fusion(self, name: str) -> list[AdapterSite]:
        """The sites that hold a layer of fusion `name`, in layer order."""
        return [site for site in self.sites if name in site.fusions]

    def adapter_parameters(self, name: str) -> list[nn.Parameter]:
        """Adapter `name`'s parameters at every site (with Houlsby's own LayerNorm copies)."""
        return [p for site in self.sites_with_adapter(name) for p in site.adapters[name].parameters()]

    def fusion_parameters(self, name: str) -> list[nn.Parameter]:
        """Fusion `name`'s Q/K/V parameters at every site."""
        return [p for site in self.sites_with_fusion(name) for p in site.fusions[name].parameters()]

    def encoder_parameters(self) -> list[nn.Parameter]:
        """The pretrained weights: everything in the HF model that is not an adapter or a fusion layer."""
        added = {id(p) for site in self.sites for module in (site.adapters, site.fusions) for p in module.parameters()}
        return [p for p in self.model.parameters() if id(p) not in added]

    # ---- adding pieces -------------------------------------------------------------------------------
    def add_adapter(
        self, name: str, config: AdapterConfig | str | Mapping[str, Any] | None = None, overwrite: bool = False
    ) -> AdapterConfig:
        """Add a new adapter `name` at the sites `config` places it (a config, a preset name such as 'pfeiffer' or
        'houlsby', a dict, or None for Pfeiffer); returns the resolved config. It is not activated."""
        config = resolve_adapter_config(config)
        modules = adapter_modules(self.sites, name, config, self.num_layers, self.hidden_size)
        self._attach_adapter(name, config, modules, overwrite)
        return config

    def _attach_adapter(
        self, name: str, config: AdapterConfig, modules: dict[AdapterSite, nn.Module], overwrite: bool
    ) -> None:
        if name in self.adapter_configs:
            if not check_bool(overwrite, "overwrite"):
                raise ConfigError(
                    f"an adapter named {name!r} already exists; delete_adapter({name!r}) or pass overwrite=True"
                )
            self.delete_adapter(name)
        for site, module in modules.items():
            site.adapters[name] = module
        self.adapter_configs[name] = config

    def delete_adapter(self, name: str) -> None:
        """Remove adapter `name` (refused while a fusion uses it); if it was active, the bare encoder runs."""
        self.require("adapter", name)
        users = [fusion for fusion, setup in self._fusion_setups.items() if name in setup.adapters]
        if users:
            raise ConfigError(f"adapter {name!r} is used by fusion(s) {users}; delete those fusions first")
        for site in self.sites_with_adapter(name):
            del site.adapters[name]
        del self.adapter_configs[name]
        if self.active_adapter == name:
            self.activate(head=self.active_head)

    def add_head(self, name: str, config: HeadConfig, overwrite: bool = False) -> PredictionHead:
        """Add a new prediction head `name` (e.g. af.ClassificationHead(num_labels=2)); returns its module."""
        return self._attach_head(name, self._build_head(name, config, overwrite))

    def _build_head(self, name: str, config: HeadConfig, overwrite: bool) -> PredictionHead:
        """Check the name and config and build the head on the encoder's device and dtype (so weights loaded into it
        keep their precision), without touching the model yet."""
        check_wrapped(self.sites)
        check_piece_name(name, "head")
        if not isinstance(config, HeadConfig):
            raise ConfigError(
                f"head {name!r}: expected a head config such as af.ClassificationHead(num_labels=2), "
                f"got {type(config).__name__}"
            )
        if name in self.heads and not check_bool(overwrite, "overwrite"):
            raise ConfigError(f"a head named {name!r} already exists; delete_head({name!r}) or pass overwrite=True")
        reference = next(self.model.parameters())
        return PredictionHead(config, self.hidden_size).to(device=reference.device, dtype=reference.dtype)

    def _attach_head(self, name: str, head: PredictionHead) -> PredictionHead:
        """Put the head in the model's train/eval mode, and register it."""
        self.heads[name] = head.train(self.training)
        return head

    def get_head(self, name: str) -> PredictionHead:
        """The loaded head `name` (as a PredictionHead: `heads` is an nn.ModuleDict, untyped to a type checker)."""
        self.require("head", name)
        return cast(PredictionHead, self.heads[name])

    def _fusion_layers(self, name: str) -> list[FusionLayer]:
        return [cast(FusionLayer, site.fusions[name]) for site in self.sites_with_fusion(name)]

    def delete_head(self, name: str) -> None:
        """Remove head `name`; if it was active, the forward returns the wrapped model's own output."""
        self.require("head", name)
        del self.heads[name]
        if self.active_head == name:
            self._set_state(dataclasses.replace(self._state, head=None))

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
        self._attach_fusion(name, config, adapters, modules, overwrite)
        return config

    def _attach_fusion(
        self,
        name: str,
        config: FusionConfig,
        adapters: tuple[str, ...],
        modules: dict[AdapterSite, nn.Module],
        overwrite: bool,
    ) -> None:
        if name in self._fusion_setups:
            if not check_bool(overwrite, "overwrite"):
                raise ConfigError(
                    f"a fusion named {name!r} already exists; delete_fusion({name!r}) or pass overwrite=True"
                )
            self.delete_fusion(name)
        for site, module in modules.items():
            site.fusions[name] = module
        self._fusion_setups[name] = FusionSetup(config, adapters)

    def delete_fusion(self, name: str) -> None:
        """Remove fusion `name` and its mask; if it was active, the bare encoder runs."""
        self.require("fusion", name)
        for site in self.sites_with_fusion(name):
            del site.fusions[name]
        del self._fusion_setups[name]
        masks = {fusion: kept for fusion, kept in self._state.fusion_masks.items() if fusion != name}
        self._set_state(dataclasses.replace(self._state, fusion_masks=masks))
        if self.active_fusion == name:
            self.activate(head=self.active_head)

    # ---- what runs (injection/state.py) ---------------------------------------------------------------
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
    def skip_layers(self) -> tuple[int, ...]:
        """The layers whose sites run as the bare encoder (AdapterDrop)."""
        return self._state.skip_layers

    def activate(
        self,
        adapter: str | None = None,
        fusion: str | None = None,
        head: str | None = None,
        skip_layers: Iterable[int] = (),
    ) -> None:
        """Choose what runs: one adapter or one fusion (or neither: the bare encoder), and a head or none.
        skip_layers: layers whose sites run as the bare encoder (AdapterDrop). Fusion masks and controls stay."""
        self._set_state(self._activation(adapter, fusion, head, skip_layers))

    def _activation(
        self, adapter: str | None, fusion: str | None, head: str | None, skip_layers: Iterable[int]
    ) -> ActiveState:
        """The current state with activate()'s choice, checked."""
        if adapter is not None and fusion is not None:
            raise ConfigError("activate() takes an adapter or a fusion, not both (a fusion already runs its adapters)")
        state = dataclasses.replace(
            self._state,
            adapter=adapter,
            fusion=fusion,
            head=head,
            skip_layers=check_layers(skip_layers, "skip_layers", self.num_layers),
            parallel_routes=None,
        )
        return self._checked(state)

    @contextlib.contextmanager
    def activated(
        self,
        adapter: str | None = None,
        fusion: str | None = None,
        head: str | None = None,
        skip_layers: Iterable[int] = (),
        *,
        parallel_routes: Sequence[str] | None = None,
        parallel_split_site: str | None = None,
    ) -> Iterator[ActiveState]:
        """activate(...) for the `with` block only: on leaving it, also through an exception, the state before it
        runs again (masks and fusion controls included). parallel_routes (composition.forward_parallel, with a
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
            self._set_state(self._checked(previous))

    def _checked(self, state: ActiveState) -> ActiveState:
        fusions = {name: setup.adapters for name, setup in self._fusion_setups.items()}
        return checked(state, self.adapter_configs, fusions, list(self.heads), self.num_layers)

    def _set_state(self, state: ActiveState) -> None:
        """The one place that changes what runs: the model and every site get the same value."""
        for site in self.sites:
            site.set_state(state)
        self._state = state

    def _set_trainable(self, parameters: Iterable[nn.Parameter]) -> None:
        for parameter in self.parameters():
            parameter.requires_grad_(False)
        for parameter in parameters:
            parameter.requires_grad_(True)

    def _default_head(self, explicit: str | None, *candidates: str | None) -> str | None:
        if explicit is not None:
            return explicit
        return next((c for c in candidates if c is not None and c in self.heads), None)

    def train_adapter(self, name: str, head: str | None = None, train_encoder: bool = False) -> None:
        """Freeze everything but adapter `name` (with its own LayerNorm copies, for Houlsby) and its head.
        The head defaults to the one named like the adapter, else the active head.
        train_encoder=True also trains the encoder (MT-A, Stickland & Murray 2019)."""
        self.require("adapter", name)
        head = self._default_head(head, name, self.active_head)
        self.activate(adapter=name, head=head, skip_layers=self.skip_layers)
        trainable = self.adapter_parameters(name) + (self.encoder_parameters() if train_encoder else [])
        self._set_trainable(trainable + (list(self.heads[head].parameters()) if head else []))

    def train_fusion(self, name: str, head: str | None = None) -> None:
        """Freeze the encoder and all adapters; train the fusion's Q/K/V and the head (explicit, else the one
        named like the fusion, else the active head)."""
        self.require("fusion", name)
        head = self._default_head(head, name, self.active_head)
        self.activate(fusion=name, head=head, skip_layers=self.skip_layers)
        self._set_trainable(self.fusion_parameters(name) + (list(self.heads[head].parameters()) if head else []))

    def train_head(self, name: str, train_encoder: bool = False) -> None:
        """The 'Head' baseline (frozen encoder) or, with train_encoder=True, full fine-tuning. Keeps the active
        adapter or fusion running but frozen."""
        self.require("head", name)
        self.activate(adapter=self.active_adapter, fusion=self.active_fusion, head=name, skip_layers=self.skip_layers)
        self._set_trainable(list(self.heads[name].parameters()) + (self.encoder_parameters() if train_encoder else []))

    # ---- fusion controls -----------------------------------------------------------------------------
    def set_fusion_implementation(self, implementation: str) -> None:
        """'fast' (default) or 'reference' (the paper's equations computed literally, for checking)."""
        check_choice(implementation, FUSION_IMPLEMENTATIONS, "fusion implementation")
        self._set_state(dataclasses.replace(self._state, fusion_implementation=implementation))

    def set_fusion_step(self, step: int) -> None:
        """The training step that drives the fusion softmax temperature schedule, if one is configured."""
        self._set_state(dataclasses.replace(self._state, fusion_step=step))

    def set_fusion_mask(self, fusion: str, keep: Sequence[str] | None) -> None:
        """Fuse only the adapters in `keep` (others get zero attention), or all of them with keep=None."""
        self.require("fusion", fusion)
        names = self.fusion_setup(fusion).adapters
        masks = {name: kept for name, kept in self._state.fusion_masks.items() if name != fusion}
        if keep is not None:
            masks[fusion] = kept_adapters(fusion, names, keep)
        self._set_state(dataclasses.replace(self._state, fusion_masks=masks))

    def fusion_regularization(self, name: str | None = None) -> torch.Tensor:
        """Sum over layers of weight * ||V - I||² for fusion `name` (default: the active fusion)."""
        name = name if name is not None else self.active_fusion
        reference = next(self.model.parameters())
        total = torch.zeros((), device=reference.device, dtype=reference.dtype)
        if name is None:
            return total
        self.require("fusion", name)
        for layer in self._fusion_layers(name):
            total = total + layer.regularization()
        return total

    @contextlib.contextmanager
    def inference_cache(self) -> Iterator[None]:
        """Fold each fusion's weights once and reuse them for every forward inside the block (evaluation,
        serving); saves about 3·(M + N)·d² per fusion layer and forward. Weights must not change inside:
        it runs under torch.no_grad(), and the cache is dropped on exit."""
        check_wrapped(self.sites)
        with self._runtime.caching(), torch.no_grad():
            yield

    # ---- forward -------------------------------------------------------------------------------------
    def recording_fusion_attentions(self, enabled: bool = True) -> contextlib.AbstractContextManager[Recorder | None]:
        """Inside the block every fusion site records its softmax weights into the yielded dict, keyed (layer,
        position); with enabled=False nothing is recorded and None is yielded."""
        check_wrapped(self.sites)
        return self._runtime.recording(enabled)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_fusion_attentions: bool = False,
        **encoder_inputs: Any,
    ) -> AdaptedModelOutput:
        """Run the encoder with what is active; with an active head, its logits (and with `labels` its loss, plus the
        fusion regularisation while a fusion's V trains; with no head, a wrapped HF task model's own loss).
        output_fusion_attentions=True: each fusion site's softmax weights (AdaptedModelOutput). Other keyword arguments
        go to the encoder; forward_inputs.check_call refuses those it does not take, and every malformed input."""
        head_name = self.active_head
        inputs = dict(encoder_inputs, input_ids=input_ids, attention_mask=attention_mask)
        call = check_call(self, inputs, head_name, labels)
        with self.recording_fusion_attentions(output_fusion_attentions) as recorder:
            encoded = call.encoder(**call.inputs)
        output = AdaptedModelOutput(
            last_hidden_state=getattr(encoded, "last_hidden_state", None),
            hidden_states=getattr(encoded, "hidden_states", None),
            attentions=getattr(encoded, "attentions", None),
        )
        if head_name is None:  # the wrapped model's own output (and loss, for a task model given labels)
            output.logits, output.task_loss = getattr(encoded, "logits", None), getattr(encoded, "loss", None)
        else:
            head = self.get_head(head_name)
            output.logits = head(encoded.last_hidden_state, call.inputs.get("attention_mask"), call.num_choices)
            output.task_loss = head.loss(output.logits, labels) if labels is not None else None
        if output.task_loss is not None:
            output.loss = output.task_loss
            if self.training and self._fusion_value_trains():
                output.fusion_regularization = self.fusion_regularization()
                output.loss = output.loss + output.fusion_regularization
        if recorder is not None:
            output.fusion_attentions_by_site = dict(recorder)
            output.fusion_attentions = tuple(
                recorder.get((layer, "output"), recorder.get((layer, "attention"))) for layer in range(self.num_layers)
            )
        return output

    def forward_parallel(
        self,
        fusion: str,
        heads: Mapping[str, str] | None = None,
        fusion_head: str | None = None,
        output_fusion_attentions: bool = False,
        share_encoder_prefix: bool = True,
        **inputs: Any,
    ) -> ParallelOutput:
        """Each adapter of `fusion` alone with its head (heads: adapter -> head, default: every fused adapter with
        the head named like it) and the fusion with `fusion_head` (default: named like it), in one forward that
        runs the encoder once on the batch repeated per route (composition.py). Equals activating each alone.
        share_encoder_prefix: run the encoder below the fusion's first site once on the plain batch, where the
        architecture allows it (False: repeat the batch at the input, e.g. to compare)."""
        from adapterfusion.composition import forward_parallel

        return forward_parallel(
            self, fusion, heads, fusion_head, output_fusion_attentions, share_encoder_prefix, **inputs
        )

    def _fusion_value_trains(self) -> bool:
        if self.active_fusion is None:
            return False
        return any(
            layer.value is not None and layer.value.weight.requires_grad
            for layer in self._fusion_layers(self.active_fusion)
        )

    # ---- pieces in and out (formats: io/formats.py) ----------------------------------------------------
    def layout(self) -> EncoderLayout:
        """What a file format may know of this encoder: fingerprint, where each site is, its HF config and each
        site's pretrained LayerNorm (for formats that store weights by module path)."""
        return EncoderLayout(
            fingerprint=self.fingerprint,
            architecture=self.architecture,
            site_paths={
                site.key: f"{self.architecture.layers}.{site.layer_index}.{site.spec.path}" for site in self.sites
            },
            base_model_prefix=str(getattr(self.model, "base_model_prefix", "") or ""),
            base_model_class=type(self.model.base_model).__name__,
            config=self.model.config,
            pretrained_layer_norms={
                site.key: norm.state_dict() if (norm := site.pretrained_layer_norm) is not None else {}
                for site in self.sites
            },
        )

    def export_piece(self, kind: str, name: str) -> Piece:
        """Adapter, fusion or head `name` as a Piece (its config and tensors, no modules), for a format to write."""
        check_choice(kind, PIECE_KINDS, "piece kind")
        self.require(kind, name)
        if kind == "head":
            head = self.get_head(name)
            return Piece("head", name, head.config, head.state_dict())
        modules = self._piece_modules(kind, name)
        tensors = {
            param_key(site.key, key): value
            for site, module in modules.items()
            for key, value in module.state_dict().items()
        }
        if kind == "adapter":
            return Piece("adapter", name, self.adapter_configs[name], tensors)
        setup = self._fusion_setups[name]
        return Piece("fusion", name, setup.config, tensors, setup.adapters)

    def install_piece(self, piece: Piece, overwrite: bool = False, labels: Sequence[str] | None = None) -> str:
        """Add `piece` (replacing one of that name with overwrite=True); returns its name. Everything is checked on
        modules built on the side, so a bad piece never replaces or half-adds anything. `labels` (heads only, e.g. a
        task's label_names): refuse a head saved for another label set. A fusion's adapters must be loaded first."""
        with naming_file(piece.blame) if piece.blame is not None else contextlib.nullcontext():
            if piece.kind == "head":
                assert isinstance(piece.config, HeadConfig)
                check_head_labels(piece.config, labels, piece.source)
                check_weights(piece.tensors, piece.source)
                head = self._build_head(piece.name, piece.config, overwrite)
                _load_state(head, dict(piece.tensors), piece.source)
                self._attach_head(piece.name, head)
            elif piece.kind == "adapter":
                assert isinstance(piece.config, AdapterConfig)
                check_weights(piece.tensors, piece.source)
                modules = adapter_modules(self.sites, piece.name, piece.config, self.num_layers, self.hidden_size)
                self._load_site_tensors(piece, modules)
                self._attach_adapter(piece.name, piece.config, modules, overwrite)
            else:
                assert isinstance(piece.config, FusionConfig)
                missing = [a for a in piece.adapters if a not in self.adapter_configs]
                if missing:
                    raise NameNotFoundError(
                        f"the fusion in {piece.source} fuses adapters {list(piece.adapters)}, of which {missing} are "
                        "not loaded; load_adapter() each of them first"
                    )
                check_weights(piece.tensors, piece.source)
                modules = fusion_modules(
                    self.sites, piece.name, piece.adapters, piece.config, self.adapter_configs, self.hidden_size
                )
                self._load_site_tensors(piece, modules)
                self._attach_fusion(piece.name, piece.config, piece.adapters, modules, overwrite)
        return piece.name

    def _piece_modules(self, kind: str, name: str) -> dict[AdapterSite, nn.Module]:
        if kind == "adapter":
            return {site: site.adapters[name] for site in self.sites_with_adapter(name)}
        return {site: site.fusions[name] for site in self.sites_with_fusion(name)}

    def _load_site_tensors(self, piece: Piece, modules: Mapping[AdapterSite, nn.Module]) -> None:
        per_site = by_site(piece.tensors)
        stray = sorted(set(per_site) - {site.key for site in modules})
        if stray:
            raise SerializationError(
                f"{piece.source}: weights for sites this encoder's config does not place ({stray[:5]})"
            )
        for site, module in modules.items():
            _load_state(module, per_site.get(site.key, {}), piece.source)

    def fusion_state_dict(self, name: str) -> dict[str, torch.Tensor]:
        """Fusion `name`'s Q/K/V weights keyed `<site key>.<param>` (piece.py): the tensors of its Piece."""
        return dict(self.export_piece("fusion", name).tensors)

    def save_adapter(self, name: str, directory: str | Path) -> Path:
        """Save adapter `name` into `directory` (adapter.safetensors + adapter_config.json, io/pieces.py)."""
        return write_piece(self.export_piece("adapter", name), directory, self.layout())

    def load_adapter(self, directory: str | Path, name: str | None = None, overwrite: bool = False) -> str:
        """Load an adapter saved by save_adapter or by AdapterHub; returns its name (the saved one unless `name` is
        given). `directory` may also be a saved setup holding one adapter, or a Hub id of either (io/setup.py)."""
        return self._load_piece("adapter", directory, name, overwrite)

    def save_fusion(self, name: str, directory: str | Path) -> Path:
        """Save fusion `name` (its Q/K/V at every site and the names of the adapters it fuses) into `directory`."""
        return write_piece(self.export_piece("fusion", name), directory, self.layout())

    def load_fusion(self, directory: str | Path, name: str | None = None, overwrite: bool = False) -> str:
        """Load a fusion saved by save_fusion or AdapterHub (or a Hub id, as in load_adapter); the adapters it fuses
        must be loaded first."""
        return self._load_piece("fusion", directory, name, overwrite)

    def save_head(self, name: str, directory: str | Path) -> Path:
        """Save head `name` into `directory` (head.safetensors + head_config.json)."""
        return write_piece(self.export_piece("head", name), directory, self.layout())

    def load_head(
        self,
        directory: str | Path,
        name: str | None = None,
        overwrite: bool = False,
        labels: Sequence[str] | None = None,
    ) -> str:
        """Load a head saved by save_head (or AdapterHub); with `labels` (e.g. a task's label_names), a head saved for
        another label set is refused. `directory` may be a Hub id, as in load_adapter."""
        return self._load_piece("head", directory, name, overwrite, labels)

    def _load_piece(
        self, kind: str, source: str | Path, name: str | None, overwrite: bool, labels: Sequence[str] | None = None
    ) -> str:
        piece = read_piece(piece_source(source, kind), kind, self.layout())
        return self.install_piece(piece.renamed(name), overwrite, labels)

    # ---- whole setups, local or on the Hub (io/setup.py) ---------------------------------------------------
    def save_pretrained(
        self,
        directory: str | Path,
        *,
        adapters: str | Sequence[str] | None = None,
        fusions: str | Sequence[str] | None = None,
        heads: str | Sequence[str] | None = None,
        provenance: Mapping[str, Any] | None = None,
    ) -> Path:
        """Every piece (or the named ones, with the adapters of named fusions) and the active setup in one folder;
        `provenance` maps a piece name to the run folder or store entry it was trained in, for its model card."""
        return save_setup(self, directory, adapters, fusions, heads, provenance)

    @classmethod
    def from_pretrained(cls, base: nn.Module | str | Path, source: str | Path) -> AdaptedModel:
        """`base` (a HuggingFace encoder, its folder or Hub id) with the setup save_pretrained or push_to_hub wrote
        (a folder or a Hub id 'org/name[/subfolder]'): every piece, and the active setup as it was saved."""
        return load_setup(cls, base, source)

    def push_to_hub(
        self,
        repo_id: str,
        *,
        adapters: str | Sequence[str] | None = None,
        fusions: str | Sequence[str] | None = None,
        heads: str | Sequence[str] | None = None,
        provenance: Mapping[str, Any] | None = None,
        private: bool | None = None,
        token: str | None = None,
        commit_message: str | None = None,
    ) -> str:
        """save_pretrained into the Hub repo `repo_id` ('org/name[/subfolder]') with a generated model card; returns
        the id that from_pretrained and load_adapter/load_fusion/load_head (with '/adapters/<name>' etc.) take."""
        return push_setup(
            self,
            repo_id,
            adapters,
            fusions,
            heads,
            provenance,
            private=private,
            token=token,
            commit_message=commit_message,
        )

    # ---- reporting -----------------------------------------------------------------------------------
    def parameter_report(self) -> ParameterReport:
        """Total and trainable parameters of the encoder and of every adapter, fusion and head."""
        pieces = (
            [(name, "adapter", self.adapter_parameters(name)) for name in self.adapter_names]
            + [(name, "fusion", self.fusion_parameters(name)) for name in self.fusion_names]
            + [(name, "head", list(self.heads[name].parameters())) for name in self.head_names]
        )
        return build_parameter_report(self.encoder_parameters(), pieces)


def _load_state(module: nn.Module, state: dict[str, torch.Tensor], source: str | Path) -> None:
    own = module.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    wrong = sorted(k for k in set(own) & set(state) if own[k].shape != state[k].shape)
    if missing or unexpected or wrong:
        detail = "; ".join(
            part
            for part in (
                f"missing {missing[:5]}" if missing else "",
                f"unexpected {unexpected[:5]}" if unexpected else "",
                "wrong shapes "
                + ", ".join(f"{k}: saved {tuple(state[k].shape)} vs {tuple(own[k].shape)}" for k in wrong[:5])
                if wrong
                else "",
            )
            if part
        )
        raise SerializationError(f"{source}: weights do not match the saved config ({detail})")
    module.load_state_dict(state)


def wrap(model: nn.Module) -> AdaptedModel:
    """Inject adapter sites into a HuggingFace encoder (AutoModel or a *For* task model)."""
    return AdaptedModel(model)
