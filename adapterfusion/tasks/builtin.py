"""The AdapterFusion paper's 16 tasks plus SNLI, described by their HuggingFace Hub field names.

Hub ids are the namespaced ones (the bare "glue", "winogrande", ... redirect to them). Only labelled Hub splits
are listed in `hub_splits`: GLUE/SuperGLUE test labels are hidden, so the paper reports dev-set accuracy.
"""

from __future__ import annotations

from adapterfusion.tasks.spec import TaskSpec

NLI3 = ("entailment", "neutral", "contradiction")
CONLL_TAGS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")  # the Hub's id order


def _glue(name: str, config: str | None, text_fields: tuple[str, ...], labels: tuple[str, ...], **kw) -> TaskSpec:
    """A GLUE-style pair/single task with integer labels 0..n-1 on the Hub."""
    kind = "single" if len(text_fields) == 1 else "pair"
    return TaskSpec(
        name=name,
        kind=kind,
        text_fields=text_fields,
        label_names=labels,
        hub_path=kw.pop("hub_path", "nyu-mll/glue"),
        hub_config=config,
        **kw,
    )


BUILTIN_TASKS: tuple[TaskSpec, ...] = (
    _glue(
        "mnli",
        "mnli",
        ("premise", "hypothesis"),
        NLI3,
        validation_split="validation_matched",
        description="MultiNLI; dev = validation_matched.",
    ),
    _glue(
        "qqp",
        "qqp",
        ("question1", "question2"),
        ("not_duplicate", "duplicate"),
        metrics=("accuracy", "f1"),
        description="Quora Question Pairs; GLUE reports accuracy and F1 of 'duplicate'.",
    ),
    _glue("sst2", "sst2", ("sentence",), ("negative", "positive"), description="Stanford Sentiment Treebank."),
    _glue(
        "mrpc",
        "mrpc",
        ("sentence1", "sentence2"),
        ("not_equivalent", "equivalent"),
        metrics=("accuracy", "f1"),
        description="MS Paraphrase corpus; F1 of 'equivalent' as GLUE reports.",
    ),
    _glue(
        "rte",
        "rte",
        ("sentence1", "sentence2"),
        ("entailment", "not_entailment"),
        description="Recognising Textual Entailment.",
    ),
    _glue(
        "cb",
        "cb",
        ("premise", "hypothesis"),
        ("entailment", "contradiction", "neutral"),
        hub_path="aps/super_glue",
        description="CommitmentBank (SuperGLUE).",
    ),
    _glue(
        "boolq",
        "boolq",
        ("question", "passage"),
        ("false", "true"),
        hub_path="aps/super_glue",
        max_length=256,
        description="BoolQ yes/no questions over a passage (SuperGLUE).",
    ),
    _glue(
        "sick",
        None,
        ("sentence_A", "sentence_B"),
        NLI3,
        hub_path="RobZamp/sick",
        test_split="test",
        hub_splits=("train", "validation", "test"),
        description="SICK entailment labels.",
    ),
    _glue(
        "snli",
        None,
        ("premise", "hypothesis"),
        NLI3,
        hub_path="stanfordnlp/snli",
        test_split="test",
        hub_splits=("train", "validation", "test"),
        drop_unlabelled=True,
        description="Stanford NLI; rows without a gold label (-1) are dropped, as is standard.",
    ),
    _glue(
        "scitail",
        "tsv_format",
        ("premise", "hypothesis"),
        ("entails", "neutral"),
        hub_path="allenai/scitail",
        label_values=("entails", "neutral"),
        test_split="test",
        hub_splits=("train", "validation", "test"),
        description="SciTail; the tsv_format config has premise/hypothesis and 'entails'/'neutral' labels.",
    ),
    _glue(
        "imdb",
        None,
        ("text",),
        ("neg", "pos"),
        hub_path="stanfordnlp/imdb",
        validation_split=None,
        test_split="test",
        hub_splits=("train", "test"),
        max_length=512,
        description="IMDb movie reviews; no validation split, so one is carved out of train.",
    ),
    _glue(
        "ukp_argument",
        None,
        ("topic", "sentence"),
        ("NoArgument", "Argument_for", "Argument_against"),
        hub_path=None,
        test_split="test",
        hub_splits=(),
        description="UKP Sentential Argument Mining ('Argument' in the paper); not on the Hub, give local files.",
    ),
    TaskSpec(
        name="winogrande",
        kind="multiple_choice",
        text_fields=("sentence",),
        choice_fields=("option1", "option2"),
        blank="_",
        label_field="answer",
        label_values=("1", "2"),
        label_names=("option1", "option2"),
        hub_path="allenai/winogrande",
        hub_config="winogrande_l",
        description="WinoGrande (L); each option fills the '_' blank.",
    ),
    TaskSpec(
        name="hellaswag",
        kind="multiple_choice",
        text_fields=("ctx",),
        choice_fields=("endings",),
        label_values=("0", "1", "2", "3"),
        label_names=("ending0", "ending1", "ending2", "ending3"),
        hub_path="Rowan/hellaswag",
        description="HellaSwag sentence completion; 4 endings.",
    ),
    TaskSpec(
        name="social_i_qa",
        kind="multiple_choice",
        text_fields=("context", "question"),
        choice_fields=("answerA", "answerB", "answerC"),
        label_values=("1", "2", "3"),
        label_names=("A", "B", "C"),
        hub_path="allenai/social_i_qa",
        description="SocialIQA.",
    ),
    TaskSpec(
        name="cosmos_qa",
        kind="multiple_choice",
        text_fields=("context", "question"),
        choice_fields=("answer0", "answer1", "answer2", "answer3"),
        label_names=("answer0", "answer1", "answer2", "answer3"),
        hub_path="allenai/cosmos_qa",
        max_length=256,
        description="CosmosQA reading comprehension; 4 answers.",
    ),
    TaskSpec(
        name="commonsense_qa",
        kind="multiple_choice",
        text_fields=("question",),
        choice_fields=("choices.text",),
        label_field="answerKey",
        label_values=("A", "B", "C", "D", "E"),
        label_names=("A", "B", "C", "D", "E"),
        hub_path="tau/commonsense_qa",
        description="CommonsenseQA; 5 answers under choices.text.",
    ),
    # Houlsby et al. 2019's span tasks (issue #25): extractive QA (§3.5) and named-entity tagging.
    TaskSpec(
        name="squad",
        kind="extractive_qa",
        text_fields=("question", "context"),
        label_field="answers",
        max_length=384,
        hub_path="rajpurkar/squad",
        description="SQuAD v1.1 extractive QA; exact match and F1 of the answer text (tasks/squad.py).",
    ),
    TaskSpec(
        name="conll2003",
        kind="token_classification",
        text_fields=("tokens",),
        label_field="ner_tags",
        label_names=CONLL_TAGS,
        hub_path="eriktks/conll2003",
        test_split="test",
        hub_splits=("train", "validation", "test"),
        description="CoNLL-2003 English named entities (IOB2 on the Hub); entity-level F1 as seqeval computes it.",
    ),
)
