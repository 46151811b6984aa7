#!/bin/bash
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || echo "wheels failed"
mkdir -p /etc/OpenCL/vendors; echo $(ldconfig -p | grep -o '/.*libnvidia-opencl.so.1' | head -1) > /etc/OpenCL/vendors/nvidia.icd
mkdir -p /tmp/oclx; for d in .ocl/*.deb; do dpkg -x $d /tmp/oclx; done
export LD_LIBRARY_PATH=/tmp/oclx/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH PYTHONPATH=$PWD/src:/tmp/site
export XDG_CACHE_HOME=${FB_XDG:-/tmp/xdg-empty}
R=/tmp/fg; mkdir -p $R; pack() { tar czf $OUT/fg.tgz -C /tmp fg; }
nvidia-smi --query-gpu=name,driver_version,power.limit,utilization.gpu --format=csv > $R/gpu.txt; cp .gpu/commit.txt $R/; echo "XDG_CACHE_HOME=$XDG_CACHE_HOME" >> $R/commit.txt
echo "== checks $(date +%T)"; timeout 200 python3 -m pytest -q -p no:cacheprovider -p no:fade_guard tests/ocl/device_checks.py > $R/device_checks.txt 2>&1; echo "checks rc=$?"; tail -2 $R/device_checks.txt; pack
echo "== micro $(date +%T)"; for d in ocl:0 cuda:0; do timeout 90 python3 -m fade bench micro --device $d --only "gemm/fp32/8192x8192x8192,memory/copy/*,launch/*" -o $R/micro-${d%:0}.jsonl > $R/micro-${d%:0}.txt 2>&1; grep -h -E "gemm/|copy/1GiB|launch/" $R/micro-${d%:0}.txt | grep -v "│" | head -5; done; pack
echo "== models $(date +%T)"
timeout 280 python3 -m fade bench models --device ocl:0,cuda:0 --models alexnet,resnet18,resnet50,vgg16,mobilenet_v2 --batch 64 --mode both --variants fp32+cudnn_benchmark=on --timing-budget 30 -o $R/models.jsonl --json $R/summary.json > $R/models_log.txt 2>&1; echo "bench rc=$?"
python3 -m fade compare $R/models.jsonl --by device --baseline cuda:0 --markdown $R/table.md > $R/compare.txt 2>&1; cat $R/table.md | head -14; pack
echo "== kernels $(date +%T)"
timeout 120 python3 benchmarks/ocl_kernels.py $R/kernels > $R/kernels_log.txt 2>&1; echo "kernels rc=$?"; grep -h "host-bound" $R/kernels/kernels.md | cut -c1-160; pack
echo "== probe $(date +%T)"; timeout 100 python3 .gpu/opprobe.py $R/opprobe.json mobilenet_v2:infer mobilenet_v2:train > $R/opprobe_log.txt 2>&1; grep -v "^    " $R/opprobe_log.txt | cut -c1-300; pack
echo "== done $(date +%T)"
