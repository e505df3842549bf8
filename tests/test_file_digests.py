"""file_sha256: the sha256 of a file's bytes, read once per process while the file is unchanged, and again once it
was rewritten or replaced (the experiment runner compares the digests a run recorded with the files now)."""

from __future__ import annotations

import hashlib
import os

import pytest

from adapterfusion.file_digests import file_sha256, files_sha256


def test_a_file_is_read_once_until_it_changes(tmp_path, reads):
    path = tmp_path / "train.jsonl"
    path.write_bytes(b"first rows\n")
    assert file_sha256(path) == file_sha256(str(path)) == hashlib.sha256(b"first rows\n").hexdigest()
    assert reads == [str(path)]
    before = path.stat()
    path.write_bytes(b"other rows\n")  # edited a second later: other bytes at the same path, the same size
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
    assert file_sha256(path) == hashlib.sha256(b"other rows\n").hexdigest()
    replacement = tmp_path / "new.jsonl"
    replacement.write_bytes(b"third rows\n")
    stat = path.stat()
    os.utime(replacement, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # replaced by a file of the same size and mtime
    os.replace(replacement, path)
    assert file_sha256(path) == hashlib.sha256(b"third rows\n").hexdigest()
    assert reads == [str(path)] * 3


def test_files_sha256_names_each_file_by_its_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.csv").write_text("x\n1\n")
    assert files_sha256(["a.csv"]) == {str(tmp_path / "a.csv"): hashlib.sha256(b"x\n1\n").hexdigest()}
    with pytest.raises(FileNotFoundError):
        file_sha256(tmp_path / "gone.csv")


def test_an_encoder_folders_weight_files_are_its_weights_and_shards_not_a_trainers_other_files(tmp_path):
    from adapterfusion.encoder_identity import weight_file_digests

    names = [
        "model.safetensors",
        "model-00001-of-00002.safetensors",
        "pytorch_model-00001-of-00002.bin",
        "SmolLM2.Q4_1.gguf",
        "training_args.bin",
        "optimizer.bin",
        "tokenizer.json",
        "config.json",
    ]
    for name in names:
        (tmp_path / name).write_text(name)
    assert sorted(weight_file_digests(tmp_path)) == sorted(names[:4])
