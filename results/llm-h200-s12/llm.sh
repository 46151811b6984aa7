#!/bin/bash
export PYTHONUNBUFFERED=1
G=$PWD/.gpu; W=/tmp/w; mkdir -p $W; tar xf $G/head.tar -C $W; cd $W
mkdir -p out/llm28; cp $G/commit.txt out/llm28/; nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv > out/llm28/gpu.txt
GPUS=4 MODELS="llama-3.1-8b llama-3.2-1b" DEADLINE_S=${DL:-300} timeout ${TO:-470} bash benchmarks/llm_table.sh out/llm28
echo "table rc=$?"
TABLES_ONLY=1 timeout 40 bash benchmarks/llm_table.sh out/llm28 2>/dev/null
tar czf $OUT/llm28.tgz -C out llm28; ls -la $OUT; cat out/llm28/progress.log | tail -30; cat out/llm28/against.md 2>/dev/null | head -30
