#!/bin/bash
# Issue 27's table, session 14: the rows the new kernels touch (grouped convolutions, layer norm, reductions),
# eager and graph mode against CUDA fp32 on the same GPU in the same call (nvidia-h200, one GPU: the groups one
# after another). Per network: CUDA fp32 (TF32 off, cudnn.benchmark on) first, then ocl eager (fp32) and the
# graph mode (compile). PART=A, B or C picks the networks. Run from the repository root with .gpu/ carried
# (head.tar of the commit, pyopencl wheels, libclblast1 and ocl-icd debs).
export PYTHONUNBUFFERED=1
G=$PWD/.gpu; W=/tmp/w; mkdir -p $W; tar xf $G/head.tar -C $W; cd $W
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $G/whl/*.whl || echo "wheels failed"
mkdir -p /etc/OpenCL/vendors; echo $(ldconfig -p | grep -o '/.*libnvidia-opencl.so.1' | head -1) > /etc/OpenCL/vendors/nvidia.icd
mkdir -p /tmp/oclx; for d in $G/deb/*.deb; do dpkg -x $d /tmp/oclx; done
export LD_LIBRARY_PATH=/tmp/oclx/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH PYTHONPATH=$W/src:/tmp/site XDG_CACHE_HOME=/tmp/xdg-empty
R=/tmp/table$PART; mkdir -p $R; cp $G/commit.txt $R/
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv > $R/gpu.txt; nproc >> $R/gpu.txt
END_S=${END_S:-570}
net() {  # model, batch, extra
  local d=$R/$1; mkdir -p $d
  timeout 120 python3 -m fade bench models --device cuda:0 --models $1 --batch $2 $3 --mode both \
    --variants fp32+cudnn_benchmark=on --timing-budget 8 -o $d/models.jsonl > $d/cuda.txt 2>&1
  echo "$1 cuda rc=$? $SECONDS s" >> $R/rc.txt
  timeout $((END_S-SECONDS)) python3 -m fade bench models --device ocl:0 --models $1 --batch $2 $3 --mode both \
    --variants fp32,compile --timing-budget 8 -o $d/models.jsonl > $d/ocl.txt 2>&1
  echo "$1 ocl rc=$? $SECONDS s" >> $R/rc.txt
}
case "$PART" in
  A) net regnet_y_400mf 64; net resnext50_32x4d 64; net convnext_small 64 ;;
  B) net gpt2-small 8 "--seq-len 512"; net bert-base 8 "--seq-len 512"; net vit_b_16 64 ;;
  C) net mobilenet_v3_small 64; net mobilenet_v3_large 64; net efficientnet_b0 64; net mobilenet_v2 64 ;;
esac
cat $R/rc.txt
for d in $R/*/; do python3 -m fade compare $d/models.jsonl --by device --baseline cuda:0 --markdown $d/table.md > $d/compare.txt 2>&1; grep "^|" $d/table.md; done
tar czf $OUT/table$PART.tgz -C /tmp table$PART
