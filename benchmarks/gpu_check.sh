#!/bin/bash
# The device check (issue 43), on a CUDA machine prepared by benchmarks/gpu_bundle.sh: the carried wheels installed,
# `pytest -m cuda`, two CPU test files, then benchmarks/gpu_overhead.py (small and 0.6B shapes with the TRL and verl
# figures, then the 1.7B shape). Output and results under $OUT (gpu_overhead.json/.md, b17/). About 6 minutes.
set -u -o pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export WANDB_MODE=disabled OUT=${OUT:-/tmp/gpu_out}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../whl/*.whl
# verl's modules import Ray at their head; Ray (a large wheel) is not carried and the policy-loss path never calls it
mkdir -p /tmp/raystub/ray && cat > /tmp/raystub/ray/__init__.py <<'PY'
class _Any:
    def __init__(self, *a, **k): pass
    def __call__(self, *a, **k): return a[0] if len(a) == 1 and callable(a[0]) and not k else _Any()
    def __getattr__(self, name): return _Any()
def __getattr__(name): return _Any()
remote = _Any()
__version__ = "0.0.0-stand-in"
PY
export PYTHONPATH=/tmp/site:/tmp/raystub
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import sys, torch, transformers, pyarrow; print(sys.version.split()[0], torch.__version__, transformers.__version__, pyarrow.__version__)"
echo "== pytest -m cuda ($(el) s)"
timeout 150 python3 -m pytest -m cuda -p no:cacheprovider -rs tests/gpu 2>&1 | grep -v "^{'" | tail -30
echo "== cpu tests ($(el) s)"
timeout 60 python3 -m pytest -p no:cacheprovider tests/core/test_host_reads.py tests/core/test_stats_torch.py 2>&1 | tail -3
echo "== bench small, 0.6b, trl, verl ($(el) s)"
timeout $(( 330 - $(el) )) python3 benchmarks/gpu_overhead.py --shapes small,0.6b --steps 4 --out "$OUT" 2>&1 | grep -v "^{'"
echo "== bench 1.7b ($(el) s)"
timeout $(( 405 - $(el) )) python3 benchmarks/gpu_overhead.py --shapes 1.7b --steps 4 --skip trl,verl --out "$OUT/b17"
echo "== done ($(el) s)"
