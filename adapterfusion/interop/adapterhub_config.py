"""Translate AdapterHub `adapters` 1.3.0 configs to ours and back (semantics: docs/adapterhub.md).

Every AdapterHub option either maps onto a field with the same eval-mode forward, or is refused with a
ConfigError that names it; nothing is silently approximated. Options that only act in training (adapter
dropout, stochastic depth, init schemes) are dropped on import and listed in docs/adapterhub.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapterfusion._validation import check_bool, check_int, check_number, short_repr
from adapterfusion.adapters.config import AdapterConfig
from adapterfusion.errors import ConfigError
from adapterfusion.fusion.config import FusionConfig
from adapterfusion.heads.config import (
    MAX_LABELS,
    TORCH_DIMENSION,
    ClassificationHead,
    HeadConfig,
    MultipleChoiceHead,
    QuestionAnsweringHead,
    RegressionHead,
    TokenClassificationHead,
)

# `BnConfig` of adapters 1.3.0 with its defaults: the full key set `save_adapter` writes.
BN_DEFAULTS: dict[str, Any] = {
    "adapter_residual_before_ln": False,
    "cross_adapter": False,
    "dropout": 0.0,
    "factorized_phm_W": True,
    "factorized_phm_rule": False,
    "hypercomplex_nonlinearity": "glorot-uniform",
    "init_weights": "bert",
    "init_weights_seed": None,
    "inv_adapter": None,
    "inv_adapter_reduction_factor": None,
    "is_parallel": False,
    "learn_phm": True,
    "leave_out": [],
    "ln_after": False,
    "ln_before": False,
    "mh_adapter": False,
    "non_linearity": "relu",
    "original_ln_after": True,
    "original_ln_before": False,
    "output_adapter": True,
    "phm_bias": True,
    "phm_c_init": "normal",
    "phm_dim": 4,
    "phm_init_range": 0.0001,
    "phm_layer": False,
    "phm_rank": 1,
    "reduction_factor": 16,
    "residual_before_ln": True,
    "scaling": 1.0,
    "shared_W_phm": False,
    "shared_phm_rule": True,
    "stochastic_depth": 0.0,
    "use_gating": False,
}
# BnConfig's fields without a default (adapters 1.3.0): a config lacking one is not an AdapterHub adapter's.
BN_REQUIRED = ("mh_adapter", "output_adapter", "reduction_factor", "non_linearity")
# Our positions and the BnConfig flags that put an adapter there ('cross': in an encoder-decoder's decoder layers).
_POSITION_FLAGS = (("attention", "mh_adapter"), ("cross", "cross_adapter"), ("output", "output_adapter"))
# Options whose non-default value changes the forward in a way we cannot express.
_REFUSED = {
    "use_gating": "a learned sigmoid gate on the adapter output",
    "phm_layer": "PHM (hypercomplex) down/up projections",
    "is_parallel": "a parallel adapter (added to the sub-layer input instead of stacked on its output)",
    "inv_adapter": "invertible embedding adapters",
}
# adapters resolves names with transformers' get_activation(name.lower()), except "leakyrelu".
_NON_LINEARITY_IN = {
    "relu": "relu",
    "tanh": "tanh",
    "gelu": "gelu",
    "gelu_python": "gelu",
    "swish": "swish",
    "silu": "silu",
    "leakyrelu": "leaky_relu",
}
_NON_LINEARITY_OUT = {"leaky_relu": "leakyrelu"}
_INIT_IN = {"bert": "bert", "houlsby": "houlsby", "mam_adapter": "zero_up"}
_INIT_OUT = {ours: theirs for theirs, ours in _INIT_IN.items()}
# The options each head class of adapters 1.3.0 takes (its __init__'s keywords) and their defaults; label2id and
# id2label are read by add_prediction_head_from_config. Any other key is a TypeError there, so it is refused, not
# dropped unread (a misspelt "activation_functon": "relu" would build the default tanh head around relu weights).
_SPAN_HEAD_OPTIONS = {"num_labels": 2, "layers": 1, "activation_function": "tanh", "dropout_prob": None}
_HEAD_OPTIONS: dict[str, dict[str, Any]] = {
    "classification": {**_SPAN_HEAD_OPTIONS, "layers": 2, "use_pooler": False, "bias": True},
    "multiple_choice": {
        "num_choices": 2,
        "layers": 2,
        "activation_function": "tanh",
        "use_pooler": False,
        "dropout_prob": None,
    },
    "question_answering": _SPAN_HEAD_OPTIONS,
    "tagging": _SPAN_HEAD_OPTIONS,
}
_HEAD_LABEL_KEYS = ("head_type", "label2id", "id2label")
_LM_HEAD_TYPES = ("causal_lm", "seq2seq_lm")
_LM_HEAD_HINT = (
    ". A language-model head is not loaded as a head: wrap the model with its own LM head (AutoModelForCausalLM or "
    "AutoModelForSeq2SeqLM), which runs when no head is active, and load only the adapter; AdapterHub's LM head "
    "computes the same where its weights are tied to the input embeddings and it has no trained bias"
)
_HEAD_ACTIVATION_IN = {"tanh": "tanh", "relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}

FUSION_DEFAULTS: dict[str, Any] = {
    "key": True,
    "query": True,
    "value": False,
    "query_before_ln": False,
    "regularization": False,
    "residual_before": False,
    "temperature": False,
    "value_before_softmax": True,
    "value_initialized": False,
    "dropout_prob": None,
}
# BertFusion hard-codes its temperature: T starts at 50 and drops by 50/1000 per forward call, down to 1.
_T_START, _T_STEPS = 50.0, 1000
_REGULARIZATION_WEIGHT = 0.01


def _flag(config: Mapping[str, Any], option: str) -> bool:
    """An on/off option: true, false or null (off); anything else is refused rather than read by its truthiness."""
    value = config[option]
    return False if value is None else check_bool(value, f"AdapterHub option {option}")


def _is_off(value: Any) -> bool:
    return value is None or value is False or value == 0 or value == [] or value == {}


_BROKEN = "adapters fails on it too, so the file is damaged or was edited by hand"


def _check_probability(value: Any, field: str, what: str) -> None:
    """A dropout probability adapters builds nn.Dropout of, which takes a number from 0 to 1 (`what` says so)."""
    if not 0 <= check_number(value, field, expected=what) <= 1:
        raise ConfigError(f"{field}={value!r} must be {what}; {_BROKEN}")


def _check_dropped_options(c: Mapping[str, Any]) -> None:
    """Refuse a value of an option we drop on import (it acts in training or at init only) that adapters itself fails
    on when it builds the adapter, so that we accept no file that adapters cannot load: nn.Dropout(p=dropout) takes
    a number from 0 to 1, `stochastic_depth > 0.0` a number (and DropPath one of at most 1), init_weights one of its
    three schemes and fix_seed(init_weights_seed) a 32-bit integer or null."""
    _check_probability(c["dropout"], "AdapterHub option dropout", "a number from 0 to 1 (the adapter's dropout)")
    depth = check_number(c["stochastic_depth"], "AdapterHub option stochastic_depth", expected="a number")
    if depth > 1:
        raise ConfigError(f"AdapterHub option stochastic_depth={depth!r} must be a probability of at most 1; {_BROKEN}")
    if not isinstance(c["init_weights"], str) or c["init_weights"] not in _INIT_IN:
        raise ConfigError(
            f"AdapterHub option init_weights={short_repr(c['init_weights'])} is none of adapters' init schemes "
            f"({', '.join(_INIT_IN)}); {_BROKEN}"
        )
    if c["init_weights_seed"] is not None:
        check_int(c["init_weights_seed"], "AdapterHub option init_weights_seed", minimum=0, maximum=2**32 - 1)


# ---- adapters ----------------------------------------------------------------------------------------
def adapter_config_from_adapterhub(config: Mapping[str, Any]) -> AdapterConfig:
    """Our AdapterConfig for a `BnConfig` dict (the "config" object of adapter_config.json)."""
    architecture = config.get("architecture")
    if architecture not in (None, "bottleneck"):
        raise ConfigError(
            f"AdapterHub adapter architecture={architecture!r} is not supported; only bottleneck adapters "
            "(seq_bn/pfeiffer, double_seq_bn/houlsby and their variants) can be imported"
        )
    known = set(BN_DEFAULTS) | {"architecture"}
    unknown = sorted(k for k in config if k not in known and not _is_off(config[k]))
    if unknown:
        raise ConfigError(f"AdapterHub adapter option(s) {unknown} are unknown to this importer; cannot import")
    missing = [option for option in BN_REQUIRED if option not in config]
    if missing:  # a default would change the adapter silently (relu for a swish adapter)
        raise ConfigError(
            f"AdapterHub adapter config lacks {', '.join(missing)}, which BnConfig requires (adapters does not load it "
            "either); restore them from the source of this adapter, or export it again"
        )
    c = {**BN_DEFAULTS, **config}
    for option, what in _REFUSED.items():
        if not _is_off(c[option]):
            raise ConfigError(f"AdapterHub option {option}={c[option]!r} ({what}) is not supported; cannot import")
    if isinstance(c["scaling"], str):
        raise ConfigError(
            f"AdapterHub option scaling={c['scaling']!r} (a learned scaling parameter) is not supported; "
            "only a constant scaling can be imported"
        )
    if isinstance(c["scaling"], int) and not isinstance(c["scaling"], bool):  # adapters: isinstance(scaling, float)
        raise ConfigError(
            f"AdapterHub option scaling={c['scaling']} is written as a whole number, which adapters refuses ('Unknown "
            f"scaling type'): it takes a constant scaling only as a float; write {float(c['scaling'])!r}"
        )
    _check_dropped_options(c)
    if c["leave_out"] is None:  # adapters asks `layer_idx not in leave_out` of every layer
        raise ConfigError(
            "AdapterHub option leave_out=None: expected a list of layer indices ([] for none); adapters fails on null"
        )
    positions = tuple(position for position, flag in _POSITION_FLAGS if _flag(c, flag))
    if not positions:
        raise ConfigError(
            "AdapterHub adapter has mh_adapter=False, cross_adapter=False and output_adapter=False: it sits nowhere"
        )
    name = c["non_linearity"]
    if not isinstance(name, str):
        raise ConfigError(
            f"AdapterHub option non_linearity={short_repr(name)} has type {type(name).__name__}; expected the name "
            f"of an activation, one of {', '.join(_NON_LINEARITY_IN)}"
        )
    non_linearity = _NON_LINEARITY_IN.get(name.lower())
    if non_linearity is None:
        raise ConfigError(
            f"AdapterHub non_linearity={name!r} is not supported; importable: {', '.join(_NON_LINEARITY_IN)}"
        )
    original_ln_before, ln_after = _flag(c, "original_ln_before"), _flag(c, "ln_after")
    residual = False if c["residual_before_ln"] is None else c["residual_before_ln"]
    if residual not in (True, False, "post_add"):
        raise ConfigError(f"AdapterHub residual_before_ln={residual!r} is not supported (True, False, 'post_add')")
    if residual == "post_add" and not original_ln_before:
        raise ConfigError(
            "AdapterHub residual_before_ln='post_add' with original_ln_before=False cannot run in adapters "
            "itself (the residual is never set); cannot import"
        )
    # adapters orders the skip connection and ln_after with its own flag; ours derives the order from
    # residual_before_ln unless skip_before_ln_after says otherwise, so set that only where they differ.
    skip_first = _flag(c, "adapter_residual_before_ln")
    skip_before_ln_after = None if skip_first == (residual is not False) else skip_first
    reduction_factor = c["reduction_factor"]
    if isinstance(reduction_factor, Mapping):
        reduction_factor = {str(k): v for k, v in reduction_factor.items()}
    return AdapterConfig(
        reduction_factor=reduction_factor,
        non_linearity=non_linearity,
        positions=positions,
        original_ln_before=original_ln_before,
        original_ln_after=_flag(c, "original_ln_after"),
        residual_before_ln=residual,
        ln_before=_flag(c, "ln_before"),
        ln_after=ln_after,
        skip_before_ln_after=skip_before_ln_after,
        scaling=c["scaling"],
        init=_INIT_IN[c["init_weights"]],  # for a fresh init only: the weights are loaded
        train_layer_norm=False,  # adapters never trains a private copy of the pretrained LayerNorm
        leave_out=c["leave_out"],
    )


def adapter_config_to_adapterhub(config: AdapterConfig) -> dict[str, Any]:
    """The full `BnConfig` dict adapters 1.3.0 writes, with the same eval-mode forward as `config`."""
    if config.residual_before_ln == "post_add" and not config.original_ln_before:
        raise ConfigError(
            "residual_before_ln='post_add' with original_ln_before=False cannot be exported: adapters 1.3.0 "
            "fails on that combination"
        )
    reduction_factor = config.reduction_factor
    return {
        **BN_DEFAULTS,
        "adapter_residual_before_ln": config.skip_first,
        "init_weights": _INIT_OUT[config.init],
        "leave_out": list(config.leave_out),
        "ln_after": config.ln_after,
        "ln_before": config.ln_before,
        **{flag: position in config.positions for position, flag in _POSITION_FLAGS},
        "non_linearity": _NON_LINEARITY_OUT.get(config.non_linearity, config.non_linearity),
        "original_ln_after": config.original_ln_after,
        "original_ln_before": config.original_ln_before,
        "reduction_factor": dict(reduction_factor) if isinstance(reduction_factor, dict) else reduction_factor,
        "residual_before_ln": config.residual_before_ln,
        "scaling": float(config.scaling),  # adapters takes a constant scaling only as a float: 2 fails there
    }


# ---- fusion ------------------------------------------------------------------------------------------
def fusion_config_from_adapterhub(config: Mapping[str, Any], attention_dropout: float = 0.0) -> FusionConfig:
    """Our FusionConfig for an AdapterFusion config dict. `attention_dropout` is the encoder's
    attention_probs_dropout_prob, which adapters uses for the score dropout when dropout_prob is unset or 0."""
    unknown = sorted(k for k in config if k not in FUSION_DEFAULTS and not _is_off(config[k]))
    if unknown:
        raise ConfigError(f"AdapterHub fusion option(s) {unknown} are unknown to this importer; cannot import")
    c = {**FUSION_DEFAULTS, **config}
    if c["dropout_prob"] is not None:  # adapters builds nn.Dropout(dropout_prob or the attention dropout)
        _check_probability(
            c["dropout_prob"],
            "AdapterHub fusion option dropout_prob",
            "a number from 0 to 1, or null for the model's attention dropout",
        )
    return FusionConfig(
        query=_flag(c, "query"),
        key=_flag(c, "key"),
        value=_flag(c, "value"),
        query_before_ln=_flag(c, "query_before_ln"),
        residual_before=_flag(c, "residual_before"),
        value_before_softmax=_flag(c, "value_before_softmax"),
        regularization=_flag(c, "regularization"),
        regularization_weight=_REGULARIZATION_WEIGHT,
        temperature=_flag(c, "temperature"),
        temperature_start=_T_START,
        temperature_steps=_T_STEPS,
        score_dropout=c["dropout_prob"] or attention_dropout or 0.0,
    )


def fusion_config_to_adapterhub(config: FusionConfig) -> dict[str, Any]:
    if config.is_scalearn:  # its scales would be written as a Q/K/V fusion that AdapterHub then fills at random
        raise ConfigError(
            "a ScaLearn fusion (kind='scalearn') cannot be exported to AdapterHub's format: adapters has no "
            "ScaLearn; save it in ours (save_fusion / save_pretrained)"
        )
    if config.query_norm:
        raise ConfigError(
            "a fusion with query_norm=True cannot be exported to AdapterHub's format: adapters projects the raw "
            "query, so it would compute other weights; save it in ours (save_fusion / save_pretrained)"
        )
    if config.temperature and (config.temperature_start != _T_START or config.temperature_steps != _T_STEPS):
        raise ConfigError(
            f"fusion temperature_start={config.temperature_start}, temperature_steps={config.temperature_steps} "
            f"cannot be exported: adapters hard-codes {_T_START:g} and {_T_STEPS}"
        )
    if config.value and config.regularization and config.regularization_weight != _REGULARIZATION_WEIGHT:
        raise ConfigError(
            f"fusion regularization_weight={config.regularization_weight} cannot be exported: adapters hard-codes "
            f"{_REGULARIZATION_WEIGHT}"
        )
    return {
        "dropout_prob": config.score_dropout or None,  # None: adapters falls back to the attention dropout
        "key": config.key,
        "query": config.query,
        "query_before_ln": config.query_before_ln,
        "regularization": config.regularization,
        "residual_before": config.residual_before,
        "temperature": config.temperature,
        "value": config.value,
        "value_before_softmax": config.value_before_softmax,
        "value_initialized": config.value,
    }


# ---- values adapters reads from the model's config ----------------------------------------------------
# adapters reads these values by BERT's config names, aliased per model type where the model's config spells them
# otherwise (the aliased types among those we translate); a value found under neither name counts as 0.0 there.
_ADAPTERHUB_CONFIG_NAMES: dict[str, dict[str, str]] = {
    "bart": {"hidden_dropout_prob": "dropout", "attention_probs_dropout_prob": "attention_dropout"},
    "distilbert": {
        "hidden_dropout_prob": "dropout",
        "attention_probs_dropout_prob": "attention_dropout",
        "classifier_dropout": "seq_classif_dropout",
    },
    "gpt2": {"hidden_dropout_prob": "resid_pdrop", "attention_probs_dropout_prob": "attn_pdrop"},
    "mbart": {"hidden_dropout_prob": "dropout", "attention_probs_dropout_prob": "attention_dropout"},
    # Not "mt5": adapters aliases T5's names for "t5" only, so on mT5 it too reads no dropout (0.0).
    "t5": {"hidden_dropout_prob": "dropout_rate", "attention_probs_dropout_prob": "dropout_rate"},
}


def adapterhub_config_value(model_config: Any, model_type: str, name: str) -> float | None:
    """The value adapters reads as `name` (BERT's config name) from a `model_type` model's config; None if none."""
    value = getattr(model_config, _ADAPTERHUB_CONFIG_NAMES.get(model_type, {}).get(name, name), None)
    return None if value is None else float(value)


def adapterhub_head_dropout(model_config: Any, model_type: str) -> float:
    """The dropout adapters gives a head saved with dropout_prob None: the model's classifier dropout, else its
    hidden dropout, else 0.0."""
    for name in ("classifier_dropout", "hidden_dropout_prob"):
        value = adapterhub_config_value(model_config, model_type, name)
        if value is not None:
            return value
    return 0.0


# ---- heads -------------------------------------------------------------------------------------------
def adapterhub_pooling(pools_last_token: bool) -> str:
    """The token AdapterHub's sequence heads read: token 0 on encoders; on decoders (GPT2/Llama/MistralAdapterModel,
    classification heads only) the last non-padding token, and on encoder-decoders (Bart/T5AdapterModel) the decoder's
    state at the last end-of-sequence token, which is the last non-padding one for inputs that end with it. Our
    `last` pooling reads that position under left padding too, where adapters' count of non-pad tokens points
    elsewhere (docs/adapterhub-decoders.md)."""
    return "last" if pools_last_token else "cls"


def head_config_from_adapterhub(config: Mapping[str, Any], default_dropout: float, pooling: str = "cls") -> HeadConfig:
    """Our head config for head_config.json's "config". `default_dropout`: what adapters uses when dropout_prob is
    None (adapterhub_head_dropout); `pooling`: the token adapters' heads read on this model (adapterhub_pooling)."""
    head_type = config.get("head_type")
    if not isinstance(head_type, str) or head_type not in _HEAD_OPTIONS:
        raise ConfigError(
            f"AdapterHub head_type={short_repr(head_type)} is not supported; importable: 'classification' "
            "(num_labels=1 becomes a RegressionHead), 'multiple_choice', 'question_answering' and 'tagging'"
            + (_LM_HEAD_HINT if head_type in _LM_HEAD_TYPES else "")
        )
    options = _HEAD_OPTIONS[head_type]
    unknown = sorted(str(key) for key in config if key not in options and key not in _HEAD_LABEL_KEYS)
    if unknown:
        raise ConfigError(
            f"AdapterHub {head_type} head option(s) {unknown} are not options of that head (adapters 1.3.0's takes "
            f"{', '.join(sorted(options))}, label2id and id2label, and fails on any other), so the file is damaged "
            "or was edited by hand: correct the spelling or remove them"
        )
    config = {**options, **config}  # adapters' defaults for what the file leaves out (tagging: one layer)
    # adapters reads use_pooler and bias by their truth value (nn.Linear(..., bias=bias)): null is off there
    use_pooler = config.get("use_pooler")
    if use_pooler is not None and check_bool(use_pooler, "AdapterHub head option use_pooler"):
        raise ConfigError(
            "AdapterHub head option use_pooler=True is not supported (a pooler layer; only use_pooler=false can be "
            "imported): our heads read the hidden state directly"
        )
    bias = config.get("bias", True)  # multiple-choice and span heads have no bias option: their layers have one
    if bias is None or not check_bool(bias, "AdapterHub head option bias"):
        raise ConfigError(
            f"AdapterHub head option bias={bias!r} (an output layer without a bias, as adapters builds it) is not "
            "supported: our output layer has a bias"
        )
    label2id = config.get("label2id")
    if label2id is not None and not isinstance(label2id, Mapping):  # adapters calls label2id.items()
        raise ConfigError(
            f"AdapterHub head option label2id={short_repr(label2id)} has type {type(label2id).__name__}; expected "
            "an object of label -> id, or null; adapters fails on it too"
        )
    layers = check_int(config["layers"], "AdapterHub head layers", minimum=1)
    activation = config["activation_function"]  # None: no activation between its layers
    if layers == 1 and activation is None:  # one layer has no activation to apply
        activation = "tanh"
    if not isinstance(activation, str) or (layers > 1 and activation.lower() not in _HEAD_ACTIVATION_IN):
        raise ConfigError(
            f"AdapterHub head activation_function={activation!r} is not supported; "
            f"importable: {', '.join(_HEAD_ACTIVATION_IN)}"
        )
    dropout = config.get("dropout_prob")
    settings: dict[str, Any] = dict(
        layers=layers,
        activation=_HEAD_ACTIVATION_IN.get(activation.lower(), "tanh"),
        dropout=default_dropout if dropout is None else dropout,
    )
    if head_type == "multiple_choice":
        choices = check_int(
            config["num_choices"],
            "AdapterHub head num_choices",
            minimum=1,
            maximum=MAX_LABELS,
            why_maximum=TORCH_DIMENSION,
        )
        return MultipleChoiceHead(num_labels=choices, pooling=pooling, **settings)
    num_labels = check_int(
        config["num_labels"], "AdapterHub head num_labels", minimum=1, maximum=MAX_LABELS, why_maximum=TORCH_DIMENSION
    )
    if head_type == "question_answering":  # its two outputs are start and end; label2id names nothing
        if num_labels != 2:
            raise ConfigError(f"AdapterHub question_answering head num_labels={num_labels}: only 2 (start, end)")
        return QuestionAnsweringHead(**settings)
    labels = _labels(label2id, num_labels)
    if head_type == "tagging":
        return TokenClassificationHead(num_labels=num_labels, labels=labels, **settings)
    if num_labels == 1:
        return RegressionHead(pooling=pooling, **settings)
    return ClassificationHead(num_labels=num_labels, labels=labels, pooling=pooling, **settings)


def _labels(label2id: Any, num_labels: int) -> tuple[str, ...] | None:
    if (
        not isinstance(label2id, Mapping)
        or len(label2id) != num_labels  # first: a num_labels of 10**9 must not build the range it is compared with
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in label2id.values())
        or sorted(label2id.values()) != list(range(num_labels))
        or num_labels < 2
    ):
        return None
    labels = tuple(label for label, _ in sorted(label2id.items(), key=lambda item: item[1]))
    # the names transformers gives a head that was given none (adapters writes them for such a head): none
    return None if labels == tuple(f"LABEL_{i}" for i in range(num_labels)) else labels


def head_config_to_adapterhub(config: HeadConfig, pooling: str = "cls") -> dict[str, Any]:
    """head_config.json's "config" for our head; `pooling`: the token adapters' heads read on this model
    (adapterhub_pooling), which the head must read too, as adapters has no option for it."""
    if config.per_token:  # question answering, tagging: their heads take no use_pooler or bias option
        return _span_head_config_to_adapterhub(config)
    if config.kind == "multiple_choice" and pooling == "last":
        raise ConfigError(
            "a multiple-choice head cannot be exported for a decoder or encoder-decoder: AdapterHub's models for "
            "them (GPT2/Llama/Mistral/Bart/T5AdapterModel) have no multiple-choice head; their classification heads "
            "are supported"
        )
    if config.pooling != pooling:
        reads = "the last non-padding token" if pooling == "last" else "token 0"
        raise ConfigError(
            f"head pooling={config.pooling!r} cannot be exported: on this model AdapterHub's heads read {reads} "
            f"(pooling={pooling!r}), and adapters has no option for another; train the head with pooling={pooling!r}"
        )
    common = {
        "activation_function": config.activation,
        "dropout_prob": config.dropout,
        "layers": config.layers,
        "use_pooler": False,
    }
    if config.kind == "multiple_choice":
        return {**common, "head_type": "multiple_choice", "num_choices": config.num_labels, "label2id": None}
    labels = config.labels or tuple(f"LABEL_{i}" for i in range(config.num_labels))
    return {
        **common,
        "bias": True,
        "head_type": "classification",
        "num_labels": config.num_labels,
        "label2id": {label: i for i, label in enumerate(labels)},
    }


def _span_head_config_to_adapterhub(config: HeadConfig) -> dict[str, Any]:
    """AdapterHub's QuestionAnsweringHead / TaggingHead config: the same layer stack on every token."""
    head_type = "question_answering" if config.kind == "question_answering" else "tagging"
    labels = config.labels or tuple(f"LABEL_{i}" for i in range(config.num_labels))
    return {
        "activation_function": config.activation,
        "dropout_prob": config.dropout,
        "head_type": head_type,
        "label2id": {label: i for i, label in enumerate(labels)},
        "layers": config.layers,
        "num_labels": config.num_labels,
    }
