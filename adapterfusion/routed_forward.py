"""Running a routed call (routing.py checks it): the state whose sites run each row with its own choice, the forward
that sets it for one call, and generate's copies of routed examples (generation.py), which set it per forward.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch

from adapterfusion import outputs, routing
from adapterfusion.blocks import Parallel
from adapterfusion.errors import ConfigError
from adapterfusion.injection.routing import ADAPTER, BLOCK, FUSION, Choice, RowRouting
from adapterfusion.injection.state import ActiveState

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel

# Why a recording_fusion_attentions() block refuses a routed call (forward's or generate's): a site records one
# fusion's weights for all rows, and the rows of such a call run different pieces (or the batch once per child).
ROUTED_RECORDING = (
    "recording fusion attentions records one fusion's weights for every row, which a call routing each example to "
    "its own choice (adapter_names=, an active BatchSplit or Parallel) does not run; run the fusion's examples alone "
    "inside recording_fusion_attentions(): `with model.activated(fusion=...): model(**batch)`"
)


def routed_forward(
    model: AdaptedModel,
    inputs: dict[str, Any],
    adapter_names: Sequence[Any] | None,
    head_names: Sequence[str] | None,
    labels: Any,
    output_fusion_attentions: bool,
) -> outputs.AdaptedModelOutput:
    """model.forward() with a choice per example (routing.py): the sites run each row's choice, each head its rows."""
    if model.runtime.is_recording:
        raise ConfigError(ROUTED_RECORDING)
    if isinstance(model.state.block, Parallel):  # routing.parallel_inputs made the call; checked, then repeated
        inputs, labels = routing.repeated_for_parallel(model, model.state.block, inputs, labels, head_names)
    routed = routing.prepare(model, inputs, adapter_names, head_names, labels, output_fusion_attentions)
    head = routed.heads[0][0]
    with model.running(routed_state(model, routed.row_choices, head, routed.device)):
        encoded = routed.call.encoder(**routed.call.inputs)
    output = outputs.passed_through(encoded)
    if head is None:  # no head anywhere: the wrapped model's own output, as forward() gives it
        outputs.take_own_head_output(output, encoded)
    else:
        heads = routing.apply_heads(model, routed, encoded.last_hidden_state, labels)
        output.logits, output.row_logits, output.task_loss = heads.logits, heads.row_logits, heads.task_loss
    outputs.add_loss(model, output, routed.fusions)
    return output


def routed_state(
    model: AdaptedModel, row_choices: Sequence[Choice], head: str | None, device: torch.device
) -> ActiveState:
    """The state that runs row i of the encoder with row_choices[i] (forward and generate): where every row chose the
    same, exactly what activated(...) runs, with no routing."""
    first = row_choices[0]
    if len(set(row_choices)) == 1:
        adapter, fusion = (first[1], None) if first and first[0] in (ADAPTER, BLOCK) else (None, first and first[1])
        return model.state_for(adapter, fusion, head, model.skip_layers)
    fusions = dict.fromkeys(choice[1] for choice in row_choices if choice and choice[0] == FUSION)
    row_routing = RowRouting(
        choices=tuple(row_choices),
        fused={name: model.fusion_setup(name).adapters for name in fusions},
        masks=model.state.fusion_masks,
        fast=model.state.fusion_implementation == "fast",
        device=device,
    )
    return dataclasses.replace(model.state_for(None, None, head, model.skip_layers), routing=row_routing)


@contextlib.contextmanager
def routing_copies(model: AdaptedModel, choices: Sequence[Choice]) -> Iterator[Callable[[int, torch.device], None]]:
    """Inside the block, run_rows(rows, device) makes the next forwards run a batch of `rows` rows, copies of the
    len(choices) examples in order (each repeated rows // len(choices) times, as generate repeats a prompt for
    beams), each copy with its example's choice (generation.py); what ran before is back on exit."""
    if model.runtime.is_recording:
        raise ConfigError(ROUTED_RECORDING)
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
            states[(rows, device)] = routed_state(model, row_choices, None, device)
        model.set_state(states[(rows, device)])

    with model.running(model.state):
        yield run_rows
