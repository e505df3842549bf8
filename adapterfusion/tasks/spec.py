"""`TaskSpec`: everything the library needs to know about a task to load, check, encode and score it.

A spec describes data by the field names of its Hub dataset, so one description serves the Hub copy,
a local copy laid out like it, and a user's own CSV/JSONL files.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from adapterfusion._validation import closest, short_repr
from adapterfusion.tasks.errors import TaskError
from adapterfusion.tasks.tagging_metrics import chunks

SPEC_FORMAT_VERSION = 1
GENERATION = "generation"  # instruction data: a prompt and an answer, trained on the answer's tokens
EXTRACTIVE_QA = "extractive_qa"  # a question and a context; the answer is a span of the context (SQuAD)
TOKEN_CLASSIFICATION = "token_classification"  # a list of words, one tag each (CoNLL-2003 named entities)
KINDS = ("single", "pair", "multiple_choice", GENERATION, EXTRACTIVE_QA, TOKEN_CLASSIFICATION)
# Their metrics (first: the default that selects the best checkpoint). QA: SQuAD v1.1's, as fractions; tagging:
# entity-level (seqeval's chunks), and the accuracy of the word tags.
QA_METRICS = ("f1", "exact_match")
TAGGING_METRICS = ("f1", "precision", "recall", "accuracy")
_SPAN_METRICS = {EXTRACTIVE_QA: QA_METRICS, TOKEN_CLASSIFICATION: TAGGING_METRICS}
ROLES = ("train", "validation", "test")
LABEL_COLUMN = "label"  # where a loaded split of a classification or regression task holds its label ids or scores
CLASSIFICATION_METRICS = ("accuracy", "f1", "matthews_correlation")
# A regression task's dev metrics (STS-B: one real score per example); Houlsby et al. report Spearman, GLUE both.
REGRESSION_METRICS = ("spearman", "pearson")
# A generation task's dev metrics of the answer tokens, teacher-forced (mean cross-entropy, token accuracy; perplexity
# is always recorded beside them), and of greedy generation (exact match, which generates: asked for by name).
GENERATION_METRICS = ("answer_loss", "token_accuracy", "exact_match")
METRIC_NAMES = CLASSIFICATION_METRICS + REGRESSION_METRICS + GENERATION_METRICS
LOWER_IS_BETTER = frozenset({"answer_loss", "perplexity", "loss"})  # metrics whose best checkpoint has the least
# Raw label values that mean "no gold label" (GLUE/SuperGLUE test sets use -1, WinoGrande/HellaSwag ""), unless
# the task names one of them as its own label (a polarity task's -1).
UNLABELLED_VALUES = frozenset({"", "-1", "None"})
_DEFAULT_POSITIVE_LABEL = 1
_WRITTEN_WHEN_SET = ("regression", "extra_dev_splits")  # to_dict leaves them out at their defaults
_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_OPTIONAL_TEXT = (str, type(None))
# The scalar fields and the types a JSON description may give them (bool is not accepted as an int).
_SCALAR_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "kind": (str,),
    "label_field": (str,),
    "num_choices": (int, type(None)),
    "blank": _OPTIONAL_TEXT,
    "positive_label": (int,),
    "max_length": (int,),
    "train_split": _OPTIONAL_TEXT,
    "validation_split": _OPTIONAL_TEXT,
    "test_split": _OPTIONAL_TEXT,
    "hub_path": _OPTIONAL_TEXT,
    "hub_config": _OPTIONAL_TEXT,
    "hub_revision": _OPTIONAL_TEXT,
    "drop_unlabelled": (bool,),
    "regression": (bool,),
    "chat_template": (bool,),
    "description": (str,),
}


def suggest(value: str, known: list[str] | tuple[str, ...]) -> str:
    """A ' Did you mean ...?' hint for a misspelt name, or '' when nothing is close."""
    close = closest(value, known)
    return f" Did you mean {short_repr(close)}?" if close is not None else ""


def _yaml_bool_hint(*values: Any) -> str:
    """Why a text is a bool: YAML reads the unquoted words yes/no/on/off/true/false as booleans, so a task file's
    `label_names: [yes, no]` arrives as [True, False], which the user never wrote."""
    if not any(isinstance(v, bool) for v in values):
        return ""
    return " A YAML file reads unquoted yes/no/on/off/true/false as booleans: quote them ('yes', 'no')."


def _bool_values_message(values: Any) -> str:
    """Why booleans among label_values are refused: a file's labels are matched as text, and a bool has no one text.
    YAML's unquoted yes/no arrive as True/False, which then matched no 'yes'/'no' row of the file; and a JSON file's
    true/false labels are read as the texts 'True'/'False', which the strings say plainly."""
    return (
        f"label_values={short_repr(list(values))} holds booleans; give each raw label as the text (or integer) the "
        "files write. A YAML file reads unquoted yes/no/on/off/true/false as booleans: quote them ('yes', 'no'); for "
        "files whose labels are JSON booleans (true/false), give the strings 'False', 'True'."
    )


def piece_name(task: str | TaskSpec) -> str:
    """The name of a task's adapter and head: module keys allow letters, digits, '_' and '-' only, so '.' becomes
    '_' (the one spelling for the recipes, the zoo and pruning)."""
    return (task if isinstance(task, str) else task.name).replace(".", "_")


@dataclass(frozen=True)
class TaskSpec:
    """A classification, multiple-choice or generation task, described by its data's field names.

    text_fields: the text for "single" (1 field) and "pair" (2 fields); for "multiple_choice" the context
        fields, joined with a space (e.g. SocialIQA's context and question).
    choice_fields: multiple choice only; either one field holding a list of choices (dotted paths reach into
        dicts, e.g. "choices.text") or one field per choice (e.g. "answerA", "answerB", "answerC").
    blank: multiple choice only; a placeholder in the context that a choice fills (WinoGrande's "_").
    label_values: the raw label value for each label id, in id order (e.g. ("1", "2") or ("A", ..., "E"));
        empty means the raw labels already are the ids 0..n-1.
    train_split / validation_split / test_split: the split names on the Hub and file stems locally
        (None: the task has no such split, e.g. IMDb has no validation set).
    hub_splits: the roles whose Hub split has gold labels; other roles are never loaded from the Hub.
    drop_unlabelled: drop rows without a gold label (SNLI's -1) instead of rejecting the file.
    data_files: role -> path of a user's own file (CSV, JSON, JSONL, optionally gzip'd); an extra dev split's name
        as a key gives that split's file.
    regression: a single/pair task whose label is one real number per example (STS-B's 0-5 similarity), trained
        with a RegressionHead and scored by Spearman and Pearson correlation; it has no label_names.
    extra_dev_splits: further labelled dev splits, scored with the best checkpoint after training but never used
        to select it (MNLI's "validation_mismatched" beside its "validation_matched").

    kind "generation" (instruction data, `instruction_task` builds one): text_fields holds the prompt field and
    label_field the answer field; there are no label names. A model trains on the answer's tokens only
    (tasks/instruction.py). chat_template: wrap each prompt in the tokenizer's chat template as one user turn.
    kind "extractive_qa" (SQuAD): text_fields = (question, context), label_field the answers in the Hub's layout
    ({"text": [...], "answer_start": [...]}, several gold answers allowed), no label names; contexts longer than
    max_length are read in overlapping windows (tasks/squad.py). kind "token_classification" (CoNLL-2003):
    text_fields = (the list of words,), label_field one tag per word, label_names the tags in id order.
    metrics default to the kind's own: ("accuracy",) for classification, ("answer_loss", "token_accuracy") for
    generation, QA_METRICS and TAGGING_METRICS for the two above; the first selects a run's best checkpoint (the
    least answer_loss, the most of the others).
    """

    name: str
    kind: str
    text_fields: tuple[str, ...]
    label_names: tuple[str, ...] = ()
    label_field: str = "label"
    label_values: tuple[Any, ...] = ()
    num_choices: int | None = None
    choice_fields: tuple[str, ...] = ()
    blank: str | None = None
    metrics: tuple[str, ...] = ()
    positive_label: int = _DEFAULT_POSITIVE_LABEL
    max_length: int = 128
    train_split: str | None = "train"
    validation_split: str | None = "validation"
    test_split: str | None = None
    hub_path: str | None = None
    hub_config: str | None = None
    hub_revision: str | None = None
    hub_splits: tuple[str, ...] = ("train", "validation")
    drop_unlabelled: bool = False
    chat_template: bool = False
    data_files: tuple[tuple[str, str], ...] = ()
    regression: bool = False
    extra_dev_splits: tuple[str, ...] = ()
    description: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        self._check_scalar_types()
        self._coerce_containers()
        if not self.metrics and self.kind in _SPAN_METRICS:
            object.__setattr__(self, "metrics", _SPAN_METRICS[self.kind])
        if not self.metrics:
            default = (
                ("answer_loss", "token_accuracy")
                if self.kind == GENERATION
                else REGRESSION_METRICS
                if self.regression
                else ("accuracy",)
            )
            object.__setattr__(self, "metrics", default)
        if self.kind == "multiple_choice" and not self.label_names and self.num_choices:
            object.__setattr__(self, "label_names", tuple(str(i) for i in range(self.num_choices)))
        self._check_identity()
        self._check_fields()
        self._check_labels()
        self._check_splits()
        self._check_positive_label()
        self._check_metrics()

    # -- validation -------------------------------------------------------------------------------

    def _fail(self, message: str) -> TaskError:
        return TaskError(f"task {short_repr(self.name)}: {message}")

    def _check_scalar_types(self) -> None:
        for name, types in _SCALAR_TYPES.items():
            value = getattr(self, name)
            if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                wanted = " or ".join("null" if t is type(None) else t.__name__ for t in types)
                hint = _yaml_bool_hint(value) if str in types else ""
                raise TaskError(f"task {short_repr(self.name)}: {name}={short_repr(value)} must be {wanted}.{hint}")

    def _coerce_containers(self) -> None:
        """Accept lists (from JSON/YAML) and a dict for data_files, store tuples so the spec is hashable."""
        containers = ("text_fields", "label_names", "label_values", "choice_fields", "metrics", "hub_splits")
        for name in (*containers, "extra_dev_splits"):
            value = getattr(self, name)
            if isinstance(value, str):
                value = (value,)
            allowed = (str, int) if name == "label_values" else (str,)
            if name == "label_values" and isinstance(value, (list, tuple)) and any(isinstance(v, bool) for v in value):
                raise self._fail(_bool_values_message(value))
            if not isinstance(value, (list, tuple)) or not all(isinstance(item, allowed) for item in value):
                kinds = "strings or integers" if len(allowed) > 1 else "strings"
                hint = _yaml_bool_hint(*value) if isinstance(value, (list, tuple)) else ""
                raise self._fail(f"{name}={short_repr(value)} must be a list of {kinds}.{hint}")
            object.__setattr__(self, name, tuple(value))
        files = self.data_files
        pairs: Iterable[tuple[Any, Any]]  # a mapping or pairs from JSON/YAML, made a tuple of str pairs here
        if isinstance(files, Mapping):
            pairs = files.items()
        elif isinstance(files, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in files):
            pairs = files
        else:
            raise self._fail(
                f"data_files={short_repr(files)} must map split roles to files, e.g. {{'train': 'train.csv'}}."
            )
        pairs = list(pairs)
        odd = [
            (role, path)
            for role, path in pairs
            if not isinstance(role, str) or not isinstance(path, (str, os.PathLike))
        ]
        if odd:  # data_files={'train': 5} was read as the file '5'
            raise self._fail(
                f"data_files entry {short_repr(odd[0][0])}: {short_repr(odd[0][1])} must map a split role (a str) to "
                "a file path (a str), e.g. {'train': 'train.csv'}."
            )
        object.__setattr__(self, "data_files", tuple((role, os.fspath(path)) for role, path in pairs))

    def _check_identity(self) -> None:
        if not isinstance(self.name, str) or not _NAME_PATTERN.fullmatch(self.name):
            raise TaskError(
                f"task name {short_repr(self.name)} is invalid: use letters, digits, '_', '-' or '.', starting with a "
                "letter or digit (it names the task's data folder)."
            )
        if self.kind not in KINDS:
            raise self._fail(
                f"kind {short_repr(self.kind)} is unknown; use one of {KINDS}.{suggest(str(self.kind), KINDS)}"
            )
        if not isinstance(self.max_length, int) or self.max_length < 8:
            raise self._fail(f"max_length={short_repr(self.max_length)} must be an integer >= 8 (tokens per input).")

    def _check_fields(self) -> None:
        expected = {
            "single": "exactly 1",
            "pair": "exactly 2",
            "multiple_choice": "at least 1",
            GENERATION: "exactly 1",
            EXTRACTIVE_QA: "exactly 2 (question, context)",
            TOKEN_CLASSIFICATION: "exactly 1 (the list of words)",
        }
        n_text = len(self.text_fields)
        one = self.kind in ("single", GENERATION, TOKEN_CLASSIFICATION)
        two = self.kind in ("pair", EXTRACTIVE_QA)
        if (one and n_text != 1) or (two and n_text != 2) or n_text < 1:
            raise self._fail(
                f"a {short_repr(self.kind)} task needs {expected[self.kind]} text field(s), got "
                f"text_fields={list(self.text_fields)}."
            )
        names = [*self.text_fields, *self.choice_fields, self.label_field]
        if not all(isinstance(n, str) and n for n in names):
            raise self._fail(f"field names must be non-empty strings, got {names}.")
        odd = [n for n in names if not all(part.strip() for part in n.split("."))]
        if odd:  # read as a column '' or ' ', or a nested key '': always 'missing', whatever the file holds
            raise self._fail(
                f"field name(s) {odd} have a blank part: a field is a column name, or a dotted path into a column of "
                "dicts (e.g. 'choices.text'), each part a visible name; name the columns as the files do."
            )
        for what, fields in (("text_fields", self.text_fields), ("choice_fields", self.choice_fields)):
            twice = sorted({n for n in fields if fields.count(n) > 1})
            if twice:  # a pair of a text with itself, or one choice offered twice: a task of other inputs
                raise self._fail(
                    f"{what}={list(fields)} names {twice} more than once; each field is read once, so name each "
                    "column of the input once (a 'pair' task's two texts are two different columns)."
                )
        if self.label_field in (*self.text_fields, *self.choice_fields):
            raise self._fail(
                f"field {short_repr(self.label_field)} is both the label field and a text field; the model "
                f"would read the "
                "answer. Name the text column(s) in text_fields (choice_fields) and the label column in label_field."
            )
        inputs = [n for n in (*self.text_fields, *self.choice_fields) if n.split(".", 1)[0] == LABEL_COLUMN]
        if inputs and self.kind in ("single", "pair", "multiple_choice"):  # its text became the label ids, in silence
            raise self._fail(
                f"field {short_repr(inputs[0])} is an input, but loading writes the label ids (read from "
                f"label_field={short_repr(self.label_field)}) into the column {LABEL_COLUMN!r}, replacing its text; "
                f"rename the {LABEL_COLUMN!r} column of the files (e.g. to 'text') and the field with it."
            )
        if self.chat_template and self.kind != GENERATION:
            raise self._fail("chat_template is for kind='generation' only (it wraps a prompt); remove it.")
        if self.kind != "multiple_choice":
            if self.choice_fields or self.blank is not None or self.num_choices is not None:
                raise self._fail(
                    "choice_fields, blank and num_choices are for kind='multiple_choice' only; remove them or "
                    "set kind='multiple_choice'."
                )
            return
        n_choices = len(self.label_names)
        if self.num_choices is not None and self.num_choices != n_choices:
            raise self._fail(
                f"num_choices={self.num_choices} but {n_choices} label_names {list(self.label_names)} were "
                "given; they must agree (one label per choice)."
            )
        object.__setattr__(self, "num_choices", n_choices)
        if len(self.choice_fields) not in (1, n_choices):
            raise self._fail(
                f"choice_fields={list(self.choice_fields)} must be one list-valued field or one field per "
                f"choice ({n_choices})."
            )
        if self.blank is not None and not self.blank.strip():  # " " is in every context: each cut at its first space
            raise self._fail(
                f"blank={short_repr(self.blank)} must be a visible placeholder such as '_' (the text in each context "
                "that a choice fills); a blank of spaces only is found between any two words."
            )

    def _check_labels(self) -> None:
        if self.regression:
            if self.kind not in ("single", "pair"):
                raise self._fail(
                    f"regression=True is for 'single' and 'pair' tasks, not {short_repr(self.kind)}; remove it."
                )
            if self.label_names or self.label_values:
                raise self._fail(
                    "a regression task has no label_names or label_values: its label_field holds each row's score; "
                    "remove them."
                )
            return
        if self.kind == GENERATION:
            if self.label_names or self.label_values:
                raise self._fail(
                    "a 'generation' task has no label_names or label_values: its label_field holds each row's "
                    "answer text; remove them."
                )
            return
        if self.kind == EXTRACTIVE_QA:
            if self.label_names or self.label_values:
                raise self._fail(
                    "an 'extractive_qa' task has no label_names or label_values: its label_field holds each row's "
                    "answers ({'text': [...], 'answer_start': [...]}); remove them."
                )
            return
        if len(self.label_names) < 2 or len(set(self.label_names)) != len(self.label_names):
            raise self._fail(
                f"label_names={list(self.label_names)} must hold at least 2 distinct names "
                "(for multiple choice, one per choice, or give num_choices)."
            )
        stripped = [n.strip() for n in self.label_names]
        if not all(stripped) or len(set(stripped)) != len(stripped):  # 'pos' and 'pos ' read as one label by anyone
            raise self._fail(
                f"label_names={list(self.label_names)} holds a blank name or names that differ only in spaces; give "
                "each label a visible name of its own (the raw values a file writes go in label_values)."
            )
        ids = [str(i) for i in range(len(self.label_names))]
        misread = [(n, i) for i, n in enumerate(self.label_names) if n in ids and n != ids[i]]
        if misread and not self.label_values:  # a raw label "1" could mean id 1 or the name "1"
            name, index = misread[0]
            raise self._fail(
                f"label_names={list(self.label_names)} are numbers that are also label ids 0..{len(ids) - 1} "
                f"(the name {short_repr(name)} has id {index}), so a raw label {short_repr(name)} in a file "
                f"is ambiguous; give "
                f"label_values={list(self.label_names)} if the files write these names, or "
                f"label_values={ids} if they write ids."
            )
        if self.label_values:
            if len(self.label_values) != len(self.label_names):
                raise self._fail(
                    f"label_values={short_repr(list(self.label_values))} must give one raw value per label name "
                    f"{list(self.label_names)}."
                )
            keys = [str(v) for v in self.label_values]
            if len(set(keys)) != len(keys) or not all(k.strip() for k in keys):
                raise self._fail(
                    f"label_values={list(self.label_values)} must be distinct and not blank (a blank label means "
                    "'no gold label'); give the raw value each label is written as in the files, in label id order."
                )
            names = list(self.label_names)
            crossed = [(k, i) for i, k in enumerate(keys) if k in names and names.index(k) != i]
            # the names themselves, reordered (a shift such as names '0', '1' for values 1, 2 is meant; and a choice
            # task's names may be its ids 0..n-1)
            if crossed and set(keys) == set(names) and self.kind != "multiple_choice":
                key, index = crossed[0]
                raise self._fail(
                    f"label_values={list(self.label_values)} lists the label names {names} in another order: a file's "
                    f"{key!r} would be read as label {names[index]!r}, every such label swapped in silence; give "
                    "label_values in label_names order (the raw value of each name), or leave them out when the "
                    "files write the names."
                )

    def _check_splits(self) -> None:
        names = [self.train_split, self.validation_split, self.test_split]
        if all(n is None for n in names):
            raise self._fail("train_split, validation_split and test_split are all None; name at least one.")
        odd = [n for n in (*names, *self.extra_dev_splits) if n is not None and not _NAME_PATTERN.fullmatch(n)]
        if odd:  # a split name is also a file stem in the task's folder: '../x' read a file outside it
            raise self._fail(
                f"split name {short_repr(odd[0])} is invalid: use letters, digits, '_', '-' or '.', starting with a "
                "letter or digit (it names the Hub split and the file <data_dir>/<task>/<split>.jsonl.gz)."
            )
        given = [n for n in names if n is not None]
        twice = sorted({n for n in given if given.count(n) > 1})
        if twice:  # from the Hub both roles read the same rows: dev (or test) scores measured on the training rows
            shared = [role for role, n in zip(ROLES, names, strict=True) if n in twice]
            raise self._fail(
                f"the {' and '.join(shared)} splits are both named {short_repr(twice[0])}, so one would be scored on "
                "the other's rows; name each role's own split, or set validation_split=None to carve validation "
                "from train."
            )
        clash = [s for s in self.extra_dev_splits if not s or s in names or s in ROLES]
        if clash or len(set(self.extra_dev_splits)) != len(self.extra_dev_splits):
            raise self._fail(
                f"extra_dev_splits={list(self.extra_dev_splits)} must be distinct split names other than the "
                f"train/validation/test splits {[n for n in names if n]} and the roles {list(ROLES)}."
            )
        bad = [r for r in self.hub_splits if r not in ROLES]
        if bad:
            raise self._fail(f"hub_splits uses unknown split role(s) {bad}; use {list(ROLES)}.")
        bad = [r for r, _ in self.data_files if r not in ROLES and r not in self.extra_dev_splits]
        if bad:  # an extra dev split's file is named by that split
            extra = f" or an extra dev split {list(self.extra_dev_splits)}" if self.extra_dev_splits else ""
            raise self._fail(f"data_files uses unknown split role(s) {bad}; use {list(ROLES)}{extra}.")
        paths = [path for _, path in self.data_files]
        twice = sorted({path for path in paths if paths.count(path) > 1})
        if twice:
            raise self._fail(
                f"data_files names {twice} for more than one split role; each role needs its own file (scores on "
                "the training rows are no dev result). Leave validation out to carve it from train."
            )

    def _check_metrics(self) -> None:
        twice = sorted({m for m in self.metrics if self.metrics.count(m) > 1})
        if twice:  # each is scored and recorded once; a repeat would make the first (selecting) one ambiguous
            raise self._fail(f"metrics={list(self.metrics)} lists {twice} more than once; name each metric once.")
        if self.kind in _SPAN_METRICS:
            self._check_span_metrics()
            return
        known = (
            GENERATION_METRICS
            if self.kind == GENERATION
            else REGRESSION_METRICS
            if self.regression
            else CLASSIFICATION_METRICS
        )
        for metric in self.metrics:
            if metric not in known:
                raise self._fail(
                    f"metric {short_repr(metric)} is unknown for a {short_repr(self.kind)} task; use {list(known)}."
                    f"{suggest(str(metric), known)}"
                )
        if self.kind == GENERATION or self.regression:
            return
        if "f1" in self.metrics and (self.kind == "multiple_choice" or len(self.label_names) != 2):
            raise self._fail("metric 'f1' is binary F1; it needs a 2-class single/pair task. Remove 'f1'.")
        if not 0 <= self.positive_label < len(self.label_names):
            raise self._fail(
                f"positive_label={short_repr(self.positive_label)} is not a label id 0..{len(self.label_names) - 1}."
            )

    def _check_positive_label(self) -> None:
        """positive_label names the class of binary F1, which only a 'single' or 'pair' classification task scores;
        set anywhere else it was accepted and never read (the default, 1, is what every description records)."""
        scored = self.kind in ("single", "pair") and not self.regression
        if scored or self.positive_label == _DEFAULT_POSITIVE_LABEL:
            return
        what = "a regression task" if self.regression else f"a task of kind {short_repr(self.kind)}"
        raise self._fail(
            f"positive_label={short_repr(self.positive_label)} is unused by {what}: it picks the positive class of "
            "binary F1, which only 'single' and 'pair' classification tasks score; remove it."
        )

    def _check_span_metrics(self) -> None:
        known = _SPAN_METRICS[self.kind]
        for metric in self.metrics:
            if metric not in known:
                raise self._fail(
                    f"metric {short_repr(metric)} is unknown for a {short_repr(self.kind)} task; use {list(known)}."
                    f"{suggest(str(metric), known)}"
                )
        entity = [m for m in self.metrics if m != "accuracy"]
        if self.kind == TOKEN_CLASSIFICATION and entity:
            try:  # POS tags ('NOUN') trained a whole run, then failed the first scoring
                chunks(self.label_names)
            except TaskError as err:
                raise self._fail(
                    f"{err} The metrics {entity} score entities, whose tags are 'O' and prefix-type names; for tags "
                    "of another kind (part of speech) give metrics=['accuracy'], which scores each word's tag."
                ) from None

    # -- derived views ----------------------------------------------------------------------------

    @property
    def num_labels(self) -> int:
        """Classifier outputs: classes for single/pair, choices for multiple choice, 1 for a regression score."""
        return 1 if self.regression else len(self.label_names)

    @property
    def is_multiple_choice(self) -> bool:
        return self.kind == "multiple_choice"

    @property
    def is_extractive_qa(self) -> bool:
        """A question over a context, answered by a span of the context (SQuAD): encoded in windows of the
        context (tasks/squad.py), scored by exact match and F1 of the answer text."""
        return self.kind == EXTRACTIVE_QA

    @property
    def is_token_classification(self) -> bool:
        """One tag per word (CoNLL-2003): labels on each word's first sub-token (tasks/tagging.py)."""
        return self.kind == TOKEN_CLASSIFICATION

    @property
    def is_generation(self) -> bool:
        """Instruction data (prompt and answer) that a language model trains on, with no head of ours."""
        return self.kind == GENERATION

    def split_name(self, role: str) -> str | None:
        """The dataset's own name for a split role ("validation" -> "validation_matched" for MNLI)."""
        if role not in ROLES:
            raise self._fail(f"split role {short_repr(role)} is unknown; use {list(ROLES)}.")
        return {"train": self.train_split, "validation": self.validation_split, "test": self.test_split}[role]

    def label_lookup(self) -> dict[str, int]:
        """Raw label (as a string, so 1, "1" from a CSV and "1" from JSON agree) -> label id."""
        values = self.label_values or tuple(range(len(self.label_names)))
        return {str(v): i for i, v in enumerate(values)}

    # -- serialisation ----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with a format version; `TaskSpec.from_dict` reads it back."""
        out: dict[str, Any] = {"format_version": SPEC_FORMAT_VERSION}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in _WRITTEN_WHEN_SET and value == f.default:
                continue  # older tasks' descriptions (and the run configs that record them) stay as they were
            if f.name == "data_files":
                value = dict(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TaskSpec:
        """Build a spec from a plain dict (e.g. parsed JSON/YAML), rejecting unknown keys by name."""
        if not isinstance(data, Mapping):
            raise TaskError(f"a task description must be a mapping of field -> value, got {type(data).__name__}.")
        data = dict(data)
        version = data.pop("format_version", SPEC_FORMAT_VERSION)
        label = data.get("name", "<unnamed>")
        if version != SPEC_FORMAT_VERSION:
            raise TaskError(
                f"task {short_repr(label)}: format_version={short_repr(version)} is not supported; this "
                f"library reads version "
                f"{SPEC_FORMAT_VERSION}."
            )
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = [k for k in data if k not in known]
        if unknown:
            hints = "".join(suggest(str(k), known) for k in unknown)
            raise TaskError(f"task {short_repr(label)}: unknown key(s) {unknown}.{hints} Known keys: {known}.")
        missing = [k for k in ("name", "kind", "text_fields") if k not in data]
        if missing:
            raise TaskError(f"task {short_repr(label)}: required key(s) {missing} are missing.")
        return cls(**data)


def instruction_task(
    name: str,
    data_files: Mapping[str, str] | None = None,
    prompt_field: str = "prompt",
    answer_field: str = "answer",
    **options: Any,
) -> TaskSpec:
    """A generation task of instruction data: each row a prompt and an answer (fields `prompt_field`,
    `answer_field`), from a user's own files (`data_files`: role -> CSV/JSON/JSONL path) or, with `hub_path`, a Hub
    dataset. `options` are other TaskSpec fields (max_length, chat_template, metrics, ...)."""
    fixed = {"kind": "always 'generation'", "text_fields": "from prompt_field", "label_field": "from answer_field"}
    clash = [key for key in options if key in fixed]
    if clash:  # was a TypeError: "TaskSpec() got multiple values for keyword argument 'kind'"
        uses = ", ".join(f"{key}: {fixed[key]}" for key in clash)
        raise TaskError(
            f"instruction_task({short_repr(name)}) sets {clash} itself ({uses}); give the prompt and answer columns "
            "as prompt_field= and answer_field=, or build a TaskSpec of another kind directly."
        )
    known = [
        f.name for f in dataclasses.fields(TaskSpec) if f.name not in fixed and f.name not in ("name", "data_files")
    ]
    unknown = [key for key in options if key not in known]
    if unknown:  # was a TypeError: "TaskSpec.__init__() got an unexpected keyword argument 'chat_templat'"
        hints = "".join(suggest(str(key), known) for key in unknown)
        raise TaskError(
            f"instruction_task({short_repr(name)}) has no option {unknown}.{hints} Its options are prompt_field, "
            f"answer_field, data_files and the TaskSpec fields {known}."
        )
    return TaskSpec(
        name=name,
        kind=GENERATION,
        text_fields=(prompt_field,),
        label_field=answer_field,
        data_files=() if data_files is None else data_files,  # type: ignore[arg-type]  # checked in __post_init__
        **options,
    )
