"""The README.md model card pushed with a setup: what each piece is for (task, dev metrics), its config, where it
came from (the index's provenance) and how to load it, under YAML metadata written by huggingface_hub."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Any

import huggingface_hub

from adapterfusion.defaults import DEFAULT_ENCODER_HUB_ID, DEFAULT_ENCODER_PACKAGE
from adapterfusion.io.documents import read_json
from adapterfusion.io.hub import HubRef, hub_ref
from adapterfusion.serialization.pieces import config_path, piece_folder


def is_our_card(text: str) -> bool:
    """Whether a README.md is a card render_model_card wrote (its YAML metadata names adapterfusion as the library),
    which a later push may replace; any other is the repository owner's."""
    head, _, rest = text.partition("\n")
    metadata = rest.partition("\n---")[0] if head.strip() == "---" else ""
    return any(line.strip() == "library_name: adapterfusion" for line in metadata.splitlines())


def render_model_card(folder: Path, index: Mapping[str, Any], ref: HubRef) -> str:
    """The card of the setup saved in `folder` (with its parsed `index`), to be pushed to `ref`."""
    base, pieces = index["base_model"], index["pieces"]
    provenance = index.get("provenance") or {}
    shipped, base_id = _base_names(str(base.get("name_or_path") or ""))
    kinds = sorted({p["kind"] for p in pieces})
    metadata = huggingface_hub.ModelCardData(
        library_name="adapterfusion",
        base_model=base_id,
        tags=["adapterfusion", "adapters"] + (["adapterfusion-fusion"] if "fusion" in kinds else []),
    )
    lines = [
        "---",
        metadata.to_yaml(),
        "---",
        "",
        f"# {ref}",
        "",
        f"{len(pieces)} piece(s) ({', '.join(kinds) or 'none'}) for a `{base.get('model_type')}` encoder "
        f"(hidden size {base.get('hidden_size')}, {base.get('num_layers')} layers"
        f"{f', {base_id}' if base_id else ''}), saved with adapterfusion {index.get('library_version')}.",
        "",
        "| piece | kind | task | dev metrics |",
        "|---|---|---|---|",
    ]
    for piece in pieces:
        origin = provenance.get(piece["name"], {})
        lines.append(
            f"| `{piece['name']}` | {piece['kind']} | {origin.get('task', '—')} | "
            f"{_metrics(origin.get('dev_metrics')) or '—'} |"
        )
    lines += [
        "",
        f"Active setup: {_active(index.get('active') or {})}.",
        "",
        "## Use",
        "",
        "```python",
        "import adapterfusion as af",
        "",
        "base = "
        + ("af.default_encoder_path()" if shipped else repr(base_id or "<folder or Hub id of the base encoder>")),
        f"model = af.AdaptedModel.from_pretrained(base, {str(ref)!r})   # every piece and the active setup",
    ]
    for kind in kinds:
        example = next(p["name"] for p in pieces if p["kind"] == kind)
        piece_ref = str(ref.child(piece_folder(kind, example)))
        lines.append(f"# model.load_{kind}({piece_ref!r})   # one {kind} into a model")
    lines += ["```", "", "## Pieces"]
    for piece in pieces:
        document = read_json(config_path(folder / piece_folder(piece["kind"], piece["name"]), piece["kind"]))
        lines += ["", f"### {piece['kind']} `{piece['name']}`", ""]
        if piece["kind"] == "fusion":
            lines += [f"Fuses {', '.join(f'`{a}`' for a in document.get('adapters', []))}.", ""]
        lines += ["Config:", "", "```json", json.dumps(document.get("config"), indent=2, sort_keys=True), "```"]
        if piece["name"] in provenance:
            lines += [
                "",
                "Provenance:",
                "",
                "```json",
                json.dumps(provenance[piece["name"]], indent=2, sort_keys=True),
                "```",
            ]
    return "\n".join(lines) + "\n"


def _base_names(name_or_path: str) -> tuple[bool, str | None]:
    """(is it the shipped encoder, its Hub id if known): a local path says nothing to a reader of the card."""
    path = PurePath(name_or_path)
    if path.name == "model" and path.parent.name == DEFAULT_ENCODER_PACKAGE:
        return True, DEFAULT_ENCODER_HUB_ID
    # a relative folder ('enc', 'exp/enc') is shaped like a Hub id; from_pretrained loads the folder where one
    # exists, so that is what it was
    local = path.is_absolute() or os.path.exists(name_or_path)
    return False, name_or_path if hub_ref(name_or_path) and not local else None


def _metrics(metrics: Any) -> str:
    if not isinstance(metrics, Mapping):
        return ""
    return ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in sorted(metrics.items()))


def _active(active: Mapping[str, Any]) -> str:
    parts = [f"{key} `{active[key]}`" for key in ("adapter", "fusion", "head") if active.get(key)]
    if active.get("skip_layers"):
        parts.append(f"layers {active['skip_layers']} skipped")
    parts += [f"fusion `{f}` masked to {keep}" for f, keep in (active.get("fusion_masks") or {}).items()]
    return "; ".join(parts) or "nothing active (the bare encoder)"
