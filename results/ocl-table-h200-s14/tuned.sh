#!/bin/bash
# Issue 27, session 14: the transformer rows after the multi-tensor AdamW step, with CLBlast's own parameters
# and then with the parameters `fade tune gpt2-small --device ocl:0 --pretune` finds for this H200 (persisted
# in the tuning cache, applied as the device opens, as for any user). One GPU; CUDA fp32 first per network.
export PYTHONUNBUFFERED=1
G=$PWD/.gpu; W=/tmp/w; mkdir -p $W; tar xf $G/head.tar -C $W; cd $W
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $G/whl/*.whl || echo "wheels failed"
mkdir -p /etc/OpenCL/vendors; echo $(ldconfig -p | grep -o '/.*libnvidia-opencl.so.1' | head -1) > /etc/OpenCL/vendors/nvidia.icd
mkdir -p /tmp/oclx; for d in $G/deb/*.deb; do dpkg -x $d /tmp/oclx; done
export LD_LIBRARY_PATH=/tmp/oclx/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH PYTHONPATH=$W/src:/tmp/site XDG_CACHE_HOME=/tmp/xdg-cache
R=/tmp/tuned; mkdir -p $R; cp $G/commit.txt $R/
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv > $R/gpu.txt
END_S=${END_S:-585}
bench() {  # label, model, batch, extra, device, variants
  local d=$R/$1/$2; mkdir -p $d
  timeout $((END_S-SECONDS)) python3 -m fade bench models --device $5 --models $2 --batch $3 $4 --mode both \
    --variants $6 --timing-budget 8 -o $d/models.jsonl > $d/$5.txt 2>&1
  echo "$1 $2 $5 rc=$? $SECONDS s" >> $R/rc.txt
}
T="--seq-len 512"
bench untuned gpt2-small 8 "$T" cuda:0 fp32+cudnn_benchmark=on
bench untuned gpt2-small 8 "$T" ocl:0 fp32,compile
bench untuned bert-base 8 "$T" cuda:0 fp32+cudnn_benchmark=on
bench untuned bert-base 8 "$T" ocl:0 compile
timeout 200 python3 -m fade tune gpt2-small --device ocl:0 --batch 8 --size 512 --pretune --budget 2 > $R/tune.txt 2>&1
echo "tune rc=$? $SECONDS s" >> $R/rc.txt
bench tuned gpt2-small 8 "$T" ocl:0 compile
bench tuned bert-base 8 "$T" ocl:0 compile
bench tuned vit_b_16 64 "" ocl:0 compile
cp -r $XDG_CACHE_HOME/fade/tune $R/tune-cache 2>/dev/null
cat $R/rc.txt; tail -25 $R/tune.txt
for d in $R/*/*/; do python3 -m fade compare $d/models.jsonl --by device --markdown $d/table.md > /dev/null 2>&1; grep "^|" $d/table.md | tail -n +3; done
tar czf $OUT/tuned.tgz -C /tmp tuned
