"""One workload's steps under one configuration: the workload made ready (layout, compile), the step itself
(training or inference), the checked steps from a fixed seed, and fp32's reference for them.

Used alike by the model bench (fade.measure.suites.models.case), the tuner's trials (fade.act.tune.trial) and
the pre-tuner's child (fade.act.tune.pretune), so all three run the same step. Method:

Build
    torch.manual_seed(WEIGHT_SEED), then the caller builds the network and its batch on the device.
    apply_config turns the model-level knobs: channels_last (model and 4-D float inputs) first, then
    torch.compile(mode). StepRunner makes the optimizer (make_optimizer: the workload's, rebuilt with
    foreach=/fused= for optimizer_impl), a GradScaler for amp-fp16 training, and the autocast and SDPA
    backend contexts every step runs in.
Step
    Training: zero_grad(set_to_none) + autocast forward + loss + backward (through the GradScaler for
    amp-fp16) + optimizer.step(). Inference: a forward pass under torch.inference_mode in eval mode. With a
    FiniteTracker, every step's loss (or output) joins the device-side finiteness sum (finite.py); the step
    launches no kernel of its own for it.
Checked steps
    checked_steps(n) runs n steps from the RNG state STEP_SEED (dropout masks: the reference and the
    configuration draw the same stream) and reads their losses once at the end (inference: the loss of the
    forward output), plus how many optimizer updates a GradScaler let through (its scale halves on a skipped
    step; reading it is a sync, checked steps only) and whether the last step's gradients are finite. The
    first step can run under torch.utils.flop_counter.FlopCounterMode for the FLOPs of one step.
Reference
    fp32_reference: the same weights run the checked steps in fp32 with TF32 off (config.reference_config()), then
    again from weights perturbed by ROUNDING_PERTURBATION (training only): the rounding spread numerics.py's
    loss check allows for. The weights are restored after.
Timing
    freeze_weights sets the learning rate to TIMED_LEARNING_RATE for the timed steps: every kernel of the
    update still runs (SGD's and AdamW's foreach updates have no zero-rate shortcut), but the weights stay
    where the checked steps left them. Hundreds of steps on one fixed batch otherwise drive a network
    without batch norm to divergence (VGG-16 at batch 2 and lr 0.01 reaches NaN by step 8 on the CPU), which
    would make a healthy configuration look invalid.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field
from typing import Optional

from fade.measure.step.config import StepConfig, pinned, reference_config
from fade.measure.step.finite import FiniteTracker

WEIGHT_SEED = 0  # weights; the fp32 reference and the configuration start from the same ones
STEP_SEED = 1234  # dropout masks of the checked steps: the reference and the configuration draw the same stream
LOSS_CHECK_STEPS = 5  # steps before the loss is compared; enough for momentum to move the weights
LOSS_CHECK_STEPS_QUICK = 2
ROUNDING_PERTURBATION = 2.0**-8  # relative weight noise: the unit roundoff of bfloat16
GRAPH_COMPILE_MODES = ("reduce-overhead", "max-autotune")  # torch.compile modes whose step replays CUDA graphs
TIMED_LEARNING_RATE = 0.0  # see "Timing": same work per step, no divergence on a fixed batch
# Devices whose inference steps run under torch.no_grad instead of torch.inference_mode: fade.ocl's Python
# backend cannot make views of inference tensors ("Cannot set version_counter for inference tensor", measured
# on a convolution's weight.view). Recorded per case as in_effect["grad_mode"].
NO_INFERENCE_MODE_DEVICES = ("ocl",)
SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION", "math": "MATH"}


def checked_step_count(training: bool, quick: bool) -> int:
    """LOSS_CHECK_STEPS (LOSS_CHECK_STEPS_QUICK when quick) when training; one forward pass when inferring."""
    if not training:
        return 1
    return LOSS_CHECK_STEPS_QUICK if quick else LOSS_CHECK_STEPS


def to_channels_last(value):
    """A 4-D floating tensor in channels-last memory format; anything else as it is."""
    import torch

    if torch.is_tensor(value) and value.dim() == 4 and value.is_floating_point():
        return value.contiguous(memory_format=torch.channels_last)
    return value


def apply_config(workload, config: StepConfig, *, reset_compiler: bool = True):
    """The module to step: workload.model with channels_last and torch.compile applied as `config` says (the
    workload's 4-D inputs move to channels-last too). reset_compiler: torch._dynamo.reset() first, so compiled
    code of an earlier case (same forward, other module) does not count."""
    import torch

    runnable = workload.model
    if config.uses_channels_last:
        runnable = runnable.to(memory_format=torch.channels_last)
        workload.inputs = tuple(to_channels_last(value) for value in workload.inputs)
    mode = config.compile_mode
    if mode is not None:
        import torch._dynamo

        if reset_compiler:
            torch._dynamo.reset()
        if _on_ocl(runnable, workload.inputs):  # fade.ocl's graph mode: the backend fade.ocl.register() named
            runnable = torch.compile(runnable, backend="fade_ocl")
        else:
            runnable = torch.compile(runnable) if mode == "default" else torch.compile(runnable, mode=mode)
    return runnable


def _on_ocl(model, inputs) -> bool:
    """Whether the step runs on fade.ocl's device (its parameters or inputs are there)."""
    import torch

    tensors = [*model.parameters(), *(value for value in inputs if isinstance(value, torch.Tensor))]
    return any(tensor.device.type == "ocl" for tensor in tensors)


def make_optimizer(workload, implementation: str = "default"):
    """The workload's optimizer, rebuilt with foreach=True or fused=True when `implementation` asks."""
    optimizer = workload.optimizer()
    if implementation == "default":
        return optimizer
    import inspect

    # Only what the constructor takes: torch 2.11's AdamW keeps `decoupled_weight_decay` in its defaults
    # (it subclasses Adam) but AdamW(...) refuses it as an argument.
    accepted = set(inspect.signature(type(optimizer).__init__).parameters) - {"self", "params", "foreach", "fused"}
    groups = [{key: value for key, value in group.items() if key not in ("foreach", "fused")} for group in optimizer.param_groups]
    defaults = {key: value for key, value in optimizer.defaults.items() if key in accepted}
    return type(optimizer)(groups, **{**defaults, implementation: True})


@dataclass
class CheckedSteps:
    """What the checked steps saw; numerics.check_training reads `numerics()`."""

    losses: list  # one float per step (inference: the loss of the forward output)
    updates_before_last: int  # optimizer updates before the last step: fewer than steps - 1 when a GradScaler skipped some
    grads_finite: bool  # every gradient of the last step (True with a GradScaler: its skipped steps are the recipe)
    flops_by_op: dict = field(default_factory=dict)  # of the first step, when counted

    def numerics(self, mode: str) -> dict:
        return {"mode": mode, "losses": self.losses, "grads_finite": self.grads_finite, "updates_before_last": self.updates_before_last}


class StepRunner:
    """Steps of one workload under one configuration; `tracker` (None unless track_finite) sums every step's
    loss or output on the device for the finiteness check."""

    def __init__(self, workload, module, config: StepConfig, training: bool, device: str, *, track_finite: bool = True):
        import torch

        self.workload = workload
        self.module = module
        self.config = config
        self.training = training
        self.device = device
        self.device_type = device.split(":", 1)[0]
        self.tracker = FiniteTracker(device) if track_finite else None
        module.train(training)
        self.autocast_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(config.autocast_dtype)
        self.optimizer = make_optimizer(workload, config.optimizer_impl) if training else None
        self.scaler = torch.amp.GradScaler(self.device_type) if training and config.autocast_dtype == "fp16" else None
        self.checked_learning_rate = None  # the optimizer's rate in the checked steps, once frozen
        self.sdpa_backend = SDPA_BACKENDS.get(config.sdpa_backend)  # None: torch picks per call
        # compile modes that replay CUDA graphs: their outputs are overwritten by the next step (GRAPH_COMPILE_MODES)
        self.graph_outputs = config.compile_mode in GRAPH_COMPILE_MODES

    def autocast(self):
        import torch

        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.autocast_dtype)

    def sdpa(self):
        """The SDPA backend context of the sdpa_backend knob, or a null context at its baseline."""
        if self.sdpa_backend is None:
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel(getattr(SDPBackend, self.sdpa_backend))

    def step(self):
        """One step; returns the loss (training) or the output (inference)."""
        if self.sdpa_backend is None:  # no context to enter: a launch-bound step counts every host microsecond
            return self._step()
        with self.sdpa():
            return self._step()

    def _step(self):
        import torch

        workload = self.workload
        if not self.training:
            with inference_context(self.device), self.autocast():
                output = self.module(*workload.inputs)
            if self.tracker is not None:
                self.tracker.add_output(output)
            return output
        self.optimizer.zero_grad(set_to_none=True)
        with self.autocast():
            output = self.module(*workload.inputs)
            loss = workload.loss(output)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        if self.tracker is not None:
            # under CUDA graphs a loss computed inside the compiled module is a graph output, overwritten by the
            # next replay: keep a copy (one 0-dim copy kernel, only for those configurations)
            self.tracker.add_loss(loss.detach().clone() if self.graph_outputs else loss)
        return loss

    def checked_steps(self, steps: int, *, count_flops: bool = False) -> CheckedSteps:
        """`steps` steps from STEP_SEED (module docstring, "Checked steps"). Losses are read once at the end:
        a sync point, outside every timed region. Non-finite losses are returned, not raised."""
        import torch

        torch.manual_seed(STEP_SEED)
        flops_by_op: dict = {}
        losses = []
        applied = []  # per step: did the optimizer update (a GradScaler skips steps with inf gradients)
        for index in range(steps):
            scale_before = self.scaler.get_scale() if self.scaler is not None else None  # a sync; checked steps only
            if count_flops and index == 0:
                from torch.utils.flop_counter import FlopCounterMode

                with FlopCounterMode(display=False) as counter:
                    result = self.step()
                flops_by_op = {str(op): int(count) for op, count in counter.get_flop_counts().get("Global", {}).items()}
            else:
                result = self.step()
            if not self.training:
                with inference_context(self.device):
                    result = self.workload.loss(result.float() if torch.is_tensor(result) else result)
            # a copy: a loss the compiled module computed is a CUDA graph output that the next step overwrites
            # (transformers' models compute their loss from labels inside forward; torch raises on reading it)
            losses.append(result.detach().clone())
            applied.append(self.scaler is None or self.scaler.get_scale() >= scale_before)  # a skipped step halves the scale
        grads_finite = True
        if self.training and self.scaler is None:  # with a scaler, a skipped step's inf gradients are the recipe working
            norms = [parameter.grad.detach().float().abs().sum() for parameter in self.workload.model.parameters() if parameter.grad is not None]
            if norms:
                grads_finite = bool(torch.isfinite(torch.stack(norms).sum()))
        values = [float(loss) for loss in losses]  # sync point, outside every timed region
        return CheckedSteps(values, sum(applied[:-1]), grads_finite, flops_by_op)

    def freeze_weights(self) -> None:
        """Learning rate TIMED_LEARNING_RATE from now on (the timed steps); see the module docstring."""
        if self.optimizer is None:
            return
        self.checked_learning_rate = self.optimizer.param_groups[0]["lr"]
        for group in self.optimizer.param_groups:
            group["lr"] = TIMED_LEARNING_RATE

    def in_effect(self) -> dict:
        """What ran, read from the objects themselves."""
        import torch

        first_input = next((value for value in self.workload.inputs if torch.is_tensor(value)), None)
        parameter = next(self.workload.model.parameters(), None)
        memory_format = None
        if first_input is not None and first_input.dim() == 4:
            strided_last = first_input.is_contiguous(memory_format=torch.channels_last) and not first_input.is_contiguous()
            memory_format = "channels_last" if strided_last else "contiguous"
        return {
            "autocast_dtype": None if self.autocast_dtype is None else str(self.autocast_dtype).replace("torch.", ""),
            "grad_scaler": self.scaler is not None,
            "parameter_dtype": None if parameter is None else str(parameter.dtype).replace("torch.", ""),
            "input_memory_format": memory_format,
            "compiled": type(self.module).__name__ == "OptimizedModule",
            "training": self.training,
            "grad_mode": None if self.training else inference_grad_mode(self.device),
        }


def inference_grad_mode(device: str) -> str:
    """"inference_mode", or "no_grad" on NO_INFERENCE_MODE_DEVICES."""
    return "no_grad" if device.split(":", 1)[0] in NO_INFERENCE_MODE_DEVICES else "inference_mode"


def inference_context(device: str):
    """The grad mode an inference step runs under on `device` (inference_grad_mode)."""
    import torch

    return torch.no_grad() if inference_grad_mode(device) == "no_grad" else torch.inference_mode()


def copy_state(module) -> dict:
    """A copy of `module.state_dict()` made with tensor clones on the tensors' own device, for load_state_dict
    later. copy.deepcopy would clone storages through torch.UntypedStorage(n, device=...), which needs a C++
    allocator a Python backend (fade.ocl) lacks: it crashes there."""
    import torch

    return {name: value.detach().clone() if isinstance(value, torch.Tensor) else copy.deepcopy(value)
            for name, value in module.state_dict().items()}


def perturb(model, relative: float, *, seed: int = STEP_SEED) -> None:
    """Multiply every floating parameter by (1 + relative * N(0, 1)): rounding-sized noise, from `seed`."""
    import torch

    generator = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.is_floating_point():
                noise = torch.randn(parameter.shape, generator=generator).to(parameter.device, parameter.dtype)
                parameter.mul_(1 + relative * noise)


def fp32_reference(workload, training: bool, device: str, steps: int, *, count_flops: bool = False,
                   rounding: Optional[bool] = None) -> dict:  # fmt: skip
    """fp32 (TF32 off) on workload.model, eager, from its current weights: {"losses", "rounded_losses" (None
    without `rounding`, which defaults to `training`), "flops_by_op" (of the first step, when counted)}. The
    weights are back at their starting values after. Non-finite losses are returned, not raised."""
    rounding = training if rounding is None else rounding
    model = workload.model
    initial = copy_state(model)
    rounded = None
    fp32_config = reference_config()
    with pinned(fp32_config):
        reference = StepRunner(workload, model, fp32_config, training, device, track_finite=False).checked_steps(steps, count_flops=count_flops)
        if rounding:  # how far rounding alone moves fp32's own trajectory: the loss check's noise
            model.load_state_dict(initial)
            perturb(model, ROUNDING_PERTURBATION)
            rounded = StepRunner(workload, model, fp32_config, training, device, track_finite=False).checked_steps(steps).losses
    model.load_state_dict(initial)
    return {"losses": reference.losses, "rounded_losses": rounded, "flops_by_op": reference.flops_by_op}
