#!/bin/bash
# Issue 27 diagnosis: where an ocl training step's time goes on the H200 (OpenCL profiling events: device busy
# vs step), eager and graph mode, against CUDA's profile of the same step; one network per GPU.
export PYTHONUNBUFFERED=1
G=$PWD/.gpu; W=/tmp/w; mkdir -p $W; tar xf $G/head.tar -C $W; cd $W
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $G/whl/*.whl || echo "wheels failed"
mkdir -p /etc/OpenCL/vendors; echo $(ldconfig -p | grep -o '/.*libnvidia-opencl.so.1' | head -1) > /etc/OpenCL/vendors/nvidia.icd
mkdir -p /tmp/oclx; for d in $G/deb/*.deb; do dpkg -x $d /tmp/oclx; done
export LD_LIBRARY_PATH=/tmp/oclx/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH PYTHONPATH=$W/src:/tmp/site XDG_CACHE_HOME=/tmp/xdg-empty
R=/tmp/diag; mkdir -p $R; cp $G/commit.txt $R/
prof() {  # gpu, model, batch, extra
  local i=$1 d=$R/$2; mkdir -p $d
  export CUDA_VISIBLE_DEVICES=$i
  timeout 170 python3 -m fade profile $2 --device ocl:0 --batch $3 $4 --variants default,compile -o $d/ocl > $d/ocl.txt 2>&1; echo "$2 ocl rc=$? $SECONDS" >> $d/rc.txt
  timeout 90 python3 -m fade profile $2 --device cuda:0 --batch $3 $4 -o $d/cuda > $d/cuda.txt 2>&1; echo "$2 cuda rc=$? $SECONDS" >> $d/rc.txt
}
(prof 0 mobilenet_v3_small 64; prof 0 resnet50 64) &
(prof 1 regnet_y_400mf 64; prof 1 mobilenet_v2 64) &
(prof 2 efficientnet_b0 64; prof 2 densenet161 64) &
(prof 3 gpt2-small 8 "--size 512"; prof 3 convnext_small 64) &
wait
cat $R/*/rc.txt
tar czf $OUT/diag.tgz --exclude="*.trace.json*" -C /tmp diag
