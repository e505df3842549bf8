"""The suite's one tolerance table: every numeric comparison of computed values goes through `assert_close`
with the precision the values were computed in (torchtune's habit), never a bound picked to pass on one CPU.

- float64, for exactness claims (a fast path against the literal reference, a site against its hand-written
  equation): the test casts its model and inputs with `.double()` and both sides must agree to rtol 1e-10,
  atol 1e-12. Rounding through a tiny encoder's forward and backward stays near 1e-14, so any summation order,
  kernel or thread count passes with a wide margin, while a real bug (a missing term, a wrong mask) is off by
  far more than 1e-6.
- float32, only where one side is float32 by nature (outputs recorded from AdapterHub, metrics a float32
  training run wrote, a float32 path against a float64 truth): rtol 1e-4, atol 1e-4, about 1000 float32 ulps at
  unit scale. That is the rounding of a whole encoder's forward under any kernel (one CPU gave 1.4e-5 absolute
  where another gave less), not the few ulps a single machine happens to produce.
- bfloat16, only for a kernel whose output is bfloat16 against a float64 truth of the same (bf16-rounded) inputs:
  4 ulps relative.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch


class Tolerance(NamedTuple):
    rtol: float
    atol: float


TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float64: Tolerance(rtol=1e-10, atol=1e-12),
    torch.float32: Tolerance(rtol=1e-4, atol=1e-4),
    # bfloat16 outputs (8 significant bits, one rounding is up to 2^-9 = 0.2 % relative): 4 ulps relative, and an
    # absolute term for values near 0 whose rounding came from larger intermediate sums
    torch.bfloat16: Tolerance(rtol=1.6e-2, atol=1e-2),
}


def tolerance(dtype: torch.dtype) -> Tolerance:
    if dtype not in TOLERANCES:
        raise KeyError(f"no tolerance for {dtype}: add a row to TOLERANCES in tests/tolerances.py")
    return TOLERANCES[dtype]


def assert_close(actual: Any, expected: Any, *, dtype: torch.dtype | None = None, label: str | None = None) -> None:
    """`torch.testing.assert_close` with the table's row for `dtype`, the precision the values were computed in
    (default: `expected`'s dtype; required for Python numbers and numpy arrays, whose own dtype says nothing
    about how they were computed). Dtypes may differ, e.g. a float32 path against a float64 truth. `label`
    prefixes the failure message (which tensor it was)."""
    if dtype is None:
        if not isinstance(expected, torch.Tensor):
            raise TypeError("assert_close: pass dtype= (the precision the values were computed in) for non-tensors")
        dtype = expected.dtype
    rtol, atol = tolerance(dtype)
    msg = None if label is None else (lambda default: f"{label}: {default}")
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, check_dtype=False, msg=msg)
