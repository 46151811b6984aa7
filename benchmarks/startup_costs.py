"""Where `fade doctor`'s start-up time goes: each step timed in a fresh child process (wall seconds)."""

import subprocess
import sys
import time

STEPS = {
    "python -c pass": "pass",
    "import fade.cli": "import fade.cli",
    "import torch": "import torch",
    "torch + cuda.is_available": "import torch; torch.cuda.is_available()",
    "torch + device props (CUDA init)": "import torch; torch.cuda.get_device_properties(0)",
    "torch + props + cudnn.version": "import torch; torch.cuda.get_device_properties(0); torch.backends.cudnn.version()",
    "fade torch probe": "from fade.collect.torch_probe import probe_torch; probe_torch()",
}
for label, code in STEPS.items():
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=False)
        times.append(time.perf_counter() - t0)
    print(f"{label:40s} {min(times):6.2f} s (min of 3)")
for tool in (["nvidia-smi", "-q"], ["rocminfo"], ["lspci", "-nn"]):
    t0 = time.perf_counter()
    try:
        subprocess.run(tool, capture_output=True, timeout=20)
        print(f"{' '.join(tool):40s} {time.perf_counter() - t0:6.2f} s")
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"{' '.join(tool):40s} unavailable ({type(exc).__name__})")
