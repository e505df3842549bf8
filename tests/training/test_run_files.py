"""training/run.py's read_json: every JSON file a run or the store wrote is read back through it, so a missing or
damaged one is always a RunFileError (a TrainingError and a SerializationError) naming the file and the fix."""

from __future__ import annotations

import re

import pytest

import adapterfusion as af
from adapterfusion.analysis.fusion_attention import FUSION_ATTENTION_FILE, load_fusion_activation
from adapterfusion.training import AdapterStore, RunFileError, TrainingError
from adapterfusion.training.multitask import MARKER_FILE, read_mt_a_marker
from adapterfusion.training.run_files import read_json, read_run_json
from adapterfusion.training.store import ENTRY_FILE


def test_read_json_names_the_file_what_is_wrong_and_the_fix(tmp_path):
    good = tmp_path / "good.json"
    good.write_text('{"a": [1, 2]}', encoding="utf-8")
    assert read_json(good, "unused") == {"a": [1, 2]}
    damaged = tmp_path / "damaged.json"
    damaged.write_text('{"a": ', encoding="utf-8")
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes(b'{"a": "\xe9"}')
    cases = [
        (tmp_path / "missing.json", "does not exist"),
        (damaged, "is not valid JSON"),
        (latin1, "is not valid JSON"),
        (tmp_path, "is a folder, not a file"),  # said as such (io/paths.py), not "cannot be read"
        (tmp_path / "zero.json", "is a character device"),  # never read: /dev/zero would never end
    ]
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    for path, what in cases:
        with pytest.raises(RunFileError) as caught:
            read_json(path, "write it again")
        assert str(caught.value).startswith(f"{path} {what}") and str(caught.value).endswith("; write it again")
        assert isinstance(caught.value, TrainingError) and isinstance(caught.value, af.SerializationError)


def _damaged(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"truncated": ', encoding="utf-8")
    return path


def test_every_reader_of_a_run_or_store_file_raises_run_file_error(tmp_path):
    store = AdapterStore(tmp_path / "store")
    readers = [
        (_damaged(tmp_path / "run" / "config.json"), lambda path: read_run_json(path)),
        (_damaged(tmp_path / "run" / "metrics.json"), lambda path: read_run_json(path)),
        (_damaged(tmp_path / "put" / "config.json"), lambda path: store.put(path.parent)),
        (_damaged(store.root / "enc" / "rte" / "st-a" / "seed-1" / ENTRY_FILE), lambda path: store.entries()),
        (_damaged(tmp_path / "mt-a" / "encoder" / MARKER_FILE), lambda path: read_mt_a_marker(path.parent)),
        (_damaged(tmp_path / "fusion" / FUSION_ATTENTION_FILE), lambda path: load_fusion_activation(path.parent)),
    ]
    for path, read in readers:
        with pytest.raises(RunFileError, match=f"^{re.escape(str(path))} is not valid JSON"):
            read(path)
