#!/usr/bin/env bash
# Issue 26's table on a multi-GPU machine: one case per GPU in parallel, each `tune_matrix.py --hand`
# (python -m fade tune with its default budget, then six hand configurations and FADE's choice, each in its own
# process), then OUT/hand-table.md from every case in OUT.
#
#   bash benchmarks/tune_table.sh OUT CASE_GPU0 [CASE_GPU1 ...]
#   bash benchmarks/tune_table.sh $OUT resnet50/train mobilenet_v2/infer     # on nvidia-h200-x2
#
# Cases: tune_matrix.HAND_CASES (resnet50/train, mobilenet_v2/infer, gpt2-small/train, convnext_tiny/train,
# vit_b_16/infer, llama_lm/train, efficientnet_b0/train, bert_base/train, swin_t/train). DEADLINE_S (default
# 540) is passed as --deadline-s: no child starts that could not finish within it, so the table is written
# inside the device machine's 10-minute command limit.
# A case cut short resumes when run again on the same OUT (finished sides are kept). Logs: OUT/<case>.log and
# OUT/<stem>/*.log; multicast stays off in every process (dist_check.py says why).
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: bash benchmarks/tune_table.sh OUT CASE_GPU0 [CASE_GPU1 ...]" >&2
  exit 2
fi
OUT=$1
shift
cd "$(dirname "$0")/.."
ROOT=$(pwd)
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
export PYTHONPATH="$ROOT:$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
DEADLINE_S=${DEADLINE_S:-540}
PYTHON=${PYTHON:-python3}

# fade from the checkout through PYTHONPATH, not `pip install -e .`: an editable install builds in an isolated
# environment that fetches setuptools, and the device machine reaches no index.
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv >"$OUT/gpus.csv" 2>&1 || true
"$PYTHON" -c "import torch, sys; print('torch', torch.__version__, 'gpus', torch.cuda.device_count(), file=sys.stderr)"

gpu=0
pids=()
for case in "$@"; do
  log="$OUT/$(echo "$case" | tr '/:' '-_').log"
  echo "tune_table: $case on GPU $gpu -> $log" >&2
  "$PYTHON" benchmarks/tune_matrix.py "$OUT" --hand --cases "$case" --gpu "$gpu" --deadline-s "$DEADLINE_S" >"$log" 2>&1 &
  pids+=($!)
  gpu=$((gpu + 1))
done
status=0
for pid in "${pids[@]}"; do
  wait "$pid" || status=1
done
"$PYTHON" benchmarks/tune_matrix.py "$OUT" --hand --table
exit $status
