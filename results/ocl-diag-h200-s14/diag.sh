#!/bin/bash
# Issue 27, session 14: where the transformers' graph-mode steps go after the layer-norm and reduction kernels
# (OpenCL profiling events per kernel, device busy vs step). One GPU, one profile after another.
export PYTHONUNBUFFERED=1
G=$PWD/.gpu; W=/tmp/w; mkdir -p $W; tar xf $G/head.tar -C $W; cd $W
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $G/whl/*.whl || echo "wheels failed"
mkdir -p /etc/OpenCL/vendors; echo $(ldconfig -p | grep -o '/.*libnvidia-opencl.so.1' | head -1) > /etc/OpenCL/vendors/nvidia.icd
mkdir -p /tmp/oclx; for d in $G/deb/*.deb; do dpkg -x $d /tmp/oclx; done
export LD_LIBRARY_PATH=/tmp/oclx/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH PYTHONPATH=$W/src:/tmp/site XDG_CACHE_HOME=/tmp/xdg-empty
R=/tmp/diag; mkdir -p $R; cp $G/commit.txt $R/
prof() {  # model, batch, mode, extra
  local d=$R/$1-$3; mkdir -p $d
  timeout 160 python3 -m fade profile $1 --device ocl:0 --batch $2 --mode $3 $4 --variants compile -o $d > $d/ocl.txt 2>&1; echo "$1 $3 rc=$? $SECONDS" >> $R/rc.txt
}
prof gpt2-small 8 train "--size 512"
prof vit_b_16 64 infer
cat $R/rc.txt
tar czf $OUT/diag.tgz --exclude="*.trace.json*" -C /tmp diag
