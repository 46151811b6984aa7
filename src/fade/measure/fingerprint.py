"""The stack fingerprint stored with every result: library versions, backend flags and the env that shape speed.

Read from torch's own getters, in the process that measures. Reading never raises: a getter that fails
leaves None and its reason under `errors` (torch >= 2.9 raises when the legacy and the new TF32 APIs were
mixed, for example).
"""

from __future__ import annotations

import os
import platform
from typing import Callable, Mapping, Optional

# Variables whose names start with these can change which kernels run or how fast they are.
ENV_PREFIXES = (
    "PYTORCH_",
    "TORCH_",
    "TORCHINDUCTOR_",
    "TRITON_",
    "CUDA_",
    "CUBLAS_",
    "CUBLASLT_",
    "CUDNN_",
    "NVIDIA_",  # NVIDIA_TF32_OVERRIDE
    "NCCL_",
    "HIP_",
    "HSA_",
    "ROCR_",
    "ROCM_",
    "ROCBLAS_",
    "HIPBLASLT_",
    "MIOPEN_",
    "AMD_",
    "GPU_",
    "RCCL_",
    "OMP_",
    "MKL_",
    "KMP_",
    "DNNL_",
    "ONEDNN_",
    "FADE_",
)


def stack_fingerprint(environ: Optional[Mapping[str, str]] = None) -> dict:
    """Versions, backend flags, threads and relevant env of this process's torch stack."""
    environ = os.environ if environ is None else environ
    errors: dict = {}
    fingerprint = {
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
        "env": {name: value for name, value in sorted(environ.items()) if name.startswith(ENV_PREFIXES)},
        "errors": errors,
    }
    try:
        import torch
    except ImportError as error:
        errors["torch"] = str(error)
        fingerprint["torch"] = None
        return fingerprint

    def read(key: str, getter: Callable):
        try:
            return getter()
        except Exception as error:
            errors[key] = f"{type(error).__name__}: {error}".splitlines()[0][:200]
            return None

    is_rocm = torch.version.hip is not None
    library_version = read("cudnn_version", torch.backends.cudnn.version)
    fingerprint["torch"] = {
        "version": torch.__version__,
        "git_version": read("git_version", lambda: torch.version.git_version),
        "cuda": torch.version.cuda,
        "hip": torch.version.hip,
        "cudnn": None if is_rocm else library_version,
        "miopen": library_version if is_rocm else None,  # torch.backends.cudnn reports MIOpen on ROCm
        "debug": read("debug", lambda: torch.version.debug),
    }
    cuda_backends = torch.backends.cuda
    fingerprint["backends"] = {
        # The new precision API (torch >= 2.9): "ieee", "tf32" or "none" (= follow the parent setting).
        "fp32_precision": read("fp32_precision", lambda: torch.backends.fp32_precision),
        "matmul_fp32_precision": read("matmul_fp32_precision", lambda: cuda_backends.matmul.fp32_precision),
        "cudnn_fp32_precision": read("cudnn_fp32_precision", lambda: torch.backends.cudnn.fp32_precision),
        "cudnn_conv_fp32_precision": read(
            "cudnn_conv_fp32_precision", lambda: torch.backends.cudnn.conv.fp32_precision
        ),
        # The legacy flags, which older torch has alone.
        "matmul_allow_tf32": read("matmul_allow_tf32", lambda: cuda_backends.matmul.allow_tf32),
        "cudnn_allow_tf32": read("cudnn_allow_tf32", lambda: torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": read("float32_matmul_precision", torch.get_float32_matmul_precision),
        "allow_fp16_reduced_precision_reduction": read(
            "allow_fp16_reduced_precision_reduction",
            lambda: cuda_backends.matmul.allow_fp16_reduced_precision_reduction,
        ),
        "allow_bf16_reduced_precision_reduction": read(
            "allow_bf16_reduced_precision_reduction",
            lambda: cuda_backends.matmul.allow_bf16_reduced_precision_reduction,
        ),
        "cudnn_enabled": read("cudnn_enabled", lambda: torch.backends.cudnn.enabled),
        "cudnn_benchmark": read("cudnn_benchmark", lambda: torch.backends.cudnn.benchmark),
        "cudnn_deterministic": read("cudnn_deterministic", lambda: torch.backends.cudnn.deterministic),
        "deterministic_algorithms": read("deterministic_algorithms", torch.are_deterministic_algorithms_enabled),
        "miopen_immediate": read("miopen_immediate", lambda: torch.backends.miopen.immediate),
        "tunableop_enabled": read("tunableop_enabled", torch.cuda.tunable.is_enabled),
        "tunableop_tuning": read("tunableop_tuning", torch.cuda.tunable.tuning_is_enabled),
        "preferred_blas_library": read("preferred_blas_library", lambda: cuda_backends.preferred_blas_library().name),
        "preferred_linalg_library": read(
            "preferred_linalg_library", lambda: cuda_backends.preferred_linalg_library().name
        ),
        "preferred_rocm_fa_library": read(
            "preferred_rocm_fa_library", lambda: cuda_backends.preferred_rocm_fa_library().name
        ),
        "sdp_flash": read("sdp_flash", cuda_backends.flash_sdp_enabled),
        "sdp_mem_efficient": read("sdp_mem_efficient", cuda_backends.mem_efficient_sdp_enabled),
        "sdp_math": read("sdp_math", cuda_backends.math_sdp_enabled),
        "sdp_cudnn": read("sdp_cudnn", cuda_backends.cudnn_sdp_enabled),
        "mkldnn_enabled": read("mkldnn_enabled", lambda: torch.backends.mkldnn.enabled),
    }
    fingerprint["threads"] = {
        "num_threads": read("num_threads", torch.get_num_threads),
        "num_interop_threads": read("num_interop_threads", torch.get_num_interop_threads),
        "cpu_count": os.cpu_count(),
    }
    return fingerprint
