"""Strict JSON/YAML reading: a key given twice in one mapping is refused with its line, everything else parses as
json.loads / yaml.safe_load would."""

import json

import pytest
import yaml

from adapterfusion.errors import ConfigError, SerializationError
from adapterfusion.io.documents import read_bytes, read_document, read_json

DOCUMENT = {
    "name": "x",
    "setups": [{"name": "st-a", "lr": 1e-4}, {"name": "head", "lr": 1e-3}],
    "nested": {"a": {"name": 1}, "b": {"name": 2}},
    "empty": {},
    "text": "caf\u00e9 \u2713",
}


@pytest.mark.parametrize(
    "suffix, dump",
    [(".json", lambda d: json.dumps(d, indent=1)), (".yaml", lambda d: yaml.safe_dump(d, allow_unicode=True))],
)
def test_a_document_without_repeated_keys_reads_as_the_plain_parsers_read_it(tmp_path, suffix, dump):
    path = tmp_path / f"doc{suffix}"
    path.write_text(dump(DOCUMENT), encoding="utf-8")
    assert read_document(path) == DOCUMENT  # the same key in different mappings is fine


@pytest.mark.parametrize(
    "name, text, where, first",
    [
        ("a.yaml", "a: 1\nb:\n  c: 2\n  c: 3\n", "line 4, column 3", "line 3, column 3"),
        ("a.yml", "a: 1\na: 2\n", "line 2, column 1", "line 1, column 1"),
        ("a.json", '{"a": 1,\n "b": {"c": 2,\n  "c": 3}}', "line 3, column 3", "line 2, column 8"),
        ("a.json", '[{"a": 1}, {"a": 2, "a": 3}]', "line 1, column 21", "line 1, column 13"),
    ],
)
def test_a_repeated_key_is_refused_naming_the_key_and_both_places(tmp_path, name, text, where, first):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        read_document(path)
    assert str(caught.value).startswith(f"{path}, {where}: key ")
    assert f"given twice in one mapping (first at {first})" in str(caught.value)


def test_yaml_merge_keys_may_be_overridden(tmp_path):
    path = tmp_path / "merge.yaml"
    path.write_text("base: &b {lr: 1, bs: 8}\nrun:\n  <<: *b\n  lr: 2\n", encoding="utf-8")
    assert read_document(path) == {"base": {"lr": 1, "bs": 8}, "run": {"lr": 2, "bs": 8}}


def test_the_error_type_is_the_callers(tmp_path):
    class SpecError(ConfigError):
        pass

    path = tmp_path / "a.yaml"
    path.write_bytes(b"a: 1\nb: \xff\n")
    with pytest.raises(SpecError, match=r"a.yaml is not UTF-8 text: byte 0xff at line 2, column 4"):
        read_document(path, SpecError)


def test_a_path_with_a_nul_character_is_our_error_naming_it(tmp_path):
    """The OS opens no path with a NUL in it: read_bytes (under read_json, and so load_adapterhub) let Python's
    ValueError 'embedded null byte' through."""
    for read in (read_bytes, read_json):
        with pytest.raises(SerializationError, match=r"'.*x00b' is no path the OS can open \(it holds a NUL"):
            read(f"{tmp_path}/a\0b")
    with pytest.raises(ConfigError, match="NUL character.*; load another"):
        read_bytes(f"{tmp_path}/a\0b", "load another", ConfigError)


@pytest.mark.parametrize("name, text", [("deep.json", "[" * 5000 + "]" * 5000), ("deep.yaml", "[" * 5000)])
def test_nesting_too_deep_to_parse_is_the_callers_error(tmp_path, name, text):
    """Both parsers recurse once per level: 5000 brackets were a raw RecursionError (for task files too, which the
    experiment reader's own check did not cover)."""
    from adapterfusion.tasks.errors import TaskError

    (tmp_path / name).write_text(text)
    with pytest.raises(TaskError, match=rf"{name} nests its lists or mappings too deeply to be read"):
        read_document(tmp_path / name, TaskError)


def test_aliases_expanding_past_the_value_limit_are_refused_and_small_ones_read(tmp_path):
    """A 600-byte YAML file whose aliases stand for 10**9 values took hours to walk (a billion laughs)."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    (tmp_path / "bomb.yaml").write_text("\n".join(lines))
    with pytest.raises(ConfigError, match="stands for more than 100,000 values once its YAML aliases"):
        read_document(tmp_path / "bomb.yaml")
    (tmp_path / "small.yaml").write_text("base: &b {lr: 1}\none: *b\ntwo: *b\n")
    assert read_document(tmp_path / "small.yaml") == {"base": {"lr": 1}, "one": {"lr": 1}, "two": {"lr": 1}}


@pytest.mark.parametrize("name", ["big.json", "big.yaml"])
def test_an_integer_past_pythons_digit_limit_is_the_callers_error(tmp_path, name):
    """Both parsers convert with int(), which refuses more than 4300 digits: a raw ValueError naming
    sys.set_int_max_str_digits()."""
    (tmp_path / name).write_text('{"epochs": ' + "9" * 5000 + "}" if name.endswith("json") else "epochs: " + "9" * 5000)
    with pytest.raises(ConfigError, match=rf"{name} holds an integer of more than 4300 digits"):
        read_document(tmp_path / name)
