"""Small checks shared by configs and the model so every message reads the same way."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import math
import numbers
import os
import re
import reprlib
from collections.abc import Callable, Iterable, Iterator, Mapping, MappingView, Set
from typing import Any, TypeVar, cast

import numpy as np
import torch
from torch import nn

from adapterfusion.errors import ConfigError, NameNotFoundError, PieceExistsError, SavedSettingError

_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_\-]+$")
FLOAT32_MAX = 3.4e38  # about torch.finfo(torch.float32).max: a setting beyond it is inf in a float32 model
# Adapter, fusion and head names become keys of an nn.ModuleDict, which refuses a key that is one of its attributes.
_MODULE_ATTRIBUTES = frozenset(dir(nn.ModuleDict()))
_Config = TypeVar("_Config")


def check_name(name: object, what: str) -> str:
    """Names become module keys and folder names, so they must be plain identifiers."""
    if not isinstance(name, str) or not _NAME_PATTERN.fullmatch(name):
        raise ConfigError(
            f"invalid {what} name {short_repr(name)}: use letters, digits, '_' or '-' only "
            "(it becomes a module key and a file name)"
        )
    return name


def check_piece_name(name: object, kind: str) -> str:
    """check_name for an adapter, fusion or head name, which also becomes a key of an nn.ModuleDict."""
    check_name(name, kind)
    if name in _MODULE_ATTRIBUTES:
        raise ConfigError(
            f"invalid {kind} name {short_repr(name)}: it is the name of an attribute of torch's nn.Module, which "
            f"cannot also name a sub-module; choose another name, e.g. '{name}_1'"
        )
    return str(name)


def require_loaded(
    kind: str, name: str, known: Iterable[str], elsewhere: Mapping[str, Iterable[str]] | None = None
) -> None:
    """Refuse a `kind` (adapter, fusion, head) named `name` that is not among the `known` (loaded) ones, saying
    where it is loaded as another kind (`elsewhere`: kind -> its loaded names), e.g. a fusion passed as an adapter."""
    known = list(known)
    check_one_name(name, kind)
    if name not in known:
        # adapters and fusions only: a head named like an adapter is AdapterHub's habit, not a mix-up of kinds
        mixed = {k: v for k, v in (elsewhere or {}).items() if "head" not in (k, kind)}
        other = next((other for other, names in mixed.items() if name in names), None)
        if other is not None:
            article = "an" if kind == "adapter" else "a"
            raise NameNotFoundError(
                f"{short_repr(name)} is a loaded {other}, not {article} {kind} (loaded {kind}s: {known or 'none'}); "
                f"name it as the {other} it is, e.g. activate({other}={name!r})"
            )
        raise NameNotFoundError(
            f"no {kind} named {short_repr(name)} is loaded; loaded {kind}s: {known or 'none'}. "
            f"Add it with add_{kind}() or load it with load_{kind}()"
        )


def check_one_name(name: object, kind: str) -> None:
    """Refuse anything but a string where one `kind` (adapter, fusion, head) name is expected, saying what it got."""
    if isinstance(name, str):
        return
    hint = ""
    if kind == "adapter" and isinstance(name, (list, tuple, set)):
        hint = "; to run several adapters together, add_fusion('f', [...]) them and activate(fusion='f')"
    raise ConfigError(f"expected one {kind} name (a string), got {type(name).__name__} {short_repr(name)}{hint}")


def check_names(value: object, field: str) -> list[str]:
    """Piece names given as one name, a list of names or None (none); else a ConfigError naming `field`."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(name, str) for name in value):
        return list(value)
    raise ConfigError(
        f"{field}={short_repr(value)} has type {type(value).__name__}; expected a name or a list of names"
    )


def check_mapping(value: object, field: str, example: str) -> dict:
    """A mapping given as a Mapping or None (empty), as a dict; else a ConfigError naming `field` with an
    `example` of what it takes."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{field}={short_repr(value)} has type {type(value).__name__}; expected a mapping, e.g. {example}"
        )
    return dict(value)


def check_ordered(value: object, field: str, paired: str, fix: str) -> None:
    """Refuse a set as `field` (e.g. "average_adapters: adapters"), whose entries are `paired` by position with
    something: a set's order follows string hashing, which changes from process to process (a dict's views keep
    its insertion order, and pass). `fix` says what to pass instead."""
    if isinstance(value, Set) and not isinstance(value, MappingView):
        raise ConfigError(
            f"{field}={short_repr(value)} is a {type(value).__name__}, whose order is not fixed, and its entries are "
            f"paired by position with {paired}, which would then change from run to run; {fix}"
        )


def plain_scalar(value: object) -> object:
    """`value` as the plain bool, int or float that JSON writes where it is another kind of real number or truth value
    (np.float32(2.0), np.bool_(True), a 0-d torch tensor, Fraction(1, 2)); anything else as it is, for the checks to
    judge."""
    if type(value) in (bool, int, float):
        return value
    if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.is_meta:
        value = value.item()
    elif isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return value


def plain_fields(config: Any) -> None:
    """Set every field of the frozen dataclass `config` to plain_scalar of itself (its __post_init__ calls this before
    its checks), so the config always serialises to JSON and equals one made from plain numbers."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        plain = plain_scalar(value)
        if plain is not value:
            object.__setattr__(config, field.name, plain)


def short_repr(value: object, limit: int = 80) -> str:
    """repr(value), cut to about `limit` characters for a message (an int of 400 digits, a long list). Never fails
    and never takes long: an int past Python's 4300-digit str limit (repr raises a ValueError that would replace the
    message) is described by its size, a container of thousands of items is shown through reprlib, and an object
    whose repr raises by its type."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > _REPR_BITS:
        sign = "-" if value < 0 else ""
        return f"{sign}<an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits>"
    try:
        long = isinstance(value, _CONTAINERS) and len(value) > _REPR_ITEMS
        text = _LONG_CONTAINERS.repr(value) if long else repr(value)
    except Exception:  # noqa: BLE001 - a user's object whose __repr__ fails: the message must still be made
        text = f"<a {type(value).__name__} object>"
        if isinstance(value, _CONTAINERS):  # one holding an int past the digit limit, or a failing item: item by item
            with contextlib.suppress(Exception):
                text = _LONG_CONTAINERS.repr(value)
    return text if len(text) <= limit else f"{text[: limit - 5]}...{text[-2:]}"


def past_digit_limit(error: ValueError) -> bool:
    """Whether `error` is Python's refusal to convert an integer of more than sys.get_int_max_str_digits() digits,
    which json and yaml raise as a plain ValueError (its advice, sys.set_int_max_str_digits(), is no user's fix)."""
    return "integer string conversion" in str(error)


_REPR_BITS = 4000 * 3  # below Python's 4300-digit limit on int <-> str conversion (10**4000 < 2**13288)
_REPR_ITEMS = 1000
_CONTAINERS = (list, tuple, set, frozenset, dict)


class _ContainerRepr(reprlib.Repr):
    """reprlib's short container repr, whose items never fail: an int past the digit limit by its size (reprlib
    itself shows an item whose repr raises by its type and address)."""

    def repr_int(self, x: int, level: int) -> str:
        return short_repr(x)


_LONG_CONTAINERS = _ContainerRepr()
_LONG_CONTAINERS.maxlist = _LONG_CONTAINERS.maxtuple = _LONG_CONTAINERS.maxset = _LONG_CONTAINERS.maxdict = 16


def is_finite_number(value: object) -> bool:
    """A real number (not a bool) that a float holds finitely: not NaN, not infinite, not an int beyond any float
    (10**400, which math.isfinite cannot even convert)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def blank_pair_text(text: str, pair: str) -> str | None:
    """What is wrong with a (text, pair) one side of which is blank (empty or whitespace alone), said after "a pair
    whose", or None: a tokenizer drops a blank second text without a word (the pair answered as its first text
    alone) and reads a blank first one as half an input."""
    if not pair.strip():
        shown = short_repr(pair, 20)
        return f"second text {shown} is blank, which the tokenizer drops without a word (the first answered alone)"
    if not text.strip():
        return f"first text {short_repr(text, 20)} is blank, leaving the model half an input"
    return None


def check_number(
    value: object,
    field: str,
    minimum: float | None = None,
    above: float | None = None,
    below: float | None = None,
    expected: str = "a number",
) -> float:
    """`value` as a float if it is a finite real number (not a bool) within the given bounds; else a ConfigError
    naming `field`, the value, its type where that is wrong, and what is `expected`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(f"{field}={short_repr(value)} has type {type(value).__name__}; expected {expected}")
    if not is_finite_number(value):
        raise ConfigError(f"{field}={short_repr(value)} is not a finite number; expected {expected}")
    number = float(value)
    if (
        (minimum is not None and number < minimum)
        or (above is not None and number <= above)
        or (below is not None and number >= below)
    ):
        raise ConfigError(f"{field}={short_repr(value)} must be {expected}")
    return number


def check_int(
    value: object, field: str, minimum: int | None = None, maximum: int | None = None, why_maximum: str = ""
) -> int:
    """`value` if it is an integer (not a bool, not a float such as 2.0) of at least `minimum` and at most `maximum`
    (`why_maximum` says why, e.g. " (a torch dimension)"); else a ConfigError naming `field`, the value, its type
    where that is wrong, and the range."""
    expected = "an integer" + (f" >= {minimum}" if minimum is not None else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(f"{field}={short_repr(value)} has type {type(value).__name__}; expected {expected}")
    number = int(value)
    if minimum is not None and number < minimum:
        raise ConfigError(f"{field}={short_repr(value)} must be {expected}")
    if maximum is not None and number > maximum:
        raise ConfigError(f"{field}={short_repr(value)} must be at most {maximum}{why_maximum}")
    return number


def check_has_values(tensors: Iterable[torch.Tensor], what: str, consequence: str) -> None:
    """Refuse tensors on the meta device (shapes, no values: `model.to('meta')`, `init_empty_weights`), where a
    save, a load or a forward would fail deep in torch or quietly keep nothing."""
    if any(tensor.is_meta for tensor in tensors):
        raise ConfigError(
            f"{what} on the meta device, which holds shapes but no values, so {consequence}; give the model real "
            "weights first (load it without device='meta' or init_empty_weights, or model.to_empty(device='cpu') "
            "and then load its weights)"
        )


def check_bool(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{field}={short_repr(value)} has type {type(value).__name__}; expected true or false")
    return value


def check_layers(values: object, field: str, num_layers: int | None = None) -> tuple[int, ...]:
    """Layer indices, sorted: a list (or other iterable, not a string) of distinct integers >= 0, and below
    `num_layers` if given."""
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise ConfigError(
            f"{field}={short_repr(values)} has type {type(values).__name__}; expected a list of layer indices"
        )
    values = list(values)
    top = f"0..{num_layers - 1}" if num_layers is not None else "integers >= 0"
    for value in values:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ConfigError(
                f"{field} entry {short_repr(value)} has type {type(value).__name__}; expected a layer index ({top})"
            )
    bad = [v for v in values if v < 0 or (num_layers is not None and v >= num_layers)]
    if bad:
        raise ConfigError(f"{field} {bad} are not layer indices ({top}" + (" of this encoder)" if num_layers else ")"))
    if len(set(values)) != len(values):
        raise ConfigError(f"{field}={short_repr(values)} lists a layer twice")
    return tuple(sorted(int(v) for v in values))


def check_choice(value: object, allowed: Iterable[object], field: str) -> None:
    allowed = tuple(allowed)
    if value not in allowed:
        raise ConfigError(f"{field}={short_repr(value)} is not allowed; choose one of {', '.join(map(repr, allowed))}")


def check_positive(value: object, field: str) -> float:
    return check_number(value, field, above=0, expected="a positive number")


def closest(value: str, known: Iterable[str]) -> str | None:
    """The known name `value` is most likely a misspelling of, or None when none is close."""
    matches = difflib.get_close_matches(value, list(known), n=1, cutoff=0.6)
    return matches[0] if matches else None


def preset_by_name(presets: Mapping[str, Callable[..., _Config]], name: object, kind: str, **overrides: Any) -> _Config:
    """The `kind` preset called `name` (any case), built with `overrides`; a name that is no preset (or no string)
    is refused naming the presets and the one it most likely misspells. The lookup is apart from the call, so that a
    KeyError inside a preset is not taken for an unknown name."""
    key = name.lower() if isinstance(name, str) else None
    if key is None or key not in presets:
        near = closest(key, presets) if key is not None else None
        raise ConfigError(
            f"unknown {kind} preset {short_repr(name)}; choose one of {', '.join(presets)}"
            + (f" (did you mean {short_repr(near)}?)" if near else "")
        )
    return presets[key](**overrides)


def reject_unknown_keys(data: Mapping[str, Any], known: Iterable[str], what: str) -> None:
    """Refuse the keys of `data` (a config dict, a preset's or a dataclass's keyword arguments) that are not `known`,
    with the known key each one most likely misspells."""
    known = sorted(known)
    unknown = sorted(set(data) - set(known), key=str)
    if not unknown:
        return
    close = {key: match for key in unknown if (match := closest(str(key), known)) is not None}
    if len(unknown) == 1 and close:
        hint = f" (did you mean {close[unknown[0]]!r}?)"
    else:
        hint = (
            f" (did you mean {', '.join(f'{short_repr(m)} for {short_repr(k)}' for k, m in close.items())}?)"
            if close
            else ""
        )
    raise ConfigError(f"unknown key(s) {unknown} in {what}{hint}; known keys are {known}")


def reject_unknown_fields(cls: type[_Config]) -> type[_Config]:
    """Dataclass `cls` (decorated above its @dataclass) whose constructor refuses a misspelt keyword with
    reject_unknown_keys' ConfigError, as its dict form and presets do, instead of the dataclass's bare TypeError
    ("unexpected keyword argument"). Everything else (positional arguments, defaults, repr, equality, the signature
    that mypy and help() read) is the dataclass's own."""
    init = cls.__init__
    known = frozenset(field.name for field in dataclasses.fields(cast(Any, cls)) if field.init)
    what = f"{cls.__name__}(...)"

    @functools.wraps(init)
    def checked_init(self: Any, *args: Any, **kwargs: Any) -> None:
        if not known.issuperset(kwargs):
            reject_unknown_keys(kwargs, known, what)
        init(self, *args, **kwargs)

    setattr(cls, "__init__", checked_init)  # noqa: B010 - mypy refuses assigning to a method
    return cls


def versioned_fields(data: object, cls: type, version: int, what: str) -> dict:
    """The keyword arguments of dataclass `cls` from a JSON object written with format_version `version`:
    a clear error for a non-object, another format version or an unknown key."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{what} must be a JSON object, got {type(data).__name__}")
    fields = dict(data)
    found = fields.pop("format_version", version)
    if found != version:
        raise ConfigError(f"{what} format_version {short_repr(found)} is not supported (expected {version})")
    reject_unknown_keys(fields, [f.name for f in dataclasses.fields(cls)], what)
    return fields


@contextlib.contextmanager
def naming_file(path: str | os.PathLike, key: str | None = None) -> Iterator[None]:
    """A ConfigError raised inside names `path` first: a bad value read from a file is fixed in that file. A plain
    ConfigError becomes a SavedSettingError (file name, `key`: the file's entry being read, reason) that a caller can
    inspect without reading the message. A name already loaded is about the model, not the file, and passes as it is,
    as does a SavedSettingError already naming its file; another subclass keeps its type and attributes (it may take
    more than a message), its message prefixed with `path`."""
    try:
        yield
    except (PieceExistsError, SavedSettingError):
        raise
    except ConfigError as error:
        if type(error) is ConfigError:
            raise SavedSettingError(path, str(error), key) from None
        error.args = (f"{path}: {error}",)
        raise error.with_traceback(None) from None


def require_wrapped(model: object, what: str) -> None:
    """ConfigError unless `model` is an AdaptedModel (what af.wrap returns): `what` needs its adapter sites."""
    if not callable(getattr(model, "install_piece", None)) or not hasattr(model, "fingerprint"):
        raise ConfigError(
            f"{what} takes a wrapped model (an AdaptedModel), got a {type(model).__name__}; wrap the encoder first: "
            "model = af.wrap(AutoModel.from_pretrained(...))"
        )
