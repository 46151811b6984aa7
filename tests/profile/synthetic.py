"""Build small Chrome traces shaped like torch.profiler's (Kineto categories and args), with known timings."""

from __future__ import annotations


class TraceBuilder:
    def __init__(self, runtime_prefix: str = "cuda"):
        self.events = []
        self.correlation = 0
        self.prefix = runtime_prefix  # "cuda" or "hip": names of the runtime calls

    def step(self, number: int, start: float, end: float) -> "TraceBuilder":
        self.events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{number}", "pid": 1,
                            "tid": 1, "ts": start, "dur": end - start, "args": {}})
        return self

    def kernel(self, name: str, launch: float, start: float, end: float, *, stream: int = 7, device: int = 0,
               category: str = "kernel", nbytes=None) -> "TraceBuilder":
        self.correlation += 1
        call = f"{self.prefix}LaunchKernel" if category == "kernel" else f"{self.prefix}MemcpyAsync"
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": call, "pid": 1, "tid": 1, "ts": launch,
                            "dur": 3.0, "args": {"correlation": self.correlation}})
        args = {"device": device, "stream": stream, "correlation": self.correlation}
        if nbytes is not None:
            args["bytes"] = nbytes
        self.events.append({"ph": "X", "cat": category, "name": name, "pid": device, "tid": stream, "ts": start,
                            "dur": end - start, "args": args})
        return self

    def runtime(self, name: str, start: float, end: float) -> "TraceBuilder":
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1, "ts": start,
                            "dur": end - start, "args": {}})
        return self

    def cpu_op(self, name: str, start: float, end: float, **args) -> "TraceBuilder":
        self.events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": start,
                            "dur": end - start, "args": args})
        return self

    def trace(self) -> dict:
        return {"schemaVersion": 1, "deviceProperties": [], "traceEvents": list(self.events)}


GEMM = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
        "_kernel__5x_cublas")
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >"


def launch_bound_trace() -> dict:
    """One 1000 us step: 280 us of kernels, 720 us of idle, all of it waiting on the host to launch.

    Gaps: [0, 50] before the first kernel (launched at 10), [250, 620] (the next launch comes at 600, after
    the device went idle at 250), and [700, 1000] after the last kernel while the host finishes the step.
    """
    return (TraceBuilder()
            .step(1, 0.0, 1000.0)
            .cpu_op("aten::mm", 5.0, 40.0, **{"Input Dims": [[128, 256], [256, 512]]})
            .kernel(GEMM, launch=10.0, start=50.0, end=150.0)
            .kernel(ADD, launch=20.0, start=150.0, end=250.0)
            .kernel(ADD, launch=600.0, start=620.0, end=700.0)
            .trace())


def mixed_idle_trace() -> dict:
    """Step 1 as launch_bound_trace; step 2 [1000, 2000] has each idle cause once:

    - [1000, 1020] host wait (first kernel launched at 1010),
    - [1500, 1530] sync wait (cudaStreamSynchronize 1015..1505 overlaps it),
    - [1600, 1700] other (the kernel on stream 9 was launched at 1520, before the gap began),
    - [1990, 2000] host wait (nothing follows in the step).
    Step 2 busy: 480 + 70 + 290 = 840 us.
    """
    builder = TraceBuilder()
    builder.events = launch_bound_trace()["traceEvents"]
    builder.correlation = 3
    return (builder
            .step(2, 1000.0, 2000.0)
            .kernel(GEMM, launch=1010.0, start=1020.0, end=1500.0)
            .runtime("cudaStreamSynchronize", 1015.0, 1505.0)
            .kernel(ADD, launch=1510.0, start=1530.0, end=1600.0)
            .kernel(ADD, launch=1520.0, start=1700.0, end=1990.0, stream=9)
            .trace())
