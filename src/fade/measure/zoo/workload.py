"""A workload: a network, one synthetic batch, a loss and an optimizer; built from the zoo or a user's function.

A user's function (`--models mypkg.bench:make`) is called with the batch size if it takes an argument, else
with none, and returns either a `Workload` or the tuple `(model, batch, loss_fn)`:

    def make(batch_size):
        model = MyNet()
        batch = (torch.randn(batch_size, 3, 64, 64), torch.randint(0, 10, (batch_size,)))  # (inputs, target)
        return model, batch, torch.nn.functional.cross_entropy

`batch` is `(inputs, target)`: `inputs` is a tensor or a tuple of tensors passed to `model(*inputs)`, and
`loss_fn(output, target)` returns a scalar. A bare tensor is `(inputs, None)` and then `loss_fn(output)` is
called. FADE moves every tensor to the device once; the batch stays there and is reused every step.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from fade.errors import FadeUsageError
from fade.measure.case import uses_host_generator
from fade.measure.zoo import ZOO, ZooModel

SGD_LR = 0.01  # torchvision's recipe for AlexNet and VGG (ResNet uses 0.1 with warm-up; 0.01 is stable from random init on any of the five)
SGD_MOMENTUM = 0.9
ADAMW_LR = 1e-4  # BERT's pre-training rate; GPT-2 small trains at 2.5e-4-6e-4, so 1e-4 is on the safe side
ADAMW_WEIGHT_DECAY = 0.01
DATA_SEED = 1  # the synthetic batch; the weights use the case's seed


@dataclass
class Workload:
    """One network with one resident batch. `samples` is the batch size the throughput counts."""

    model: Any  # torch.nn.Module
    inputs: tuple  # positional arguments of model(*inputs)
    target: Any  # second argument of loss_fn, or None
    loss_fn: Callable
    samples: int
    make_optimizer: Optional[Callable] = None  # parameters -> torch.optim.Optimizer; None: SGD, momentum 0.9
    description: str = ""
    facts: dict = field(default_factory=dict)  # what the record states about the workload (sizes, optimizer)

    def loss(self, output):
        return self.loss_fn(output) if self.target is None else self.loss_fn(output, self.target)

    def optimizer(self):
        import torch

        parameters = [parameter for parameter in self.model.parameters() if parameter.requires_grad]
        if self.make_optimizer is not None:
            return self.make_optimizer(parameters)
        return torch.optim.SGD(parameters, lr=SGD_LR, momentum=SGD_MOMENTUM)


def zoo_workload(entry: ZooModel, batch: int, size: int, device: str) -> Workload:
    """Build `entry` on `device` from the current RNG state, with a synthetic batch made on the device."""
    import torch
    import torch.nn.functional as F

    function = import_function(entry.builder)
    # Parameters and data are created and initialised on the device itself; a device whose random ops run on
    # the CPU generator (fade.ocl) gets them made on the CPU and copied: the same values, and no CPU fallback
    # counted against the case for initialising them.
    build_device = "cpu" if uses_host_generator(device) else device
    with torch.device(build_device):
        model = function()
    model.to(device)
    generator = torch.Generator(device=build_device).manual_seed(DATA_SEED)
    if entry.kind == "image":
        inputs = (torch.randn(batch, 3, size, size, generator=generator, device=build_device).to(device),)
        target = torch.randint(0, entry.classes, (batch,), generator=generator, device=build_device).to(device)
        loss_fn = F.cross_entropy
    else:
        vocab = model.config.vocab_size
        tokens = torch.randint(0, vocab, (batch, size), generator=generator, device=build_device).to(device)
        inputs = (tokens,)
        if entry.name.startswith("gpt2"):
            target = torch.roll(tokens, shifts=-1, dims=1)  # next token (the last position wraps around)
            loss_fn = _next_token_loss
        else:
            target = torch.randint(0, entry.classes, (batch,), generator=generator, device=build_device).to(device)
            loss_fn = F.cross_entropy
    if entry.optimizer == "adamw":
        make_optimizer, optimizer_text = _adamw, f"AdamW lr {ADAMW_LR} weight decay {ADAMW_WEIGHT_DECAY}"
    else:  # Workload.optimizer's default
        make_optimizer, optimizer_text = None, f"SGD lr {SGD_LR} momentum {SGD_MOMENTUM}"
    loss_text = "next-token cross-entropy" if loss_fn is _next_token_loss else "cross-entropy"
    facts = {"kind": entry.kind, "size": size, "size_unit": entry.size_unit, "optimizer": optimizer_text, "loss": loss_text}
    # Workload(model, inputs, target, loss_fn, samples, make_optimizer, description, facts)
    return Workload(model, inputs, target, loss_fn, batch, make_optimizer, entry.note, facts)


def _next_token_loss(logits, target):
    import torch.nn.functional as F

    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def _adamw(parameters):
    import torch

    return torch.optim.AdamW(parameters, lr=ADAMW_LR, weight_decay=ADAMW_WEIGHT_DECAY)


def user_workload(spec: str, batch: int, device: str) -> Workload:
    """Call the user's `module:function` and move what it returns to `device`."""
    import torch

    function = import_function(spec)
    takes_batch = _accepts_an_argument(function)
    returned = function(batch) if takes_batch else function()
    if isinstance(returned, Workload):
        workload = returned
    else:
        if not isinstance(returned, (tuple, list)) or len(returned) != 3:
            raise TypeError(f"{spec} returned {type(returned).__name__}; expected (model, batch, loss_fn) or a Workload")
        model, example, loss_fn = returned
        if isinstance(example, torch.Tensor):
            inputs, target = (example,), None
        elif isinstance(example, (tuple, list)) and len(example) == 2:
            inputs, target = example
            inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
        else:
            raise TypeError(f"{spec}: the batch must be a tensor or (inputs, target), not {type(example).__name__}")
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"{spec}: the model must be a torch.nn.Module, not {type(model).__name__}")
        samples = inputs[0].shape[0] if inputs and isinstance(inputs[0], torch.Tensor) and inputs[0].dim() else batch
        workload = Workload(model, inputs, target, loss_fn, samples, description=spec)
    workload.model = workload.model.to(device)
    workload.inputs = tuple(_to_device(value, device) for value in workload.inputs)
    workload.target = _to_device(workload.target, device)
    workload.facts = {"kind": "user", "batch_given": takes_batch, **workload.facts}
    return workload


def _to_device(value, device: str):
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(_to_device(item, device) for item in value)
    if isinstance(value, dict):
        return {key: _to_device(item, device) for key, item in value.items()}
    return value


def _accepts_an_argument(function) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in parameters)


def is_user_spec(name: str) -> bool:
    return ":" in name


@contextlib.contextmanager
def _current_directory_importable():
    """Let `module:function` name a module in the current directory, as `python -m` would."""
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        yield
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def import_function(spec: str):
    """The callable named by "package.module:function". FadeUsageError saying what is missing."""
    module_name, _, function_name = spec.partition(":")
    if not module_name or not function_name:
        raise FadeUsageError(f"--models {spec!r}: a user workload is written module:function, e.g. mybench:make_model")
    try:
        with _current_directory_importable():
            module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise FadeUsageError(
            f"--models {spec!r}: no module named {error.name!r} (searched the current directory and sys.path)"
        ) from None
    except Exception as error:  # the user's module raised while importing
        first_line = f"{type(error).__name__}: {error}".splitlines()[0]
        raise FadeUsageError(f"--models {spec!r}: importing {module_name} failed: {first_line}") from None
    function = module
    for part in function_name.split("."):
        function = getattr(function, part, None)
        if function is None:
            raise FadeUsageError(f"--models {spec!r}: module {module_name} has no attribute {function_name!r}")
    if not callable(function):
        raise FadeUsageError(f"--models {spec!r}: {function_name} is a {type(function).__name__}, not a function")
    return function


def build_workload(name: str, batch: int, size: Optional[int], device: str) -> Workload:
    """A zoo network by name (at `size`, or its default) or a user's `module:function`, on `device`."""
    if is_user_spec(name):
        return user_workload(name, batch, device)
    entry = ZOO[name]
    return zoo_workload(entry, batch, size or entry.default_size, device)
