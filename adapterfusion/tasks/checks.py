"""Check a raw split against its TaskSpec and convert its labels to ids.

Every problem is reported with the task, the file (or Hub split), the 0-based row and the fix, because a bad
row found here costs seconds while the same row found by a tokenizer mid-training costs a run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapterfusion._validation import short_repr
from adapterfusion.tasks import fields
from adapterfusion.tasks.errors import TaskError
from adapterfusion.tasks.files import EXTENSIONS
from adapterfusion.tasks.instruction import check_answer_type
from adapterfusion.tasks.metric_inputs import HIDDEN_SCORE, IGNORE_SCORE
from adapterfusion.tasks.span_files import is_conll_file, is_squad_file
from adapterfusion.tasks.spec import GENERATION, LABEL_COLUMN, UNLABELLED_VALUES, TaskSpec, suggest
from adapterfusion.tasks.squad import check_qa_split
from adapterfusion.tasks.tagging import check_tagging_split

_CHUNK = 10_000
_EVERY_TEXT_NEEDED = ("single", "pair", GENERATION)  # kinds whose every text field is one input, none optional


@dataclass(frozen=True)
class CheckedSplit:
    """A checked split with integer labels in column "label"; `dataset` is None when the split had no labels.
    `gold_twins`: the rows (0-based, of the file) of a multiple-choice split whose gold choice another choice repeats
    (load_task_data warns of them)."""

    dataset: Any
    dropped_unlabelled: int
    gold_twins: tuple[int, ...] = ()


def _where(spec: TaskSpec, origin: str) -> str:
    return f"task {spec.name!r}, {origin}"


_SEPARATORS = ((";", "semicolons"), ("\t", "tabs"), ("|", "'|' bars"))


def _separated_otherwise(missing: list[str], present: list[str]) -> str | None:
    """Why a file read as one column lacks the fields: a CSV separated by semicolons (a spreadsheet in many locales
    writes them) or tabs reads as one column named by the whole header line, and the hint 'did you mean
    "prompt;answer"' would have the task name that. None when the one column does not hold a missing name."""
    if len(present) != 1:
        return None
    for separator, name in _SEPARATORS:
        parts = [part.strip() for part in present[0].split(separator)]
        if len(parts) > 1 and any(m in parts for m in missing):
            return (
                f"the file's one column {present[0]!r} holds the names {parts}: it is separated by {name}, not "
                "commas; save it as comma-separated CSV (or JSON lines)."
            )
    return None


def _read_as_span_format(spec: TaskSpec, origin: str) -> str | None:
    """Why a file lacks the fields: its name made it read in a span task's own format (a .txt file as CoNLL's words
    and tags, a .json file of {"data": ...} as SQuAD), whose columns it then shows instead of the file's."""
    path = Path(origin)
    if is_conll_file(path) and not spec.is_token_classification:
        read = f"its name ({path.name}) made it read as CoNLL text (one word and its tag per line, as token tags are)"
    elif not spec.is_extractive_qa and is_squad_file(path):
        read = "its first key made it read as SQuAD JSON (a 'data' list of articles, as extractive QA is)"
    else:
        return None
    kinds = ", ".join(EXTENSIONS)
    return f"{read}; a {spec.kind!r} task's rows are read from CSV, JSON or JSON lines files ({kinds}): save them so."


_CHAT_COLUMNS = ("messages", "conversations", "conversation")  # chat-format files' one column of turns


def _chat_format(spec: TaskSpec, present: list[str]) -> str | None:
    """Why a generation task's file lacks its prompt and answer fields: it is a chat-format file (a list of turns
    per row, as many instruction sets are shared), which the task reads as one prompt and one answer per row."""
    chat = next((name for name in _CHAT_COLUMNS if name in present), None)
    if not spec.is_generation or chat is None:
        return None
    return (
        f"the file holds chat turns in {chat!r} (the file has {present}), and a generation task reads one prompt "
        f"and one answer per row: write each row's user turn as {spec.text_fields[0]!r} and the assistant's reply "
        f"as {spec.label_field!r} (with chat_template=True the tokenizer's template wraps the prompt as a user turn)"
    )


def _check_columns(spec: TaskSpec, dataset, origin: str) -> None:
    present = list(dataset.column_names)
    missing = [c for c in fields.required_columns(spec) if c not in present]
    if not missing:
        return
    why = _separated_otherwise(missing, present) or _read_as_span_format(spec, origin) or _chat_format(spec, present)
    if why is not None:
        raise TaskError(f"{_where(spec, origin)}: missing field(s) {missing}; {why}")
    hints = "".join(dict.fromkeys(suggest(m, present) for m in missing))  # one hint per close name
    raise TaskError(
        f"{_where(spec, origin)}: missing field(s) {missing}; the file has {present}.{hints} "
        "Fix the field names in the task description or the file."
    )


def _blank_text(spec: TaskSpec, origin: str, row: int, blank: list[tuple[str, str]]) -> str:
    """The message for a row with a blank text field: a blank input trains on nothing but the label, one blank side
    of a pair on half an input, and a blank prompt on an answer to no question."""
    where = f"{_where(spec, origin)}, row {row}"
    if spec.is_generation:
        name, text = blank[0]
        return (
            f"{where}: the prompt in field {name!r} is blank ({text!r}); every row needs a prompt before its answer "
            "(with no prompt token, the answer's first token is never trained on); write the prompt or drop the row."
        )
    names, texts = [name for name, _ in blank], [text for _, text in blank]
    every = f" (a {spec.kind} task reads every one of {list(spec.text_fields)})" if len(spec.text_fields) > 1 else ""
    return f"{where}: field(s) {names} hold no text ({texts!r}){every}; fill them in or drop the row."


def check_rows(spec: TaskSpec, batch, offset: int, origin: str) -> None:
    """Texts must be strings; MC rows need exactly num_choices string choices and, if used, the blank. `batch`: rows
    `offset`.. of the split `origin` (a file, or a split handed to encode_task)."""
    columns = fields.text_columns(batch, spec)
    for name, column in zip(spec.text_fields, columns, strict=True):
        for i, value in enumerate(column):
            if value is None:
                raise TaskError(
                    f"{_where(spec, origin)}, row {offset + i}: field {name!r} is missing or empty; fill it in "
                    "or drop the row."
                )
            if not isinstance(value, str):
                raise TaskError(
                    f"{_where(spec, origin)}, row {offset + i}: field {name!r} is {value!r} (of type "
                    f"{type(value).__name__}), not text; write it as a string (in JSON, in quotes)."
                )
    if spec.kind in _EVERY_TEXT_NEEDED:
        for i, texts in enumerate(zip(*columns, strict=True)):
            blank = [(name, text) for name, text in zip(spec.text_fields, texts, strict=True) if not text.strip()]
            if blank:
                raise TaskError(_blank_text(spec, origin, offset + i, blank))
    if not spec.is_multiple_choice:
        return
    for i, choices in enumerate(fields.choice_lists(batch, spec)):
        if not isinstance(choices, list) or len(choices) != spec.num_choices:
            count = len(choices) if isinstance(choices, list) else f"no list ({choices!r})"
            raise TaskError(
                f"{_where(spec, origin)}, row {offset + i}: expected {spec.num_choices} choices in "
                f"{list(spec.choice_fields)}, found {count}; fix the row or the task's num_choices/choice_fields."
            )
        if not all(isinstance(c, str) for c in choices):
            raise TaskError(
                f"{_where(spec, origin)}, row {offset + i}: choices {choices!r} in {list(spec.choice_fields)} must "
                "all be text; fill in the missing choice or drop the row."
            )
        empty = [k for k, choice in enumerate(choices) if not choice.strip()]
        if empty:  # scored as the context with an empty second text: a choice the model cannot tell from another
            raise TaskError(
                f"{_where(spec, origin)}, row {offset + i}: choice(s) {empty} of {choices!r} in "
                f"{list(spec.choice_fields)} hold no text; fill in the missing choice or drop the row."
            )
        if len({_choice_text(choice) for choice in choices}) == 1:
            raise TaskError(
                f"{_where(spec, origin)}, row {offset + i}: all {len(choices)} choices in {list(spec.choice_fields)} "
                f"are the same text {choices[0]!r} (ignoring case and spacing), so no model can tell them apart: its "
                "label is arbitrary, never learnt, and scored right only when it is the first choice; fix the "
                "choices or drop the row."
            )
    if spec.blank is None:
        return
    for i, context in enumerate(fields.contexts(batch, spec)):
        if spec.blank not in context:
            raise TaskError(
                f"{_where(spec, origin)}, row {offset + i}: context has no blank {spec.blank!r} for the choices "
                "to fill; fix the row or the task's blank."
            )
        if context.count(spec.blank) > 1:  # a choice fills the first; the others were read as written, in silence
            raise TaskError(
                f"{_where(spec, origin)}, row {offset + i}: context {context[:120]!r} holds the blank {spec.blank!r} "
                f"{context.count(spec.blank)} times, where a choice fills one; fix the row, or give the task a "
                "blank that marks the one place (e.g. '[BLANK]')."
            )


def _choice_text(choice: str) -> str:
    """A choice as an uncased tokenizer reads it: case and runs of whitespace do not tell two choices apart."""
    return " ".join(choice.split()).casefold()


def _missing(raw: Any) -> bool:
    """No value at all: None, blank text, a NaN (JSON's NaN, pandas' missing number) or the text "NaN" (what pandas
    writes to a CSV for a gap, and a CSV cell is read as the text it holds)."""
    if isinstance(raw, str):
        return raw.strip().lower() in ("", "nan")
    return raw is None or (isinstance(raw, float) and math.isnan(raw))


def _unlabelled(raw: Any, lookup: dict[str, int]) -> bool:
    """No gold label: no value at all (None, NaN), or a missing value or one of UNLABELLED_VALUES that is not one of
    the task's own labels: a task may name a label "nan", and a polarity task's -1 is a class (it was read as GLUE's
    hidden label, so every such row was refused, or dropped, class and all, with drop_unlabelled)."""
    if raw is None or (isinstance(raw, float) and math.isnan(raw)):
        return True
    key = _label_key(raw)
    if key in lookup:
        return False
    return key in UNLABELLED_VALUES or _missing(raw)


def _label_key(raw: Any) -> str:
    """A label as the task's lookup spells it. Arrow reads a JSON column holding one non-integer number as floats
    throughout (1 becomes 1.0), so an integral float is the integer it was written as, and the row that is really
    wrong (1.5) is the one reported."""
    if isinstance(raw, float) and raw.is_integer():
        return str(int(raw))
    return str(raw)


def _check_answers(spec: TaskSpec, batch, offset: int, origin: str) -> list[int]:
    """A generation task's rows without an answer (None or empty); raises on an answer that is not text (the rule
    encode_task applies to rows handed to it: check_answer_type)."""
    unanswered = []
    for i, raw in enumerate(fields.field_values(batch, spec.label_field)):
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            unanswered.append(offset + i)
        else:
            check_answer_type(spec, f"{_where(spec, origin)}, row {offset + i}", raw)
    return unanswered


class _UnknownLabel(TaskError):
    """A label outside the task's label set; check_split adds the labels the whole column holds."""


def _label_lookup(spec: TaskSpec) -> dict[str, int]:
    """Raw label -> id: the task's label values (or ids), and, where no value spells it, each label's name, so that
    a user's file may write "positive" for the task's label named "positive"."""
    lookup = spec.label_lookup()
    names = {name: i for i, name in enumerate(spec.label_names) if name not in lookup}
    lookup = {**lookup, **names} if not spec.label_values else lookup
    # A CSV written by pandas from a label column with a gap holds "1.0" where the label is 1.
    floats = {f"{key}.0": i for key, i in lookup.items() if key.lstrip("-").isdigit() and f"{key}.0" not in lookup}
    return {**lookup, **floats}


def _score(raw: Any) -> float | None:
    """A regression label as a finite float; None when it is no number (a numeric string counts)."""
    if isinstance(raw, bool):
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _check_scores(spec: TaskSpec, batch, offset: int, origin: str) -> list[int]:
    """A regression task's rows without a score: None, "", NaN, or -100 (the ignore index, never a score). -1 is a
    real score (a polarity scale in [-1, 1] has it) unless every row of the split has it: _hidden_scores. Raises on
    a label that is no number."""
    unlabelled = []
    for i, raw in enumerate(fields.field_values(batch, spec.label_field)):
        if _missing(raw) or _score(raw) == IGNORE_SCORE:
            unlabelled.append(offset + i)
        elif _score(raw) is None:
            raise TaskError(
                f"{_where(spec, origin)}, row {offset + i}: label {raw!r} in field {spec.label_field!r} is not a "
                "number; a regression task's label is one real score per row (e.g. 3.8)."
            )
    return unlabelled


def _hidden_scores(spec: TaskSpec, labels: Iterable[Any]) -> bool:
    """Whether every score among a regression split's `labels` (one batch of them) is -1: where every batch's is,
    the split holds GLUE's hidden test labels (STS-B's test split), not scores, which a model could only be scored
    against as a constant (Pearson undefined)."""
    return spec.regression and all(_score(raw) == HIDDEN_SCORE for raw in labels)


def _check_labels(spec: TaskSpec, batch, offset: int, origin: str) -> list[int]:
    """Row indices without a gold label; raises on a label outside the task's label set."""
    if spec.is_generation:
        return _check_answers(spec, batch, offset, origin)
    if spec.regression:
        return _check_scores(spec, batch, offset, origin)
    lookup = _label_lookup(spec)
    unlabelled = []
    for i, raw in enumerate(fields.field_values(batch, spec.label_field)):
        key = _label_key(raw)
        if _unlabelled(raw, lookup):
            unlabelled.append(offset + i)
        elif key not in lookup:
            allowed = list(spec.label_lookup())
            names = [name for name in spec.label_names if name in lookup and name not in allowed]
            also = f" (or the label names {names})" if names else ""
            raise _UnknownLabel(
                f"{_where(spec, origin)}, row {offset + i}: label {raw!r} in field {spec.label_field!r} is not one "
                f"of {allowed}{also}.{suggest(key, list(lookup))} Fix the row or the task's label_values."
            )
    return unlabelled


def _labels_found(spec: TaskSpec, dataset, limit: int = 20) -> str:
    """' The column holds labels [...]': every distinct label of the split (the first `limit`), so that a file
    labelled with other names shows them all at once."""
    found: dict[str, None] = {}
    lookup = _label_lookup(spec)
    for batch in dataset.select_columns([fields.top_level(spec.label_field)]).iter(batch_size=_CHUNK):
        found.update(dict.fromkeys(_label_key(v) for v in fields.field_values(batch, spec.label_field)))
    names = sorted(k for k in found if not _unlabelled(k, lookup))
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return (
        f" The column holds {len(names)} distinct labels: {names[:limit]}{more}. If these are your labels, describe "
        "the task with them (label_names, or label_values in label id order)."
    )


def check_split(spec: TaskSpec, dataset, origin: str, role: str):
    """Validate every row and return a CheckedSplit whose "label" column holds label ids (a ClassLabel); a
    generation task's split keeps its prompt and answer fields as they are.

    A test split with no gold labels at all (hidden GLUE test labels, or no label column) comes back with
    dataset=None, so callers can leave it out instead of failing.
    """
    if len(dataset) == 0:
        raise TaskError(f"{_where(spec, origin)}: the split is empty; it must hold at least one example.")
    if role == "test" and fields.top_level(spec.label_field) not in dataset.column_names:
        return CheckedSplit(dataset=None, dropped_unlabelled=len(dataset))
    _check_columns(spec, dataset, origin)
    if spec.is_extractive_qa or spec.is_token_classification:  # their rows hold answers or tag lists
        checker = check_qa_split if spec.is_extractive_qa else check_tagging_split
        return CheckedSplit(*checker(spec, dataset, origin, role))
    columns = fields.required_columns(spec)
    unlabelled: list[int] = []
    twins: list[int] = []
    hidden = spec.regression  # every score so far -1 (_hidden_scores)
    offset = 0
    try:
        for batch in dataset.select_columns(columns).iter(batch_size=_CHUNK):
            unlabelled += _check_labels(spec, batch, offset, origin)
            hidden = hidden and _hidden_scores(spec, fields.field_values(batch, spec.label_field))
            check_rows(spec, batch, offset, origin)
            if spec.is_multiple_choice:
                twins += _gold_twins(spec, batch, offset)
            offset += len(batch[columns[0]])
    except _UnknownLabel as err:
        raise TaskError(f"{err}{_labels_found(spec, dataset)}") from None
    if hidden:
        unlabelled = list(range(len(dataset)))
    if len(unlabelled) == len(dataset) and role == "test":
        return CheckedSplit(dataset=None, dropped_unlabelled=len(unlabelled))
    if unlabelled and not spec.drop_unlabelled:
        raise TaskError(
            f"{_where(spec, origin)}, row {unlabelled[0]}: no gold label in field {spec.label_field!r}"
            f"{_no_score_mark(spec, dataset, unlabelled[0])} ({len(unlabelled)} such rows in the {role} split); remove "
            "them or set drop_unlabelled=True in the task description."
        )
    if len(unlabelled) == len(dataset):  # drop_unlabelled would leave nothing to train or score on
        gold = "an answer" if spec.is_generation else "a gold label"
        raise TaskError(
            f"{_where(spec, origin)}: none of the {len(dataset)} rows of the {role} split has {gold} in field "
            f"{spec.label_field!r}, so drop_unlabelled=True would leave the split empty; check that label_field "
            "names the column that holds them, or fill them in."
        )
    if unlabelled:
        keep = sorted(set(range(len(dataset))) - set(unlabelled))
        dataset = dataset.select(keep)
    if spec.is_generation:
        return CheckedSplit(dataset=dataset, dropped_unlabelled=len(unlabelled))
    if spec.regression:
        return CheckedSplit(dataset=_with_scores(spec, dataset), dropped_unlabelled=len(unlabelled))
    return CheckedSplit(
        dataset=_with_label_ids(spec, dataset), dropped_unlabelled=len(unlabelled), gold_twins=tuple(twins)
    )


def _no_score_mark(spec: TaskSpec, dataset, row: int) -> str:
    """For a regression row whose label marks no score (-100, or -1 in a split of -1s only): what it means."""
    if not spec.regression:
        return ""
    raw = fields.field_values(
        dataset.select_columns([fields.top_level(spec.label_field)])[row : row + 1], spec.label_field
    )[0]
    if _score(raw) == IGNORE_SCORE:
        return f" (its label {raw!r} is the ignore index, which marks a row without a gold score)"
    if _score(raw) == HIDDEN_SCORE:
        return (
            f" (its label {raw!r}, as every row's of this split: GLUE's mark of hidden test scores, not scores; a "
            "test split of them is left out)"
        )
    return ""


def check_label_column(spec: TaskSpec, dataset, origin: str) -> None:
    """The "label" column of a split handed to encode_task must hold what load_task_data makes of a file's labels:
    class ids 0..n-1, finite scores, or a tagging task's list of tag ids, one per word. A split built otherwise
    (Dataset.from_list) kept raw labels, which the collator or the model's loss refused only in training, or read
    in silence (a -1, GLUE's "no gold label", or float ids taken as regression scores)."""
    words_column = [fields.top_level(spec.text_fields[0])] if spec.is_token_classification else []
    hidden = spec.regression  # every score so far -1 (_hidden_scores)
    offset = 0
    for batch in dataset.select_columns([LABEL_COLUMN, *words_column]).iter(batch_size=_CHUNK):
        labels = batch[LABEL_COLUMN]
        words = fields.text_columns(batch, spec)[0] if words_column else [None] * len(labels)
        for i, (raw, row_words) in enumerate(zip(labels, words, strict=True)):
            problem = _label_problem(spec, raw, row_words)
            if problem is not None:
                raise TaskError(f"{_where(spec, origin)}, row {offset + i}: label {short_repr(raw)} {problem}")
        hidden = hidden and _hidden_scores(spec, labels)
        offset += len(labels)
    if hidden:
        raise TaskError(
            f"{_where(spec, origin)}: every row's label is -1, GLUE's mark of hidden test scores, not scores; leave "
            "the split out (load_task_data leaves such a test split out)."
        )


def _label_problem(spec: TaskSpec, raw: Any, words: Any) -> str | None:
    """Why one row's label is not what its task's encoding takes, or None; `words`: a tagging row's words."""
    if spec.regression:
        return _score_problem(raw)
    if not spec.is_token_classification:
        return _id_problem(spec, raw)
    if not isinstance(raw, list):
        return "is no list of tag ids, one per word; fix the row, or load the rows with load_task_data."
    if isinstance(words, list) and len(raw) != len(words):
        return f"gives {len(raw)} tags for {len(words)} words; give one tag id per word."
    bad = [tag for tag in raw if _id_problem(spec, tag) is not None]
    if not bad:
        return None
    if _unlabelled(bad[0], _label_lookup(spec)):  # a tagging row is whole or refused: no word goes untagged
        return (
            f"holds tag {short_repr(bad[0])}, no tag id 0..{spec.num_labels - 1} of {list(spec.label_names)}; give "
            "every word its tag, or drop the row."
        )
    return f"holds tag {short_repr(bad[0])}, which {_id_problem(spec, bad[0])}"


_DROP_HINT = (
    "drop the row (load_task_data drops rows without a gold label with drop_unlabelled=True, and leaves out a test "
    "split that has none)"
)


def _id_problem(spec: TaskSpec, raw: Any) -> str | None:
    """Why `raw` is not a class id of the task's, or None when it is one."""
    count = spec.num_labels
    if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw < count:
        return None
    ids = f"a label id 0..{count - 1} of {list(spec.label_names)}"
    if isinstance(raw, float) and raw.is_integer() and 0 <= raw < count:  # the collator reads floats as scores
        return f"is a float, where a class id is an integer; write {int(raw)} (a column of integers)."
    lookup = _label_lookup(spec)
    key = _label_key(raw)
    if _unlabelled(raw, lookup):
        return f"marks no gold label, where encode_task needs {ids}; {_DROP_HINT}."
    if key in lookup:  # a raw value or a name of the task's: load_task_data converts those to ids
        return (
            f"is how a file writes label {spec.label_names[lookup[key]]!r}, not its id; encode_task takes label ids: "
            f"write {lookup[key]}, or load the rows with load_task_data, which converts a file's labels to ids."
        )
    kind = "" if isinstance(raw, int) and not isinstance(raw, bool) else f" (of type {type(raw).__name__})"
    return f"is not {ids}{kind}; fix the row, or load the rows with load_task_data, which checks and converts labels."


def _score_problem(raw: Any) -> str | None:
    """Why `raw` is not a regression score, or None when it is one."""
    if _missing(raw) or _score(raw) == IGNORE_SCORE:
        return f"marks no gold score; {_DROP_HINT}."
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or _score(raw) is None:
        return (
            "is not a finite number; a regression task's label is one real score per row (e.g. 3.8): fix the row, "
            "or load the rows with load_task_data, which checks and converts scores."
        )
    return None


def _gold_twins(spec: TaskSpec, batch, offset: int) -> list[int]:
    """Multiple-choice rows whose gold choice has a twin: another choice of the same text (ignoring case and
    spacing, as _choice_text). No model can be right on such a row but by how it breaks the tie; the datasets hold
    some (CommonsenseQA, Social IQa), so they are counted for a warning, not refused."""
    lookup = _label_lookup(spec)
    rows = []
    labels = fields.field_values(batch, spec.label_field)
    for i, (choices, raw) in enumerate(zip(fields.choice_lists(batch, spec), labels, strict=True)):
        gold = lookup.get(_label_key(raw))
        if gold is None or _unlabelled(raw, lookup) or not 0 <= gold < len(choices):
            continue
        texts = [_choice_text(choice) for choice in choices]
        if texts.count(texts[gold]) > 1:
            rows.append(offset + i)
    return rows


def gold_twin_warning(twins: dict[str, tuple[int, ...]]) -> str | None:
    """The one warning of a load about the rows _gold_twins found (split origin -> rows), or None when there are
    none."""
    found = {origin: rows for origin, rows in twins.items() if rows}
    if not found:
        return None
    total = sum(len(rows) for rows in found.values())
    where = "; ".join(f"{len(rows)} in {origin} (first: row {rows[0]})" for origin, rows in found.items())
    return (
        f"{total} multiple-choice row(s) have a gold choice whose text another choice of the row repeats ({where}): "
        "no model can tell the two apart, so such a row is right only by how a tie is broken; they are kept (the "
        "dataset holds them), and count against every model alike"
    )


def _label_ids(batch, label_field: str, lookup: dict[str, int]) -> dict[str, list[int]]:
    return {LABEL_COLUMN: [lookup[_label_key(v)] for v in fields.field_values(batch, label_field)]}


def _scores(batch, label_field: str) -> dict[str, list[float | None]]:
    return {LABEL_COLUMN: [_score(v) for v in fields.field_values(batch, label_field)]}


def _with_scores(spec: TaskSpec, dataset):
    """Replace (or add) column "label" with a regression task's scores as float32."""
    import datasets

    features = dataset.features.copy()
    features[LABEL_COLUMN] = datasets.Value("float32")
    return dataset.map(
        _scores,
        batched=True,
        fn_kwargs={"label_field": spec.label_field},
        features=features,
        desc=f"{spec.name}: scores",
    )


def _with_label_ids(spec: TaskSpec, dataset):
    """Replace (or add) column "label" with ids, typed as a ClassLabel so label names travel with the data."""
    import datasets

    features = dataset.features.copy()
    features[LABEL_COLUMN] = datasets.ClassLabel(names=list(spec.label_names))
    return dataset.map(
        _label_ids,
        batched=True,
        fn_kwargs={"label_field": spec.label_field, "lookup": _label_lookup(spec)},
        features=features,
        desc=f"{spec.name}: label ids",
    )
