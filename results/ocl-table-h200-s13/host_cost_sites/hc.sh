#!/bin/bash
# benchmarks/ocl_host_cost.py on one H200 at the carried commit (graph mode after per-launch kernel objects)
export PYTHONUNBUFFERED=1
G=$PWD/.gpu; W=/tmp/w; mkdir -p $W; tar xf $G/head.tar -C $W; cd $W
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $G/whl/*.whl || echo "wheels failed"
mkdir -p /etc/OpenCL/vendors; echo $(ldconfig -p | grep -o '/.*libnvidia-opencl.so.1' | head -1) > /etc/OpenCL/vendors/nvidia.icd
mkdir -p /tmp/oclx; for d in $G/deb/*.deb; do dpkg -x $d /tmp/oclx; done
export LD_LIBRARY_PATH=/tmp/oclx/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH PYTHONPATH=$W/src:/tmp/site XDG_CACHE_HOME=/tmp/xdg-empty
R=/tmp/hc; mkdir -p $R; cp $G/commit.txt $R/
timeout 110 python3 benchmarks/ocl_host_cost.py $R/host_cost.json --models mobilenet_v3_small --batch 64 --steps 8 --variants graph > $R/host_cost.txt 2>&1; echo "rc=$?" >> $R/host_cost.txt
tar czf $OUT/hc.tgz -C /tmp hc
grep -v Warn $R/host_cost.txt | grep -E "^\{|launch|rc="
