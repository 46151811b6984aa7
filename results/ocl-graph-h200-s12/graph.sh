#!/bin/bash
# Issue 27's graph-mode column, in part: ocl eager (fp32) against ocl graph mode (compile = torch.compile(backend="fade_ocl"))
# on the H200, training, for the host-bound networks of the eager table; vit_b_16 inference eager (the MHA fast path now on the device).
export PYTHONUNBUFFERED=1
G=$PWD/.gpu; W=/tmp/w; mkdir -p $W; tar xf $G/head.tar -C $W; cd $W
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $G/whl/*.whl || echo "wheels failed"
mkdir -p /etc/OpenCL/vendors; echo $(ldconfig -p | grep -o '/.*libnvidia-opencl.so.1' | head -1) > /etc/OpenCL/vendors/nvidia.icd
mkdir -p /tmp/oclx; for d in $G/deb/*.deb; do dpkg -x $d /tmp/oclx; done
export LD_LIBRARY_PATH=/tmp/oclx/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH PYTHONPATH=$W/src:/tmp/site XDG_CACHE_HOME=/tmp/xdg-empty
R=/tmp/graph; mkdir -p $R; cp $G/commit.txt $R/
run() {  # gpu, models, mode, variants, batch, extra
  local i=$1 d=$R/g$1; mkdir -p $d
  CUDA_VISIBLE_DEVICES=$i timeout ${TO:-225} python3 -m fade bench models --device ocl:0 --models $2 --mode $3 --variants $4 \
    --batch $5 $6 --timing-budget 10 -o $d/models.jsonl > $d/log.txt 2>&1; echo "g$i rc=$? $SECONDS s" >> $d/rc.txt
}
run 0 mobilenet_v3_small,regnet_y_400mf train fp32,compile 64 &
run 1 mobilenet_v2,efficientnet_b0 train fp32,compile 64 &
(TO=80 run 2 vit_b_16 infer fp32 64; TO=140 run 2 mnasnet1_0 train fp32,compile 64) &
run 3 gpt2-small,mobilenet_v3_large train fp32,compile 8 "--seq-len 512" &
wait
cat $R/g*/rc.txt
for i in 0 1 2 3; do python3 -m fade compare $R/g$i/models.jsonl --markdown $R/g$i/table.md > /dev/null 2>&1; grep "^|" $R/g$i/table.md; done
tar czf $OUT/graph.tgz -C /tmp graph
