"""Experiment and task files saved with a UTF-8 byte-order mark (Windows editors write one) read as without it; an
unreadable file is said in the library's words."""

from __future__ import annotations

import os

import pytest

import adapterfusion as af
from adapterfusion.io.documents import read_document


@pytest.mark.parametrize("name", ["x.json", "x.yaml"])
def test_a_byte_order_mark_is_no_part_of_the_document(tmp_path, name):
    path = tmp_path / name
    path.write_text('{"name": "j", "tasks": ["rte"]}', encoding="utf-8-sig")
    assert read_document(path) == {"name": "j", "tasks": ["rte"]}


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_document_is_a_library_error(tmp_path):
    path = tmp_path / "x.json"
    path.write_text("{}")
    path.chmod(0)
    with pytest.raises(af.ConfigError, match="cannot be read"):
        read_document(path)
