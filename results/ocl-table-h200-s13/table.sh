#!/bin/bash
# Issue 27's table, eager and graph-mode columns against CUDA fp32 on the same GPU in the same call: one group of
# networks per GPU (nvidia-h200-x2; CUDA_VISIBLE_DEVICES picks the GPU for CUDA and NVIDIA's OpenCL). Per group:
# CUDA fp32 (TF32 off, cudnn.benchmark on) first, then ocl eager (fp32) and the graph mode (compile).
# PART=1 or 2 picks the groups.
export PYTHONUNBUFFERED=1
G=$PWD/.gpu; W=/tmp/w; mkdir -p $W; tar xf $G/head.tar -C $W; cd $W
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $G/whl/*.whl || echo "wheels failed"
mkdir -p /etc/OpenCL/vendors; echo $(ldconfig -p | grep -o '/.*libnvidia-opencl.so.1' | head -1) > /etc/OpenCL/vendors/nvidia.icd
mkdir -p /tmp/oclx; for d in $G/deb/*.deb; do dpkg -x $d /tmp/oclx; done
export LD_LIBRARY_PATH=/tmp/oclx/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH PYTHONPATH=$W/src:/tmp/site XDG_CACHE_HOME=/tmp/xdg-empty
R=/tmp/table$PART; mkdir -p $R; cp $G/commit.txt $R/
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv > $R/gpu.txt; nproc >> $R/gpu.txt
END_S=${END_S:-560}
group() {  # gpu, models, batch, extra
  local i=$1 d=$R/g$1; mkdir -p $d; export CUDA_VISIBLE_DEVICES=$i
  timeout 150 python3 -m fade bench models --device cuda:0 --models $2 --batch $3 $4 --mode both \
    --variants fp32+cudnn_benchmark=on --timing-budget 8 -o $d/models.jsonl > $d/cuda.txt 2>&1
  echo "g$i cuda rc=$? $SECONDS s" >> $d/rc.txt
  timeout $((END_S-SECONDS)) python3 -m fade bench models --device ocl:0 --models $2 --batch $3 $4 --mode both \
    --variants fp32,compile --timing-budget 8 -o $d/models.jsonl > $d/ocl.txt 2>&1
  echo "g$i ocl rc=$? $SECONDS s" >> $d/rc.txt
}
case "$PART" in  # nvidia-h200-x2: two groups per call
  1) group 0 mobilenet_v3_small,mnasnet1_0,mobilenet_v2 64 & group 1 efficientnet_b0,regnet_y_400mf,mobilenet_v3_large 64 & ;;
  2) group 0 resnet18,resnet50,alexnet 64 & group 1 vit_b_16 64 && group 1 gpt2-small 8 "--seq-len 512" & ;;
  3) group 0 vgg16,resnext50_32x4d,wide_resnet50_2 64 & group 1 convnext_small,densenet161 64 & ;;
  4) true &
     (mkdir -p $R/g1; CUDA_VISIBLE_DEVICES=1 timeout $((END_S-SECONDS)) python3 benchmarks/ocl_host_cost.py $R/g1/host_cost.json \
        --models mobilenet_v3_small,resnet50 --batch 64 --steps 8 > $R/g1/host_cost.txt 2>&1; echo "g1 host rc=$?" >> $R/g1/rc.txt) & ;;
esac
wait
cat $R/g*/rc.txt
for i in 0 1; do python3 -m fade compare $R/g$i/models.jsonl --by device --baseline cuda:0 --markdown $R/g$i/table.md > $R/g$i/compare.txt 2>&1; grep "^|" $R/g$i/table.md; done
tar czf $OUT/table$PART.tgz -C /tmp table$PART
