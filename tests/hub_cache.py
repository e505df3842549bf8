"""A Hugging Face Hub cache laid out by hand, as huggingface_hub writes one (models--org--name/refs/main naming a
snapshot folder that holds the files), so that tests can load by Hub id offline from a cache that holds all of a repo,
or only the part an interrupted download left. A plain module: test modules import it by name."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

COMMIT = "0" * 40


def cached_repo(root: Path, repo_id: str, files: Mapping[str, Path]) -> Path:
    """`files` ({path in the repo: a local file}) of model repo `repo_id` at revision main in the cache `root`;
    returns the snapshot folder."""
    repo = root / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True, exist_ok=True)
    for relative, source in files.items():
        (snapshot / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, snapshot / relative)
    return snapshot
