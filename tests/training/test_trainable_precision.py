"""Float16 parameters to train (a decoder saved in float16 loads so, and its new pieces take its dtype) are refused
before the first step: AdamW's update underflows in float16 and the loss became NaN at step 2, blamed on the
learning rate or fp16=True. bfloat16 and float32 train."""

from __future__ import annotations

import pytest
import torch

from adapterfusion.training import TrainingError
from adapterfusion.training.hardware import bfloat16_warning, check_trainable_precision


def test_float16_parameters_are_refused_with_how_to_resave_the_model() -> None:
    parameters = [torch.nn.Parameter(torch.zeros(3, 4, dtype=torch.float16)), torch.nn.Parameter(torch.zeros(2))]
    with pytest.raises(TrainingError, match=r"'llama' holds float16 weights .* the 12 parameters") as refused:
        check_trainable_precision(parameters, "llama")
    assert "dtype=torch.float32" in str(refused.value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_float32_and_bfloat16_parameters_train(dtype) -> None:
    check_trainable_precision([torch.nn.Parameter(torch.zeros(3, dtype=dtype))], "llama")


def test_bfloat16_parameters_are_warned_of_and_float32_ones_not() -> None:

    assert bfloat16_warning([torch.nn.Parameter(torch.zeros(3))], "llama") is None
    found = bfloat16_warning([torch.nn.Parameter(torch.zeros(2, 3, dtype=torch.bfloat16))], "llama")
    assert found is not None and "the 6 parameters" in found and "lost to rounding" in found
    # what the warning says: a step of 1e-4 on a weight of 1 (a fusion value's diagonal) rounds away in bfloat16
    one = torch.ones((), dtype=torch.bfloat16)
    assert one - torch.tensor(1e-4, dtype=torch.bfloat16) == one
