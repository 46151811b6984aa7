#!/bin/bash
# Issue 29's GPU must-show, prepared in session 19 and not run yet: `fade tune CONFIG --generate` on an H200
# (KV cache, the decode step's compile mode, SDPA backend, torchao weight-only int8/int4, each kept only through
# the generation gate and the final side-by-side check), beside `fade bench llm`'s hf-static and fade-loop rows
# on the same GPU. Run from the repository root with .gpu/ carried: head.tar of the commit, the pyopencl wheels
# and the torchao wheel in .gpu/whl (torchao is not on the device machine; results/ocl-setup-h200/env.sh
# installs every carried wheel into /tmp/site). CONFIGS (default "llama-3.2-1b llama-3.1-8b"), BUDGET minutes per
# tune (default 4); results go to $OUT/tune.tgz.
W=/tmp/w; mkdir -p $W; tar xf $PWD/.gpu/head.tar -C $W
SRC=$W source $PWD/results/ocl-setup-h200/env.sh
cd $W
R=/tmp/tune; mkdir -p $R; cp $G/commit.txt $R/
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv > $R/gpu.txt
for config in ${CONFIGS:-llama-3.2-1b llama-3.1-8b}; do
  timeout 120 python3 -m fade bench llm --device cuda:0 --config $config --variants hf-static,fade-loop --batch 1 \
    --dtype bf16 -o $R/$config-bench.jsonl > $R/$config-bench.txt 2>&1
  echo "$config bench rc=$? $SECONDS s" >> $R/rc.txt
  timeout $(( ${BUDGET:-4} * 60 + 60 )) python3 -m fade tune $config --generate --device cuda:0 --batch 1 \
    --budget ${BUDGET:-4} -o $R/$config-tuning.json > $R/$config-tune.txt 2>&1
  echo "$config tune rc=$? $SECONDS s" >> $R/rc.txt
done
cat $R/rc.txt; tail -n 30 $R/*-tune.txt
tar czf $OUT/tune.tgz -C /tmp tune
