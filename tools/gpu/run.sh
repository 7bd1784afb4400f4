#!/bin/bash
# The `gpu` nox session for a machine that has CUDA, PyTorch, Triton, pytest, hypothesis and
# pytest-benchmark under its own python3 but no package registry (a lent GPU box, a CI runner
# behind a firewall). Run from the repository root:
#
#   bash tools/gpu/run.sh [WHEEL_DIR] [OUT_DIR]
#
# WHEEL_DIR (optional) holds the pure-Python wheels the machine lacks (gguf, syrupy, and this
# project's own wheel so its pytest plugin registers): make them where pip works with
#   pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl gguf syrupy
#   pip wheel --no-deps --no-build-isolation -w .whl .
# OUT_DIR (default reports/gpu) receives env.txt, the benchmark JSON, the generated
# kernels-gpu-<device>.md, the logs and the conformance report of the compiled parity run.
set -o pipefail
WHEELS=${1:-}
OUT=${2:-reports/gpu}
mkdir -p "$OUT"
if [ -n "$WHEELS" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/dc-site "$WHEELS"/*.whl || exit 3
  export PYTHONPATH=/tmp/dc-site${PYTHONPATH:+:$PYTHONPATH}
fi
# compiled kernels (never the interpreter), the GPU-sized parity grid
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 DC_KERNELS_SCALE=gpu DC_HYPOTHESIS_PROFILE=ci PYTHONHASHSEED=0
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import sys, torch, triton; p = torch.cuda.get_device_properties(0); print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, p.name, p.multi_processor_count, 'SMs')"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
echo "== benchmarks (fused decode vs fp16 SDPA, device copy)"
python3 -m pytest tools/bench/cases/test_kernels.py --benchmark-only \
  --benchmark-json="$OUT/bench-kernels-gpu.json" -q -p no:cacheprovider 2>&1 | tee "$OUT/bench.log"
python3 -m kernels.gpu_report "$OUT/bench-kernels-gpu.json" "$OUT"
echo "== compiled parity (conformance/kernels, tests/kernels)"
python3 -m pytest conformance/kernels tests/kernels -n "${DC_GPU_WORKERS:-8}" -q \
  -p no:cacheprovider --report-dir "$OUT/report" 2>&1 | tee "$OUT/parity.log"
