#!/usr/bin/env bash
# bench/gpu.py on one lent H200, as one command of the device tool (docs/runtime/gpu.md):
#
#   run(command="bash bench/gpu.sh", carry=[".whl"], timeout_s=540)
#
# The machine's image has torch, transformers, tokenizers, safetensors, numpy, pillow, triton and
# einops, but not av, cachetools or flash-linear-attention: they travel as wheels in .whl/
# (ignored by git; docs/runtime/gpu.md says how to fetch them) and go to /tmp/site, not into the
# image's environment. The JSON report and the whole log come back under $OUT. Arguments go to
# bench/gpu.py (`bash bench/gpu.sh --device cpu --small` rehearses it anywhere).
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader
# The bench stops starting sections at 450 s; timeout is the backstop (its SIGTERM saves the report).
timeout -k 10 520 python3 bench/gpu.py --out "$OUT/gpu.json" "$@" 2>&1 | tee "$OUT/gpu.log"
