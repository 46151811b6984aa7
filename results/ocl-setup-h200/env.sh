# Sourced by the device-machine scripts under results/ (run from the repository root with .gpu/ carried): the
# carried pyopencl wheels into /tmp/site, NVIDIA's OpenCL ICD registered, libclblast1 and ocl-icd unpacked from
# their .debs, and the environment that finds them. SRC: the tree whose src/ is imported (default: this one).
export PYTHONUNBUFFERED=1
G=$PWD/.gpu
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $G/whl/*.whl || echo "wheels failed"
mkdir -p /etc/OpenCL/vendors; echo $(ldconfig -p | grep -o '/.*libnvidia-opencl.so.1' | head -1) > /etc/OpenCL/vendors/nvidia.icd
mkdir -p /tmp/oclx; for d in $G/deb/*.deb; do dpkg -x $d /tmp/oclx; done
export LD_LIBRARY_PATH=/tmp/oclx/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH PYTHONPATH=${SRC:-$PWD}/src:/tmp/site XDG_CACHE_HOME=/tmp/xdg-empty
