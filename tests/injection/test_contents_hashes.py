"""contents_hashes: what tells inference_cache() that a kept fold's weights were written through `p.data` (which
changes neither a tensor's identity nor its version). Each kind of write a user makes must move the hash of the
tensor written, and only of that one, whatever else the list holds: the hash a fold was made with (its site's
tensors) is compared with the one taken on a later block's entry (every kept tensor at once)."""

from __future__ import annotations

import pytest
import torch

from adapterfusion.injection import runtime as runtime_module
from adapterfusion.injection.runtime import HASH_CHUNK, contents_hashes

# Where each tensor is hashed: a CPU one at a time (in float64), a GPU's in chunks of integer sums of their bits; the
# batched path is tried on the CPU too, and on a GPU where there is one (run there: `-k cuda`).
PATHS = [
    "cpu",
    "cpu-batched",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")),
]


@pytest.fixture(params=PATHS)
def device(request, monkeypatch) -> torch.device:
    if request.param == "cpu-batched":
        monkeypatch.setattr(runtime_module, "HASHED_ONE_BY_ONE", set())
    return torch.device(request.param.split("-")[0])


def _weights(device: torch.device, dtype: torch.dtype = torch.float32, seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    shapes = [(64, 48), (48,), (48, 64), (7,), ()]
    return [torch.randn(shape, generator=generator).to(device, dtype) for shape in shapes]


def _moves(write, device: torch.device, dtype: torch.dtype = torch.float32, index: int = 0) -> None:
    """`write` on the list's tensor `index` moves its hash, and leaves the others'."""
    weights = _weights(device, dtype)
    before = contents_hashes(weights)
    write(weights[index])
    after = contents_hashes(weights)
    assert after[index] != before[index]
    assert [a for i, a in enumerate(after) if i != index] == [b for i, b in enumerate(before) if i != index]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_each_kind_of_write_through_data_moves_the_hash(dtype: torch.dtype, device: torch.device) -> None:
    _moves(lambda w: w.data.mul_(-1.0), device, dtype)  # a sign flip keeps every absolute value
    _moves(lambda w: w.data.abs_(), device, dtype)
    _moves(lambda w: w.data.copy_(w.data.flip(0)), device, dtype)  # a permutation keeps every value
    _moves(lambda w: w.data.mul_(0.999).add_(0.001), device, dtype)  # an EMA step
    _moves(lambda w: w.data.add_(1.0), device, dtype, index=4)  # a 0-d tensor


def test_the_smallest_change_of_one_value_in_a_large_tensor_is_seen(device: torch.device) -> None:
    """One unit in the last place of one float32 value among a million: a sum in float32 would round it away."""
    weight = torch.full((1000, 1000), 0.37, device=device)
    before = contents_hashes([weight])
    weight.data[500, 500] = torch.nextafter(weight[500, 500], torch.tensor(1.0, device=device))
    assert contents_hashes([weight]) != before
    double = torch.full((1000, 1000), 0.37, dtype=torch.float64, device=device)
    before = contents_hashes([double])
    double.data[3, 3] += 1e-9  # about 30 units in the last place of the float64 sum of a million values
    assert contents_hashes([double]) != before


def test_a_tensors_hash_is_its_own_whatever_else_the_list_holds(device: torch.device) -> None:
    """A fold's hash (its site's tensors) is compared with the one its tensors get among all kept ones on entry."""
    odd = [torch.randn(5, 5).t(), torch.randn(3, dtype=torch.complex64), torch.arange(4)]  # strided, complex, integer
    weights = [*_weights(device), *_weights(device, torch.float64, seed=1), *(w.to(device) for w in odd)]
    together = contents_hashes(weights)
    assert together == tuple(contents_hashes([w])[0] for w in weights)
    assert together == tuple(reversed(contents_hashes(list(reversed(weights)))))
    assert len(set(together)) == len(together)


def test_a_list_larger_than_one_chunk_and_an_empty_list(monkeypatch, device: torch.device) -> None:
    weights = _weights(device)
    expected = contents_hashes(weights)
    monkeypatch.setattr(runtime_module, "HASH_CHUNK", 64 * 48 + 10)  # the products' memory, bounded per chunk
    assert contents_hashes(weights) == expected
    assert contents_hashes([]) == ()
    assert HASH_CHUNK >= 1 << 20


@pytest.mark.parametrize(
    "batched",
    [
        "cpu",
        pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")),
    ],
)
def test_hashing_many_tensors_in_one_chunk_costs_the_operations_of_a_few(monkeypatch, batched: str) -> None:
    """On a GPU each operation costs the host more than the device's work: a fused decoder's ~1,100 kept tensors
    must not cost an operation called from Python each (nor a tensor returned to Python each, as _foreach forms do)
    on every block's entry. Counted where the batched path runs: a CPU made to take it, and a GPU."""
    from torch.profiler import ProfilerActivity, profile

    monkeypatch.setattr(runtime_module, "HASHED_ONE_BY_ONE", set())

    def called(count: int) -> list[str]:
        weights = [torch.randn(36, 57, device=batched) for _ in range(count)] + [torch.randn(576, device=batched)] * 2
        contents_hashes(weights)
        with profile(activities=[ProfilerActivity.CPU]) as trace:
            contents_hashes(weights)
        return [event.name for event in trace.events() if event.name.startswith("aten::") and event.cpu_parent is None]

    few, many = called(3), called(300)
    assert many == few
    assert len(many) < 40


def test_a_device_without_the_batched_operators_is_hashed_one_tensor_at_a_time(monkeypatch) -> None:
    """A backend that lacks an operator of the batched path (MPS: int64 cumsum on older systems, float64) falls back
    to the host's way, with the host's hashes."""
    weights = _weights(torch.device("cpu"))
    expected = contents_hashes(weights)
    monkeypatch.setattr(runtime_module, "HASHED_ONE_BY_ONE", set())

    def missing(*args, **kwargs):
        raise NotImplementedError("no flatten_dense_tensors here")

    monkeypatch.setattr(runtime_module, "_flatten_dense_tensors", missing)
    assert contents_hashes(weights) == expected
