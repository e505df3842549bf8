"""The library on a CUDA device: the same numbers as on the CPU, and the fast paths that matter there.

Skipped where torch sees no CUDA device (CI has none): run on a GPU machine with `python -m pytest tests/test_cuda.py`.
`AF_TEST_CUDA_DEVICE=cpu` runs the same tests with the CPU standing in for the GPU, to check their logic without one.
The rest of the suite also runs there unchanged, training on the GPU (`hardware.training_device` picks it).
Exactness claims are in float64 on both devices, so the table's float64 row applies: cuBLAS and the CPU's BLAS sum
in different orders, which moves float64 results by ~1e-15, far inside it.
"""

from __future__ import annotations

import os

import pytest
import torch

import adapterfusion as af
from tiny_decoders import tiny_decoder, tiny_decoder_inputs
from tiny_models import tiny_encoder, tiny_inputs
from tolerances import assert_close

STAND_IN = os.environ.get("AF_TEST_CUDA_DEVICE")  # e.g. "cpu": check these tests' logic on a machine without a GPU
pytestmark = pytest.mark.skipif(not torch.cuda.is_available() and STAND_IN is None, reason="needs a CUDA device")
CUDA = torch.device(STAND_IN or "cuda")


def _fused(model: af.AdaptedModel, preset: str, names: tuple[str, ...] = ("a", "b", "c")) -> af.AdaptedModel:
    for name in names:
        model.add_adapter(name, af.AdapterConfig.from_name(preset, reduction_factor=4))
        for parameter in model.adapter_parameters(name):
            torch.nn.init.normal_(parameter, std=0.2)
    model.add_fusion("f", list(names), af.FusionConfig.dynamic(value_init_noise=0.05))
    for parameter in model.fusion_parameters("f"):
        if parameter.dim() == 2:
            parameter.data.add_(torch.randn_like(parameter) * 0.2)
    model.activate(fusion="f")
    return model.eval()


def _on(inputs: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {key: value.to(device) for key, value in inputs.items()}


@pytest.mark.parametrize("preset", ["pfeiffer", "houlsby"])
def test_encoder_fusion_on_cuda_equals_the_cpu_and_its_reference(preset: str) -> None:
    torch.manual_seed(0)
    model = _fused(af.wrap(tiny_encoder("bert").double()), preset)
    inputs = tiny_inputs(batch=3, seq=9)
    inputs["attention_mask"][2, 5:] = 0
    with torch.no_grad():
        on_cpu = model(**inputs, output_fusion_attentions=True)
        model.to(CUDA)
        for implementation in ("fast", "reference"):
            model.set_fusion_implementation(implementation)
            on_gpu = model(**_on(inputs, CUDA), output_fusion_attentions=True)
            assert on_gpu.last_hidden_state.device.type == CUDA.type
            assert_close(on_gpu.last_hidden_state.cpu(), on_cpu.last_hidden_state, label=implementation)
            for gpu_weights, cpu_weights in zip(on_gpu.fusion_attentions, on_cpu.fusion_attentions, strict=True):
                assert_close(gpu_weights.cpu(), cpu_weights, label=implementation)


def test_fusion_gradients_on_cuda_equal_the_cpu() -> None:
    torch.manual_seed(0)
    model = _fused(af.wrap(tiny_encoder("bert").double()), "pfeiffer")
    model.add_head("h", af.ClassificationHead(num_labels=3, dropout=0.0))
    model.train_fusion("f", head="h")
    model.eval()
    inputs, labels = tiny_inputs(batch=3, seq=9), torch.tensor([0, 2, 1])
    grads = []
    for device in (torch.device("cpu"), CUDA):
        model.to(device)
        model.zero_grad()
        model(**_on(inputs, device), labels=labels.to(device)).loss.backward()
        # copies: moving the model moves the .grad tensors of its parameters too
        grads.append({n: p.grad.to("cpu", copy=True) for n, p in model.named_parameters() if p.grad is not None})
    on_cpu, on_gpu = grads
    assert on_cpu.keys() == on_gpu.keys() and any("fusion" in name for name in on_cpu)
    for name, grad in on_cpu.items():
        if not name.endswith("key.bias"):  # true gradient zero: rounding noise on both devices
            assert_close(on_gpu[name], grad, label=name)


@pytest.mark.parametrize("model_type", ["llama", "gpt2", "t5"])
def test_generation_on_cuda_is_the_cpu_generation_with_and_without_the_cache(model_type: str) -> None:
    torch.manual_seed(0)
    model = _fused(af.wrap(tiny_decoder(model_type, dtype=torch.float64)), "pfeiffer")
    inputs = tiny_decoder_inputs(model_type, padding_side="left")  # as decoders generate from it
    inputs.pop("decoder_input_ids", None)
    options = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        on_cpu = model.generate(**inputs, **options)
        model.to(CUDA)
        cached = model.generate(**_on(inputs, CUDA), use_cache=True, **options)
        uncached = model.generate(**_on(inputs, CUDA), use_cache=False, **options)
    assert torch.equal(cached, uncached)
    assert torch.equal(cached.cpu(), on_cpu)


def test_pieces_saved_from_cuda_load_on_the_cpu(tmp_path) -> None:
    torch.manual_seed(0)
    model = af.wrap(tiny_encoder("bert").double()).to(CUDA)
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    with torch.no_grad():
        for parameter in model.adapter_parameters("a"):
            parameter.normal_(0.0, 0.5)
    model.activate(adapter="a")
    inputs = tiny_inputs()
    with torch.no_grad():
        expected = model.eval()(**_on(inputs, CUDA)).last_hidden_state.cpu()
    model.save_adapter("a", tmp_path / "a")
    other = af.wrap(tiny_encoder("bert").double())
    other.load_adapter(tmp_path / "a")
    other.activate(adapter="a")
    with torch.no_grad():
        assert_close(other.eval()(**inputs).last_hidden_state, expected)


def test_bf16_autocast_fusion_keeps_the_residual_stream_in_float32() -> None:
    """Under autocast the fast path adds the residual outside its matmuls, in the stream's own dtype."""
    torch.manual_seed(0)
    model = _fused(af.wrap(tiny_encoder("bert")), "pfeiffer").to(CUDA)
    inputs = _on(tiny_inputs(batch=3, seq=9), CUDA)
    with torch.no_grad():
        exact = model(**inputs).last_hidden_state
        with torch.autocast("cuda", dtype=torch.bfloat16):
            mixed = model(**inputs).last_hidden_state
    assert mixed.dtype == torch.float32 and torch.isfinite(mixed).all()
    relative = (mixed - exact).norm() / exact.norm()
    assert relative < 2e-2, f"bf16 autocast drifted {relative:.3g} from float32"  # bf16 has 8 significant bits


def test_a_cast_round_trip_is_seen_without_the_value_check() -> None:
    """The caching allocator hands a freed block of the same size straight back: after `model.half().float()` the
    weights could sit at their old addresses with their old version and dtype and new (rounded) values, which
    check_values=False (the server's) would take for the weights its folds were made from."""
    import copy

    torch.manual_seed(0)
    model = _fused(af.wrap(tiny_encoder("bert")), "pfeiffer").to(CUDA)
    inputs = _on(tiny_inputs(batch=2, seq=7), CUDA)
    with model.inference_cache(check_values=False):
        model(**inputs)
    addresses = {p.data_ptr() for p in model.fusion_parameters("f")}
    model.half().float()  # every value rounded to float16
    assert not addresses & {p.data_ptr() for p in model.fusion_parameters("f")}
    with model.inference_cache(check_values=False):
        cached = model(**inputs).last_hidden_state
    with torch.no_grad():
        fresh = copy.deepcopy(model)(**inputs).last_hidden_state
    torch.testing.assert_close(cached, fresh, rtol=0, atol=0)


def test_routed_rows_on_cuda_equal_the_cpu_inside_and_outside_the_inference_cache() -> None:
    """Per-example routing gathers stacked adapter weights by row index: on CUDA those gathers and the kept stacks of
    inference_cache() must land on the device and give the CPU's rows."""
    torch.manual_seed(0)
    model = _fused(af.wrap(tiny_encoder("bert").double()), "pfeiffer")
    inputs = tiny_inputs(batch=4, seq=9)
    inputs["attention_mask"][3, 6:] = 0
    names = ["a", "f", None, "c"]
    with torch.no_grad():
        on_cpu = model(**inputs, adapter_names=names).last_hidden_state
        model.to(CUDA)
        plain = model(**_on(inputs, CUDA), adapter_names=names).last_hidden_state
        with model.inference_cache():
            cached = model(**_on(inputs, CUDA), adapter_names=names).last_hidden_state
    assert_close(plain.cpu(), on_cpu, label="routed on cuda")
    assert_close(cached.cpu(), on_cpu, label="routed on cuda, inference_cache")


def test_routed_generation_on_cuda_is_the_cpu_generation() -> None:
    torch.manual_seed(0)
    model = _fused(af.wrap(tiny_decoder("llama", dtype=torch.float64)), "pfeiffer")
    inputs = tiny_decoder_inputs("llama", padding_side="left")
    inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
    names = ["f", "b"][: inputs["input_ids"].shape[0]]
    options = dict(max_new_tokens=6, do_sample=False, pad_token_id=0, adapter_names=names)
    with torch.no_grad():
        on_cpu = model.generate(**inputs, **options)
        model.to(CUDA)
        on_gpu = model.generate(**_on(inputs, CUDA), **options)
    assert torch.equal(on_gpu.cpu(), on_cpu)
