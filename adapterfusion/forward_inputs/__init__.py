"""What a model call accepts: the one check of the inputs of `AdaptedModel.forward`, `forward_parallel` and
`generate`.

transformers ignores keywords its forward does not name, accepts an attention_mask of another shape, and fails deep
in torch on a list, a float id, an empty batch, a sequence longer than its positions or an id outside its
vocabulary. `check_call` refuses each of these with a ConfigError naming the value and the fix, and says what to
hand the encoder: which module runs, its inputs (multiple-choice inputs flattened; labels included when the wrapped
HF task model computes the loss itself) and the choice count. `check_generate_inputs` holds generate()'s inputs to
the same rules before any step runs, and `check_generate_settings` its numeric settings (num_beams=0, top_p=2) to
their ranges.

It runs on every forward, training included, so it reads only shapes, dtypes and devices, except for value checks
(id ranges, empty mask rows), which need the values: those run on CPU tensors only, where they cost microseconds.
On an accelerator they would wait for the device (a sync per step), so there they are skipped and the device
reports a bad id itself; class ids in labels are the exception (labels.py).

The modules, each importing only those listed before it:
- `keywords`: the keywords a forward takes, and the flags that must be bools;
- `limits`: the tokens, positions and token types the model's config allows, read once per model;
- `tokens`: input_ids / inputs_embeds and the per-token inputs (type, dtype, shape, device, id ranges, masks) and
  logits_to_keep;
- `encoder_decoder`: an encoder-decoder's encoder_outputs and decoder inputs, and whether a call has any;
- `cache`: past_key_values, made by this model (its layers, key/value heads and head size) for these rows, and how
  many tokens they hold;
- `seq2seq_head`: what a head of ours on an encoder-decoder runs, its decoder on the input shifted right;
- `labels`: a head's labels, or those of the wrapped HF task model's own loss;
- `task_pooling`: what a wrapped sequence classifier needs to find the token it pools (a decoder's pad_token_id,
  an encoder-decoder's end tokens);
- `call`: `check_call` and the `ForwardCall` it returns;
- `generate`: `check_generate_inputs`;
- `generate_callbacks`: the callables and objects generate() calls into at each step (logits processors, stopping
  criteria, prefix_allowed_tokens_fn, a streamer, an assistant model, stop strings' tokenizer): `check_callbacks`
  before the first step, and `checked_callbacks`, the user's callables wrapped so that an answer transformers cannot
  use is a ConfigError naming the callable;
- `generate_settings`: `check_generate_settings`, generate()'s numeric settings (max_new_tokens, num_beams, top_p,
  ...) checked, numpy and torch scalars among them read as the Python numbers they hold; `check_token_ids`, its
  token-id settings (pad, eos, forced and suppressed tokens, bad words, sequence bias) inside the vocabulary;
  `check_early_exit`, assistant_early_exit only on models whose layers stop where transformers' draft sets them;
  `check_generate_arguments`, the callbacks (generate_callbacks) and negative_prompt_ids.
"""

from adapterfusion.forward_inputs.call import ForwardCall, check_call
from adapterfusion.forward_inputs.generate import GENERATE_INPUTS, check_generate_inputs
from adapterfusion.forward_inputs.generate_settings import (
    GenerateSettings,
    check_early_exit,
    check_generate_arguments,
    check_generate_settings,
    check_token_ids,
    read_setting,
)
from adapterfusion.forward_inputs.labels import check_head_labels

__all__ = [
    "GENERATE_INPUTS",
    "ForwardCall",
    "GenerateSettings",
    "check_call",
    "check_early_exit",
    "check_generate_arguments",
    "check_generate_inputs",
    "check_generate_settings",
    "check_token_ids",
    "check_head_labels",
    "read_setting",
]
