#!/bin/bash
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || echo "wheels failed"
mkdir -p /etc/OpenCL/vendors; echo $(ldconfig -p | grep -o '/.*libnvidia-opencl.so.1' | head -1) > /etc/OpenCL/vendors/nvidia.icd
mkdir -p /tmp/oclx; for d in .ocl/*.deb; do dpkg -x $d /tmp/oclx; done
export LD_LIBRARY_PATH=/tmp/oclx/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH PYTHONPATH=$PWD/src:/tmp/site
export XDG_CACHE_HOME=/tmp/xdg-empty
R=/tmp/fa; mkdir -p $R; pack() { tar czf $OUT/fa.tgz -C /tmp fa; }
nvidia-smi --query-gpu=name,driver_version,power.limit,utilization.gpu --format=csv > $R/gpu.txt; cp .gpu/commit.txt $R/
echo "== checks $(date +%T)"
timeout 200 python3 -m pytest -q -p no:cacheprovider -p no:fade_guard tests/ocl/device_checks.py > $R/device_checks.txt 2>&1; echo "checks rc=$?"; tail -3 $R/device_checks.txt; pack
echo "== micro $(date +%T)"
for d in ocl:0 cuda:0; do timeout 90 python3 -m fade bench micro --device $d --only 'gemm/fp32/8192x8192x8192,memory/copy/*,launch/*' -o $R/micro-${d%:0}.jsonl > $R/micro-${d%:0}.txt 2>&1; grep -h -E "gemm/|copy|launch/" $R/micro-${d%:0}.txt | grep -v "│" | head -6; done; pack
echo "== own-gemm A/B $(date +%T)"
for v in off auto; do echo "-- FADE_OCL_CONV_OWN_GEMM=$v"; FADE_OCL_CONV_OWN_GEMM=$v timeout 90 python3 .gpu/stepab.py $R/own-$v.json mobilenet_v2:infer mobilenet_v2:train resnet50:infer 2>&1 | grep -v Warn; done; pack
echo "== tuned A/B $(date +%T)"
for c in default tuned; do echo "-- CLBlast $c"; X=/tmp/xdg-empty; [ $c = tuned ] && X=$PWD/.gpu/xdg; XDG_CACHE_HOME=$X timeout 100 python3 .gpu/stepab.py $R/clblast-$c.json alexnet:train resnet18:train vgg16:train 2>&1 | grep -v Warn; done; pack
echo "== done $(date +%T)"
