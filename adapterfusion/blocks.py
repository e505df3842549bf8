"""Composition blocks: values that say how several loaded adapters run together, as AdapterHub's blocks do.

    model.activate(af.Stack("lang", "task"), head="task")       # one adapter's output feeds the next
    model.activate(af.Average("a", "b", weights=[0.3, 0.7]))     # a weighted average of the adapters' outputs
    model.activate(af.BatchSplit("a", "b", batch_sizes=[2, 3]))  # rows 0-1 run a, rows 2-4 run b
    model.activate(af.Parallel("a", "b"))                        # the batch once per child: [a's rows, b's rows]
    model(**batch, adapter_names=["a", af.Stack("a", af.Fuse("b", "c")), None])   # per example

A block is a frozen value, never a saved piece: `save_pretrained` records no active block; activate it again after
loading. A child is a loaded adapter's or fusion's name, or a nested block where the nesting is supported:

    Stack:      adapters, fusions, Fuse, Average      Fuse:     adapter names (of one loaded fusion)
    Average:    adapters                              BatchSplit, Parallel: adapters, fusions, Fuse, Stack, Average
                                                      (BatchSplit also None: those rows run the plain model)

BatchSplit and Parallel lay out the batch, so they are only the outermost block and never an adapter_names entry.
What the blocks compute at a site is in injection/composed.py; `resolve` checks a block against a model and names
each leaf's kind, so a site runs it with no lookups.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, Union, cast

import torch

from adapterfusion._validation import check_bool, check_has_values, check_ordered, is_finite_number, short_repr
from adapterfusion.adapters.config import AdapterConfig
from adapterfusion.errors import ConfigError, NameNotFoundError

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel

ADAPTER, FUSION = "adapter", "fusion"  # the kinds of a resolved leaf, as injection/routing.py names them
Leaf = tuple[str, str]  # (ADAPTER or FUSION, name): a child after `resolve`
Child = Union[str, Leaf, "Block", None]
BlockT = TypeVar("BlockT", bound="Block")


class Block:
    """Base of the composition blocks; `children` holds the child blocks and names."""

    children: tuple[Any, ...]


def _init(block: Any, children: tuple[Any, ...], **fields: Any) -> None:
    """Set a frozen block's fields (its dataclass __init__ is replaced to take the children as *args)."""
    object.__setattr__(block, "children", tuple(children))
    for key, value in fields.items():
        object.__setattr__(block, key, value)
    _check_children(block)


@dataclass(frozen=True, init=False)
class Stack(Block):
    """Stack(a, b, ...): at each site a runs on the sub-layer's output, b on a's output, and so on; only the last
    child ends as the sub-layer does (LN(out + r) with its LayerNorm), as AdapterHub's Stack."""

    children: tuple[Any, ...]

    def __init__(self, *children: Child) -> None:
        _init(self, children)


@dataclass(frozen=True, init=False)
class Fuse(Block):
    """Fuse(a, b, ...): the loaded fusion over exactly these adapters, in this order (name=...: that fusion). Alone
    it is the fusion; its use is inside a Stack, e.g. Stack("lang", Fuse("a", "b"))."""

    children: tuple[Any, ...]
    name: str | None = None

    def __init__(self, *adapters: str, name: str | None = None) -> None:
        if name is not None and not isinstance(name, str):
            raise ConfigError(f"Fuse(name={name!r}) has type {type(name).__name__}; pass a loaded fusion's name")
        _init(self, adapters, name=name)


@dataclass(frozen=True, init=False)
class Average(Block):
    """Average(a, b, weights=[w_a, w_b]): at each site sum_i w_i * adapter_i(x, residual), x and the residual placed
    as for the first adapter, ended as the last; weights default to equal and are scaled to sum to 1 unless
    normalize_weights=False. (AdapterHub's Average also divides by the number of adapters: docs/adapterhub.md.)"""

    children: tuple[Any, ...]
    weights: tuple[float, ...] = ()

    def __init__(
        self, *adapters: Child, weights: Sequence[float] | None = None, normalize_weights: bool = True
    ) -> None:
        _init(self, adapters, weights=_average_weights(len(adapters), weights, normalize_weights))


@dataclass(frozen=True, init=False)
class BatchSplit(Block):
    """BatchSplit(a, b, batch_sizes=[2, 3]): the first 2 rows of a batch run a, the next 3 run b (one int: that
    many rows each). The sizes must add up to the batch. Runs through per-example routing (routing.py)."""

    children: tuple[Any, ...]
    batch_sizes: tuple[int, ...] = ()

    def __init__(self, *children: Child, batch_sizes: Sequence[int] | int) -> None:
        sizes = [batch_sizes] * len(children) if isinstance(batch_sizes, int) else batch_sizes
        if (
            isinstance(sizes, (str, bytes))
            or not isinstance(sizes, Sequence)
            or any(isinstance(size, bool) or not isinstance(size, int) or size < 0 for size in sizes)
        ):
            raise ConfigError(
                f"BatchSplit(batch_sizes={batch_sizes!r}): give one row count (an int >= 0) per child, e.g. "
                "batch_sizes=[2, 3], or one int for all"
            )
        if len(sizes) != len(children):
            raise ConfigError(
                f"BatchSplit has {len(children)} children but batch_sizes={list(sizes)} has {len(sizes)} entries; "
                "give one row count per child"
            )
        _init(self, children, batch_sizes=tuple(sizes))

    def entries(self, examples: int) -> list[Any]:
        """One child per example (the routing.py adapter_names of a batch of `examples`)."""
        if sum(self.batch_sizes) != examples:
            raise ConfigError(
                f"BatchSplit(batch_sizes={list(self.batch_sizes)}) covers {sum(self.batch_sizes)} rows, but the "
                f"batch has {examples} examples; make the sizes add up to the batch"
            )
        return [child for child, size in zip(self.children, self.batch_sizes, strict=True) for _ in range(size)]


@dataclass(frozen=True, init=False)
class Parallel(Block):
    """Parallel(a, b, ...): the batch runs once per child in one forward, laid out as AdapterHub does: rows
    [i*B, (i+1)*B) of the output are child i on the B examples (forward_parallel, for a fusion and each of its
    adapters with their own heads, shares the encoder below the fusion too)."""

    children: tuple[Any, ...]

    def __init__(self, *children: Child) -> None:
        _init(self, children)


LAYOUT_BLOCKS = (BatchSplit, Parallel)  # they change which rows run what; everything else runs per row
# What each block may hold (besides names); None only where a child may be the plain model.
_NESTED: dict[type, tuple[type, ...]] = {
    Stack: (Fuse, Average),
    Fuse: (),
    Average: (),
    BatchSplit: (Stack, Fuse, Average),
    Parallel: (Stack, Fuse, Average),
}


class BlockNestingError(ConfigError):
    """A block holding a block it cannot hold. `json_message` says the same in the server's JSON terms
    ({"stack": [...]}, ...), where the message's Python constructors would mean nothing to an HTTP client."""

    def __init__(self, message: str, json_message: str) -> None:
        super().__init__(message)
        self.json_message = json_message


# Why a block cannot hold another, and what to write instead: (Python, JSON), by the outer block's kind.
_NESTING_HINTS: dict[type, tuple[str, str]] = {
    Fuse: (
        "to feed one adapter's output to a fusion, write Stack('base', Fuse('a', 'b'))",
        'to feed one adapter\'s output to a fusion, send {"stack": ["base", {"fuse": ["a", "b"]}]}',
    ),
    Average: (
        "an Average mixes adapters' outputs: list the adapters themselves, or put the Average in a Stack",
        "an average mixes adapters' outputs: list the adapters themselves, or put the average in a stack",
    ),
    Stack: (
        "a Stack inside a Stack is one Stack: Stack('a', Stack('b', 'c')) is Stack('a', 'b', 'c')",
        'a stack inside a stack is one stack: list its children in the outer one, {"stack": ["a", "b", "c"]}',
    ),
}
_LAYOUT_HINT = "BatchSplit and Parallel lay out the whole batch, so they are only the outermost block"


def _nesting_error(block: Block, child: Block, index: int) -> BlockNestingError:
    kind, inner = type(block).__name__, type(child).__name__
    allowed = _NESTED[type(block)]
    python_hint, json_hint = (
        (_LAYOUT_HINT, _LAYOUT_HINT)
        if isinstance(child, LAYOUT_BLOCKS)
        else _NESTING_HINTS.get(type(block), (_LAYOUT_HINT, _LAYOUT_HINT))
    )
    takes = _listed(["names", *(t.__name__ for t in allowed)]) if allowed else "names only"
    json_takes = _listed(["names", *(f"{t.__name__.lower()} blocks" for t in allowed)]) if allowed else "names only"
    outer, json_inner = kind.lower(), inner.lower()
    return BlockNestingError(
        f"{kind} cannot hold {inner} (child {index}); {_article(kind)} {kind} takes {takes}; {python_hint}",
        f"{_article(outer)} {outer} block cannot hold {_article(json_inner)} {json_inner} block (child {index}); it "
        f"takes {json_takes}; {json_hint}",
    )


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def _check_children(block: Block) -> None:
    kind = type(block).__name__
    if not block.children and not (isinstance(block, Fuse) and block.name is not None):
        raise ConfigError(f"{kind}() has no children; name the adapters it composes, e.g. {kind}('a', 'b')")
    for index, child in enumerate(block.children):
        if child is None and isinstance(block, BatchSplit):
            continue
        if isinstance(child, str) or _is_leaf(child):
            if isinstance(block, (Fuse, Average)) and _is_leaf(child) and child[0] != ADAPTER:
                raise ConfigError(f"{kind} takes adapters only; child {index} is {child!r}")
            continue
        if isinstance(child, Block):
            if not isinstance(child, _NESTED[type(block)]):
                raise _nesting_error(block, child, index)
            continue
        raise ConfigError(
            f"{kind} child {index} = {child!r} has type {type(child).__name__}; a child is a loaded adapter's or "
            "fusion's name or a composition block (af.Stack, af.Fuse, af.Average)"
        )


def _is_leaf(value: Any) -> bool:
    return isinstance(value, tuple) and len(value) == 2 and value[0] in (ADAPTER, FUSION) and isinstance(value[1], str)


# The largest weight an Average or average_adapters takes once scaled: beyond it the adapters' outputs (or weights)
# are blown up, not averaged, which happens when normalised weights nearly cancel (weights=[1, -0.999999]).
MAX_AVERAGE_WEIGHT = 1e6


def _average_weights(
    count: int, weights: Sequence[float] | None, normalize: bool, caller: str = "Average"
) -> tuple[float, ...]:
    """The weights an Average (or average_adapters, `caller`) applies: equal by default, else checked, and scaled to
    sum to 1 with normalize (divided by their largest magnitude first, so huge finite weights cannot overflow the
    sum)."""
    check_bool(normalize, "normalize_weights")
    if not count:  # no adapters: the caller's own error says so (Average(): 'has no children')
        return ()
    if weights is None:
        return tuple(1.0 / count for _ in range(count))
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        raise ConfigError(
            f"{caller}(weights={short_repr(weights)}): give one number per adapter, e.g. weights=[0.3, 0.7]"
        )
    values = list(weights)
    shown = short_repr(values)
    if len(values) != count or not all(is_finite_number(w) for w in values):
        raise ConfigError(
            f"{caller}(weights={shown}) for {count} adapters: give one finite number per adapter, e.g. "
            f"weights={[round(1 / max(count, 1), 3)] * count}"
        )
    scaled = [float(w) for w in values]
    if normalize:
        largest = max(abs(w) for w in scaled)
        total = math.fsum(w / largest for w in scaled) if largest else 0.0
        if total == 0:
            raise ConfigError(f"{caller}(weights={shown}) sum to 0, so they cannot be scaled to sum to 1")
        scaled = [w / largest / total for w in scaled]
    if max(abs(w) for w in scaled) > MAX_AVERAGE_WEIGHT:
        raise ConfigError(
            f"{caller}(weights={shown}) would weight an adapter by {max(scaled, key=abs):.3g}"
            + (" once scaled to sum to 1 (they nearly cancel)" if normalize else "")
            + f"; each weight must stay within ±{MAX_AVERAGE_WEIGHT:g}: give weights that do not cancel"
            + (" or normalize_weights=False" if normalize else "")
        )
    return tuple(scaled)


# ---- checking a block against a model -----------------------------------------------------------------------------
def resolve(model: AdaptedModel, block: Block, *, layout: bool = True) -> Block:
    """`block` with every leaf checked against what `model` has loaded and written as (kind, name), every Fuse naming
    its fusion; NameNotFoundError / ConfigError otherwise. layout=False: refuse BatchSplit and Parallel (a per-example
    choice)."""
    if not isinstance(block, Block):
        raise ConfigError(f"{block!r} is not a composition block (af.Stack, af.Fuse, af.Average, ...)")
    if not layout and isinstance(block, LAYOUT_BLOCKS):
        raise ConfigError(
            f"{type(block).__name__} lays out the whole batch, so it cannot be one example's choice in adapter_names; "
            f"activate it for the whole batch (model.activate(af.{type(block).__name__}(...))) or give each example "
            "its own entry"
        )
    if isinstance(block, Fuse):
        return _resolve_fuse(model, block)
    children = tuple(_resolve_child(model, block, child) for child in block.children)
    if isinstance(block, Average):
        _check_one_placement(model, [child[1] for child in children])
    return _rebuilt(block, children)


# What the adapters of an Average must share: it places x and the residual once, as for its first adapter, at the
# sites they all hold, so any difference here would silently give every adapter the first one's placement.
AVERAGE_SHARED_OPTIONS = ("positions", "leave_out", "original_ln_before", "original_ln_after", "residual_before_ln")


def _check_one_placement(model: AdaptedModel, names: Sequence[str]) -> None:
    """Refuse an Average over adapters placed differently, naming the first option they differ in."""
    first = model.adapter_configs[names[0]]
    for name in names[1:]:
        config = model.adapter_configs[name]
        for option in AVERAGE_SHARED_OPTIONS:
            if getattr(config, option) != getattr(first, option):
                raise ConfigError(
                    f"Average{tuple(names)}: adapter {name!r} has {option}={getattr(config, option)!r} but "
                    f"{names[0]!r} has {option}={getattr(first, option)!r}; an Average runs its adapters on one "
                    f"placed input, so average adapters that agree on {', '.join(AVERAGE_SHARED_OPTIONS)}"
                )
    copies = {name: holds_layer_norm_copy(model, name) for name in names}
    if len(set(copies.values())) > 1:
        own, shared = ([name for name, held in copies.items() if held is kept] for kept in (True, False))
        raise ConfigError(
            f"Average{tuple(names)}: adapters {own} hold their own LayerNorm copies (train_layer_norm=True) and "
            f"{shared} use the encoder's; an Average places its input with the first adapter's LayerNorm and ends "
            "with the last one's, so the others' would be silently replaced: average adapters that agree on "
            "train_layer_norm"
        )


def holds_layer_norm_copy(model: AdaptedModel, name: str) -> bool:
    """Whether adapter `name` places and ends with its own LayerNorm copy somewhere (train_layer_norm=True at a site
    with a LayerNorm to copy; a pre-norm decoder's sites have none): an Average's adapters must agree on it, which
    the server's Catalog records too."""
    return any(site.adapter(name).layer_norm is not None for site in model.sites_with_adapter(name))


def _rebuilt(block: BlockT, children: tuple[Any, ...], **fields: Any) -> BlockT:
    """A copy of `block` with other children (and fields), past the public constructors' checks of names."""
    new = object.__new__(type(block))
    for field in dataclasses.fields(cast(Any, block)):
        object.__setattr__(new, field.name, fields.get(field.name, getattr(block, field.name)))
    object.__setattr__(new, "children", children)
    return new


def _resolve_child(model: AdaptedModel, parent: Block, child: Any) -> Any:
    if child is None:
        return None
    if isinstance(child, Block):
        return resolve(model, child, layout=False)
    kind, name = child if _is_leaf(child) else (None, child)
    is_adapter, is_fusion = name in model.adapter_configs, name in model.fusion_setups
    if kind is None and is_adapter and is_fusion:
        raise ConfigError(
            f"{type(parent).__name__} child {name!r} names both an adapter and a fusion; say which with "
            f"('adapter', {name!r}) or af.Fuse(name={name!r})"
        )
    if kind == ADAPTER or (kind is None and is_adapter):
        if not is_adapter:
            raise NameNotFoundError(f"no adapter named {name!r} is loaded; loaded adapters: {model.adapter_names}")
        return (ADAPTER, name)
    if isinstance(parent, Average):
        raise ConfigError(
            f"Average takes adapters only, and {name!r} is "
            f"{'a fusion' if is_fusion else 'not a loaded adapter'} (loaded adapters: {model.adapter_names or 'none'})"
            "; average a fusion's adapters instead, or put the fusion in a Stack"
        )
    if kind == FUSION or is_fusion:
        if not is_fusion:
            raise NameNotFoundError(f"no fusion named {name!r} is loaded; loaded fusions: {model.fusion_names}")
        return _resolve_fuse(model, Fuse(*model.fusion_setup(name).adapters, name=name))
    raise NameNotFoundError(
        f"{type(parent).__name__} child {name!r} is neither a loaded adapter ({model.adapter_names or 'none'}) nor a "
        f"loaded fusion ({model.fusion_names or 'none'}); load it first"
    )


def matching_fusions(adapters: tuple[str, ...], fusions: Mapping[str, tuple[str, ...]]) -> list[str]:
    """The fusions (name -> fused adapters) that a Fuse of `adapters` without a name means: those fusing exactly
    these adapters in this order. The model resolves blocks by it, and the server checks requests by it."""
    return [name for name, fused in fusions.items() if fused == adapters]


def _resolve_fuse(model: AdaptedModel, fuse: Fuse) -> Fuse:
    adapters = tuple(child[1] if _is_leaf(child) else child for child in fuse.children)
    if fuse.name is not None:
        model.require("fusion", fuse.name)
        fused = model.fusion_setup(fuse.name).adapters
        if adapters and adapters != fused:
            raise ConfigError(
                f"Fuse{adapters} names fusion {fuse.name!r}, which fuses {list(fused)}; list those adapters in that "
                "order, or give only name="
            )
        return _rebuilt(fuse, tuple((ADAPTER, a) for a in fused))
    matches = matching_fusions(adapters, {name: setup.adapters for name, setup in model.fusion_setups.items()})
    if len(matches) != 1:
        loaded = {name: list(setup.adapters) for name, setup in model.fusion_setups.items()}
        problem = "no loaded fusion fuses" if not matches else f"fusions {matches} all fuse"
        raise (NameNotFoundError if not matches else ConfigError)(
            f"Fuse{adapters}: {problem} exactly these adapters in this order (loaded fusions: {loaded or 'none'}); "
            "add one with model.add_fusion(name, adapters), or say which with Fuse(..., name=...)"
        )
    return _rebuilt(fuse, tuple((ADAPTER, a) for a in adapters), name=matches[0])


def fusions_in(block: Block | None) -> tuple[str, ...]:
    """The fusions a resolved block runs (its Fuse children's, at any depth, and fusions named as leaves), in order:
    those whose V regulariser belongs in the loss of a call that runs the block."""
    if block is None:
        return ()
    found: list[str] = [block.name] if isinstance(block, Fuse) and block.name is not None else []
    for child in block.children:
        if isinstance(child, Block):
            found += fusions_in(child)
        elif _is_leaf(child) and child[0] == FUSION:
            found.append(child[1])
    return tuple(dict.fromkeys(found))


def is_loaded(block: Block, adapters: Collection[str], fusions: Collection[str]) -> bool:
    """Whether every adapter and fusion a resolved block names is among the loaded `adapters` and `fusions`."""
    for child in block.children:
        if isinstance(child, Block) and not is_loaded(child, adapters, fusions):
            return False
        if _is_leaf(child) and child[1] not in (adapters if child[0] == ADAPTER else fusions):
            return False
    return not isinstance(block, Fuse) or block.name in fusions


# ---- weight-space averaging -------------------------------------------------------------------------------------
def average_adapters(
    model: AdaptedModel,
    name: str,
    adapters: Sequence[str] | Mapping[str, float],
    weights: Sequence[float] | None = None,
    normalize_weights: bool = True,
    overwrite: bool = False,
) -> AdapterConfig:
    """Add adapter `name` whose every weight is sum_i w_i * (that weight of adapters[i]): AdapterSoup's and
    AdapterHub's `average_adapter` (linear). `adapters` a list (weights default to equal) or {name: weight}; the
    weights are scaled to sum to 1 unless normalize_weights=False. The adapters must share one config (its init
    options aside), else ConfigError. Returns the new adapter's config (as add_adapter does); it is not activated.

    Adapters cast by hand to other dtypes or devices mix: the sum runs in float64 on the CPU, and the new adapter is
    cast once to the dtype and device add_adapter gives it (the encoder's, which the forward needs), so a bfloat16
    adapter's products are not rounded to bfloat16. An adapter with no values (meta) or with NaN/inf weights, or an
    average beyond the encoder's dtype, is refused before the model changes."""
    check_bool(overwrite, "average_adapters(overwrite)")
    if isinstance(adapters, Mapping):
        if weights is not None:
            raise ConfigError("average_adapters: give weights either in the {adapter: weight} mapping or as weights=")
        names, weights = list(adapters), list(adapters.values())
    elif isinstance(adapters, (str, bytes)) or not isinstance(adapters, Iterable):
        raise ConfigError(f"average_adapters(adapters={adapters!r}): pass a list of loaded adapters' names")
    else:
        check_ordered(
            adapters,
            "average_adapters: adapters",
            "the weights (and the first adapter gives the new one its config)",
            "pass a list, e.g. adapters=['a', 'b'] with weights=[0.3, 0.7], or a mapping {'a': 0.3, 'b': 0.7}",
        )
        names = list(adapters)
    if not names:
        raise ConfigError("average_adapters: name at least one loaded adapter to average")
    if name in names:
        raise ConfigError(
            f"average_adapters: the new adapter {name!r} is one of the adapters it averages; give it another name"
        )
    for adapter in names:
        model.require("adapter", adapter)
    scale = _average_weights(len(names), weights, normalize_weights, "average_adapters")
    configs = [model.adapter_configs[adapter] for adapter in names]
    plain = [dataclasses.replace(config, init="houlsby", init_std=1e-2) for config in configs]
    for adapter, config, compared in zip(names[1:], configs[1:], plain[1:], strict=True):
        if compared != plain[0]:
            option = next(
                f.name for f in dataclasses.fields(compared) if getattr(compared, f.name) != getattr(plain[0], f.name)
            )
            value, first = getattr(config, option), getattr(configs[0], option)
            raise ConfigError(
                f"average_adapters: adapter {adapter!r} has {option}={value!r} but {names[0]!r} has "
                f"{option}={first!r}; only adapters of one config (size, placement, non-linearity, leave_out) can be "
                "averaged weight by weight"
            )
    averaged = _averaged_weights(model, names, scale)
    model.add_adapter(name, configs[0], overwrite=overwrite)
    with torch.no_grad():
        for site in model.sites_with_adapter(name):
            site.adapter(name).load_state_dict(averaged[site.key])  # copied into its own dtype and device
    return configs[0]


def _averaged_weights(
    model: AdaptedModel, names: Sequence[str], scale: Sequence[float]
) -> dict[str, dict[str, torch.Tensor]]:
    """{site key: {parameter: sum_i scale_i * adapter i's}}, summed in float64 on the CPU in the order of `names`,
    after checking that every adapter holds finite values and that the sum fits the encoder's dtype."""
    dtype = model.dtype
    averaged: dict[str, dict[str, torch.Tensor]] = {}
    for site in model.sites_with_adapter(names[0]):
        sources = [(adapter, site.adapter(adapter).state_dict()) for adapter in names]
        for adapter, state in sources:
            check_has_values(state.values(), f"average_adapters: adapter {adapter!r} is", "there is nothing to average")
        averaged[site.key] = {}
        for key in sources[0][1]:
            total = torch.zeros(sources[0][1][key].shape, dtype=torch.float64)
            for w, (adapter, state) in zip(scale, sources, strict=True):
                value = state[key].detach().to(device="cpu", dtype=torch.float64)
                bad = int((~torch.isfinite(value)).sum())
                if bad:
                    raise ConfigError(
                        f"average_adapters: adapter {adapter!r} holds {bad} NaN or infinite value(s) in {key} at "
                        f"{site.key}, which would make the average NaN there; reload or retrain it, or leave it out"
                    )
                total += w * value
            if not bool(torch.isfinite(total.to(dtype)).all()):
                raise ConfigError(
                    f"average_adapters: the average of {list(names)} with weights {list(scale)} overflows the "
                    f"encoder's {str(dtype).removeprefix('torch.')} in {key} at {site.key} (up to "
                    f"{float(total.abs().max()):.3g}); give smaller weights, or cast the model to float32 or float64"
                )
            averaged[site.key][key] = total
    return averaged
