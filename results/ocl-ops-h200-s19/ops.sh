#!/bin/bash
# Issue 27, session 19, one nvidia-h200 call (run from the repository root with .gpu/ carried: head.tar of the
# commit, pyopencl wheels, libclblast1 and ocl-icd debs): `fade ops` float32 sweeps on ocl:0 and cuda:0 of the
# same GPU, then `fade ops compare` (the coverage gap of fade.ocl against CUDA on the same OpInfo sweep).
# OPS_S: seconds for the ocl sweep (it resumes where a cut-off left it when run again); HC=1 adds
# benchmarks/ocl_host_cost.py on mobilenet_v3_small; NETS="name:batch ..." then runs table rows (.gpu/table.sh)
# with what is left of END_S.
W=/tmp/w; mkdir -p $W; tar xf $PWD/.gpu/head.tar -C $W
SRC=$W source $PWD/results/ocl-setup-h200/env.sh
ROOT=$PWD; cd $W
R=/tmp/ops; mkdir -p $R; cp $G/commit.txt $R/; export COLUMNS=160
nvidia-smi --query-gpu=index,name,driver_version --format=csv > $R/gpu.txt
timeout ${OPS_S:-200} python3 -m fade ops --device ocl:0 --dtypes float32 -o $R/ops-ocl.jsonl --quiet --json $R/sum-ocl.json > $R/ocl.txt 2>&1
echo "ocl sweep rc=$? $SECONDS s" >> $R/rc.txt
timeout ${CUDA_S:-150} python3 -m fade ops --device cuda:0 --dtypes float32 -o $R/ops-cuda.jsonl --quiet --json $R/sum-cuda.json > $R/cuda.txt 2>&1
echo "cuda sweep rc=$? $SECONDS s" >> $R/rc.txt
python3 -m fade ops compare $R/ops-ocl.jsonl $R/ops-cuda.jsonl --json $R/gap.json > $R/gap.txt 2>&1
echo "compare rc=$? $SECONDS s" >> $R/rc.txt
if [ "$HC" = 1 ]; then
  timeout 120 python3 benchmarks/ocl_host_cost.py $R/host_cost.json --models mobilenet_v3_small --batch 64 > $R/host_cost.txt 2>&1
  echo "host cost rc=$? $SECONDS s" >> $R/rc.txt
fi
cat $R/rc.txt; tail -n 40 $R/gap.txt
tar czf $OUT/ops.tgz -C /tmp ops
cd $ROOT
if [ -n "$NETS" ]; then END_S=$(( ${END_S:-570} - SECONDS )) bash .gpu/table.sh; fi
