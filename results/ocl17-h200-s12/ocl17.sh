#!/bin/bash
# Issue 27's 17-network table, eager column: one group of networks per GPU (nvidia-h200-x4), each group in its
# own `fade bench models --device ocl:0,cuda:0` (CUDA_VISIBLE_DEVICES picks the GPU for CUDA and NVIDIA's OpenCL),
# then benchmarks/ocl_zoo.py (ocl vs CUDA fp32 vs CUDA fp64 losses and logits) for the same networks.
export PYTHONUNBUFFERED=1
G=$PWD/.gpu
W=/tmp/w; mkdir -p $W; tar xf $G/head.tar -C $W; cd $W
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $G/whl/*.whl || echo "wheels failed"
mkdir -p /etc/OpenCL/vendors; echo $(ldconfig -p | grep -o '/.*libnvidia-opencl.so.1' | head -1) > /etc/OpenCL/vendors/nvidia.icd
mkdir -p /tmp/oclx; for d in $G/deb/*.deb; do dpkg -x $d /tmp/oclx; done
export LD_LIBRARY_PATH=/tmp/oclx/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH PYTHONPATH=$W/src:/tmp/site
export XDG_CACHE_HOME=/tmp/xdg-empty
R=$OUT/ocl17; mkdir -p $R; cp $G/commit.txt $R/
nvidia-smi --query-gpu=index,name,driver_version,power.limit,utilization.gpu --format=csv > $R/gpu.txt; nproc >> $R/gpu.txt
BENCH_S=${BENCH_S:-430}; END_S=${END_S:-555}
group() {  # index, CNN list, transformer list
  local i=$1 cnn=$2 tr=$3 d=$R/g$1; mkdir -p $d; local t0=$SECONDS
  export CUDA_VISIBLE_DEVICES=$i
  python3 -c "import fade.ocl as o; print(o.devices())" > $d/ocl_devices.txt 2>&1
  if [ -n "$cnn" ]; then
    timeout $BENCH_S python3 -m fade bench models --device ocl:0,cuda:0 --models $cnn --batch 64 --mode both \
      --variants fp32+cudnn_benchmark=on --timing-budget 20 -o $d/models.jsonl --json $d/summary_cnn.json > $d/models_cnn.txt 2>&1
    echo "g$i cnn rc=$? $((SECONDS-t0))s" >> $d/rc.txt
  fi
  if [ -n "$tr" ]; then
    timeout $((BENCH_S-(SECONDS-t0))) python3 -m fade bench models --device ocl:0,cuda:0 --models $tr --batch 8 --seq-len 512 --mode both \
      --variants fp32+cudnn_benchmark=on --timing-budget 20 -o $d/models.jsonl --json $d/summary_tr.json > $d/models_tr.txt 2>&1
    echo "g$i tr rc=$? $((SECONDS-t0))s" >> $d/rc.txt
  fi
  local left=$((END_S-SECONDS-5)); [ $left -gt 20 ] && {
    timeout $left python3 benchmarks/ocl_zoo.py $d/zoo --models $(echo $cnn,$tr | sed 's/^,//;s/,$//') --batch 8 --seq-len 128 > $d/zoo_log.txt 2>&1
    echo "g$i zoo rc=$? $((SECONDS-t0))s" >> $d/rc.txt; }
}
group 0 alexnet,resnet18,vgg16,mobilenet_v3_small,regnet_y_400mf "" &
group 1 resnet50,mobilenet_v2,mnasnet1_0,mobilenet_v3_large,resnext50_32x4d "" &
group 2 convnext_small,densenet161,efficientnet_b0 "" &
group 3 wide_resnet50_2,vit_b_16 gpt2-small,bert-base &
wait
cat $R/g*/rc.txt
for i in 0 1 2 3; do python3 -m fade compare $R/g$i/models.jsonl --by device --baseline cuda:0 --markdown $R/g$i/table.md > $R/g$i/compare.txt 2>&1; cat $R/g$i/table.md | grep "^|" ; done
