"""What a run records of its local encoder's tokenizer files, beside the digests of its weight files
(encoder_identity.encoder_files): an edited vocabulary, special tokens or chat template gives other tokens from the
same data, so the experiment runner (experiments/stale.py) runs such a job again, as it does one whose weights were
replaced. Judged from the files, without loading the tokenizer, as the weights are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapterfusion.encoder_folders import SAVED_EXTRAS, TOKENIZER_FILES
from adapterfusion.encoder_loading import Encoder
from adapterfusion.file_digests import file_sha256

# The files save_pretrained writes of a tokenizer (SAVED_EXTRAS also names a model's generation settings, which
# encode nothing), and the folder of its further chat templates (transformers' CHAT_TEMPLATE_DIR).
TOKENIZER_FILE_NAMES = (*TOKENIZER_FILES, *(name for name in SAVED_EXTRAS if name != "generation_config.json"))
CHAT_TEMPLATES_DIR = "additional_chat_templates"


def tokenizer_file_digests(folder: Path) -> dict[str, str]:
    """{file name (relative to `folder`): sha256} of the tokenizer files in a model folder; OSError when the folder
    cannot be read."""
    found = [path for path in sorted(folder.iterdir()) if path.is_file() and path.name in TOKENIZER_FILE_NAMES]
    templates = folder / CHAT_TEMPLATES_DIR
    if templates.is_dir():
        found += [path for path in sorted(templates.iterdir()) if path.is_file()]
    return {path.relative_to(folder).as_posix(): file_sha256(path) for path in found}


def tokenizer_files(encoder: Encoder) -> dict[str, Any] | None:
    """What a run records of a local encoder's tokenizer files, {"folder": ..., "sha256": tokenizer_file_digests};
    None for a Hub id (its files are a revision's, not the user's to edit)."""
    if encoder.folder is None:
        return None
    return {"folder": str(encoder.folder), "sha256": tokenizer_file_digests(encoder.folder)}
