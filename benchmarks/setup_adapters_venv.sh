#!/usr/bin/env bash
# Make the AdapterHub venv that benchmarks/fusion_speed.py and decoder_fusion.py drive as their "adapters" workers.
#   bash benchmarks/setup_adapters_venv.sh [DIR]      (default: benchmarks/.venv-adapters, git-ignored)
# torch is installed first and pinned, so pip never resolves an unpinned (CUDA) torch for adapters.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${1:-$here/.venv-adapters}"
python="${PYTHON:-python3}"

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q)
"${pip[@]}" "torch==2.13.0"
"${pip[@]}" "torch==2.13.0" "adapters==1.3.0" "transformers==4.57.6"
# decoder_fusion.py: transformers reads the GGUF decoder through gguf, and 4.57.6 asks for accelerate to do it.
"${pip[@]}" "torch==2.13.0" "gguf==0.19.0" "accelerate==1.15.0"
"$venv/bin/python" -c "import adapters, torch, transformers; print('adapters', adapters.__version__, \
'transformers', transformers.__version__, 'torch', torch.__version__)"
echo "use: .venv/bin/python benchmarks/fusion_speed.py --adapters-python $venv/bin/python"
