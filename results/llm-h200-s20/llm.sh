#!/bin/bash
# Issue 28's decode table again, session 20, at the commit in .gpu/commit.txt (the working tree that travels):
# benchmarks/llm_table.sh with GPUS=4 on one nvidia-h200-x4, each job pinned to its GPU's 16 of the host's 64
# cores (llm_table.sh's pin()), so no job's compiles share cores with another's timed loop. Session 12's call
# (results/llm-h200-s12/) ran the jobs unpinned. Results: $OUT/llm28.tgz.
export PYTHONUNBUFFERED=1
mkdir -p out/llm28; cp .gpu/commit.txt out/llm28/
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv > out/llm28/gpu.txt
nproc > out/llm28/nproc.txt
GPUS=4 MODELS="llama-3.1-8b llama-3.2-1b" DEADLINE_S=${DL:-400} timeout ${TO:-560} bash benchmarks/llm_table.sh out/llm28
echo "table rc=$?"
TABLES_ONLY=1 timeout 30 bash benchmarks/llm_table.sh out/llm28 2>/dev/null
tar czf $OUT/llm28.tgz --exclude='*.html' -C out llm28; ls -la $OUT; tail -30 out/llm28/progress.log; cat out/llm28/against.md 2>/dev/null
