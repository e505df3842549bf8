"""A request's composition block ('block': {"stack": [...]}, {"average": [...], "weights": [...]}, {"fuse": [...]})
read into the block it names (blocks.py), its names checked loaded and its options checked here in the request's JSON
terms, so that nothing blocks.py would refuse at forward time reaches the batch the request shares."""

from __future__ import annotations

import json
import math
from typing import Any, cast

from adapterfusion.blocks import Average, Block, BlockNestingError, Fuse, Stack, matching_fusions
from adapterfusion.errors import ConfigError
from adapterfusion.serving.catalog import PLACEMENT_FIELDS, Catalog
from adapterfusion.serving.request_errors import RequestError, as_json, as_shown, is_json_number, require_loaded

# A BLOCK's JSON: its kind's key -> the block, and how deep and large one may be.
_BLOCKS = {"stack": Stack, "average": Average, "fuse": Fuse}
_BLOCK_OPTIONS = {"stack": (), "average": ("weights",), "fuse": ("name",)}
MAX_BLOCK_DEPTH, MAX_BLOCK_CHILDREN = 4, 64
# Adapters one block may run at each site (a stack of 64 averages of 64 adapters ran 4,096 and held the model's
# thread for minutes), or as many as the largest loaded fusion fuses, a cost the server took on by loading it.
MAX_BLOCK_ADAPTER_RUNS = 16


def parse_request_block(value: Any, catalog: Catalog) -> Block:
    """The request's 'block' as the block it names, within the server's limit of adapters run at each site."""
    block = parse_block(value, catalog, "block", 1)
    runs, limit = adapter_runs(block, catalog), max([MAX_BLOCK_ADAPTER_RUNS, *map(len, catalog.fusions.values())])
    if runs > limit:
        raise RequestError(
            413,
            f"'block' runs {runs} adapters at each site, over this server's limit of {limit} (each costs about "
            "what the model's own layers do); send a smaller block, or one request per choice",
        )
    return block


def adapter_runs(block: Any, catalog: Catalog) -> int:
    """How many adapters `block` (or a name in it) runs at each site: a fusion runs each adapter it fuses."""
    if isinstance(block, str):
        return len(catalog.fusions.get(block, ())) or 1
    if isinstance(block, Fuse):
        return len(block.children)
    return sum(adapter_runs(child, catalog) for child in block.children)


def parse_block(value: Any, catalog: Catalog, where: str, depth: int) -> Block:
    """A BLOCK's JSON (module docstring) as the block it names, its names checked loaded (422/404 naming where)."""
    form = '{"stack": [...]}, {"average": [...], "weights": [...]} or {"fuse": [...]}'
    kinds = [key for key in _BLOCKS if isinstance(value, dict) and key in value]
    if len(kinds) != 1:
        raise RequestError(422, f"'{where}' is {as_json(value)}; a block is one of {form}")
    kind = kinds[0]
    extra = sorted(set(value) - {kind, *_BLOCK_OPTIONS[kind]})
    if extra:
        takes = " and ".join(f"'{field}'" for field in (kind, *_BLOCK_OPTIONS[kind]))
        raise RequestError(
            422, f"'{where}' has unknown field(s) {as_shown(extra)}; a {kind} block has the fields {takes} only"
        )
    children = value[kind]
    if not isinstance(children, list) or not 1 <= len(children) <= MAX_BLOCK_CHILDREN:
        raise RequestError(422, f"'{where}.{kind}' must list 1 to {MAX_BLOCK_CHILDREN} children: names or blocks")
    if depth > MAX_BLOCK_DEPTH and any(isinstance(child, dict) for child in children):
        raise RequestError(413, f"'{where}' nests blocks more than {MAX_BLOCK_DEPTH} deep")
    parsed: list[Any] = []
    for index, child in enumerate(children):
        if isinstance(child, dict):
            parsed.append(parse_block(child, catalog, f"{where}.{kind}[{index}]", depth + 1))
        elif isinstance(child, str):
            if child not in catalog.adapters and child not in catalog.fusions:
                loaded = [*catalog.adapters, *catalog.fusions]
                raise RequestError(
                    404, f"'{where}.{kind}[{index}]' = {as_shown(child)} is no loaded adapter or fusion ({loaded})"
                )
            parsed.append(child)
        else:
            raise RequestError(422, f"'{where}.{kind}[{index}]' is {as_json(child)}; a child is a name or a block")
    options = {key: value[key] for key in _BLOCK_OPTIONS[kind] if key in value}
    if kind == "fuse" and all(isinstance(child, str) for child in parsed):
        # the fusion matched now is the one that runs, whatever is loaded before the request's forward
        options["name"] = _check_fuse(tuple(parsed), options.get("name"), catalog, where)
    if kind == "average":
        _check_average(parsed, catalog, where)
        _check_weights(options.get("weights"), len(parsed), where)
    try:
        return cast(Block, _BLOCKS[kind](*parsed, **options))
    except BlockNestingError as error:  # in the request's JSON terms, not the Python constructors'
        raise RequestError(422, f"'{where}': {error.json_message}") from None
    except (ConfigError, TypeError, ValueError) as error:  # the block's own checks: weights, names
        raise RequestError(422, f"'{where}': {error}") from None


def _check_average(children: list[Any], catalog: Catalog, where: str) -> None:
    """An average block's named children must be adapters placed alike (blocks.py refuses the rest at forward time,
    failing the whole batch the request joined): refused here, in the request's fields."""
    named = [(index, child) for index, child in enumerate(children) if isinstance(child, str)]
    for index, child in named:
        if child not in catalog.adapters:
            raise RequestError(
                422, f"'{where}.average[{index}]' = {child!r} is a fusion; an average block takes adapters only"
            )
    if not named:
        return
    first_index, first = named[0]
    for index, child in named[1:]:
        for option, mine, theirs in zip(
            PLACEMENT_FIELDS, catalog.placements.get(child, ()), catalog.placements.get(first, ()), strict=False
        ):
            if mine != theirs:
                raise RequestError(
                    422,
                    f"'{where}.average[{index}]' = {child!r} is placed otherwise than '{where}.average[{first_index}]' "
                    f"= {first!r} ({option}: {_json_value(mine)} against {_json_value(theirs)}); an average block "
                    "takes adapters placed alike",
                )


def _check_weights(weights: Any, count: int, where: str) -> None:
    """An average block's 'weights', if given, must be a JSON list of one number per adapter, refused here in JSON's
    terms ('weights[0]' is true) where blocks.py would refuse it in Python's (Average(weights=[True, 1])); blocks.py
    checks what the numbers may be (a sum of 0)."""
    if weights is None:
        return
    example = f"e.g. {[round(1 / count, 3)] * count}, or leave it out for equal weights"
    if not isinstance(weights, list):
        raise RequestError(
            422, f"'{where}.weights' is {as_json(weights)}; give a list of one number per adapter, {example}"
        )
    if len(weights) != count:
        raise RequestError(
            422,
            f"'{where}.weights' lists {len(weights)} weight(s) for {count} adapters; give one per adapter, {example}",
        )
    for index, weight in enumerate(weights):
        if not is_json_number(weight):
            raise RequestError(422, f"'{where}.weights[{index}]' is {as_json(weight)}; give a number, {example}")
    try:
        total = math.fsum(weights)
    except OverflowError:  # an integer past a float's range: blocks.py refuses it
        return
    if total == 0:
        raise RequestError(
            422, f"'{where}.weights' {as_json(weights)} sum to 0, and an average scales them to sum to 1; {example}"
        )


def _json_value(value: Any) -> str:
    return json.dumps(list(value) if isinstance(value, tuple) else value)


def _check_fuse(adapters: tuple[str, ...], name: Any, catalog: Catalog, where: str) -> Any:
    """A fuse block's adapters (and 'name') matched against the loaded fusions here, so that the refusal speaks of the
    request's fields, not of the Python API (blocks.py's message at forward time); returns the fusion's name."""
    if isinstance(name, str):
        require_loaded("fusion", name, list(catalog.fusions))
        if adapters != catalog.fusions[name]:
            raise RequestError(
                422,
                f"'{where}' names fusion {name!r}, which fuses {list(catalog.fusions[name])}; list those adapters in "
                f"that order in '{where}.fuse'",
            )
        return name
    if name is not None:
        raise RequestError(422, f"'{where}.name' is {as_json(name)}; give the name of a loaded fusion, a string")
    matches = matching_fusions(adapters, catalog.fusions)
    if not matches:
        loaded = {fusion: list(fused) for fusion, fused in catalog.fusions.items()}
        raise RequestError(
            422,
            f"'{where}': no loaded fusion fuses exactly {list(adapters)} in this order (loaded fusions: "
            f"{loaded or 'none'}); list a loaded fusion's adapters in its order, or load one with POST /v1/pieces",
        )
    if len(matches) > 1:
        raise RequestError(
            422, f"'{where}': fusions {matches} all fuse {list(adapters)}; say which with a 'name' field in the block"
        )
    return matches[0]
