"""How a causal LM generates greedily under each variant, and the model it runs: built from a shape with
transformers, random weights from a fixed seed, nothing downloaded.

Variants (VARIANTS), each a function `generate(prompt_ids, new_tokens) -> tokens (batch x new_tokens)`:

hf-generate
    `model.generate(ids, max_new_tokens=n, do_sample=False)`, as users call it (a DynamicCache grows per token).
hf-static
    The same with `cache_implementation="static"`: transformers preallocates the cache and, on CUDA/XPU
    devices, compiles the forward with torch.compile (mode "reduce-overhead") by itself; on the CPU it does
    not (`GenerationMixin._valid_auto_compile_criteria`). What happened is read back (`compiled`).
fade-loop
    FADE's lean greedy loop, gpt-fast's recipe (github.com/pytorch-labs/gpt-fast generate.py): one prefill of
    the prompt into a StaticCache allocated once per case for prompt + new tokens, then a single-token step
    (forward + argmax) called new_tokens - 1 times with precomputed position tensors: no Python work per token
    beyond the step call and a clone of its output token (a CUDA-graph replay overwrites its outputs). The
    step returns the logits beside the token (the graph materializes them for the argmax anyway), so the
    generation gate's teacher-forced run uses the very graph that is timed. The step is compiled with
    torch.compile(mode="reduce-overhead") on CUDA/ROCm and left eager elsewhere;
    `fade-loop+compile` and `fade-loop+eager` force either; `fade-loop+coordinate-descent` (gpt-fast's setting)
    and `fade-loop+max-autotune` compile it in those modes (STEP_COMPILE_MODES) anywhere. Each run starts with StaticCache.reset() (the
    cache counts the tokens it has taken, transformers 5: a run must start it at 0; the reset also zeroes the
    cache, a memset that lands in the time to first token, as hf-static's own reset does).

FadeLoop's decode options (what `fade tune --generate` searches; the bench's fade-loop is their first column):
    cache    "static" (the above) or "dynamic": a DynamicCache made per run, growing a token a step, as
             model.generate() keeps it by default; a compiled step needs the static cache (its shapes are fixed)
    compile  off, or a compile mode for the step (STEP_COMPILE_MODES): "reduce-overhead" (CUDA graphs),
             "reduce-overhead+coordinate-descent" (gpt-fast's), "default", "max-autotune-no-cudagraphs"
    sdpa     None (torch picks per call) or one SDPA backend forced around every forward: flash, efficient,
             cudnn, math (torch.nn.attention.sdpa_kernel)
"""

from __future__ import annotations

from typing import Callable

from fade.measure.case import torch_dtype
from fade.measure.step.runner import WEIGHT_SEED, inference_context

VARIANTS = ("hf-generate", "hf-static", "fade-loop", "fade-loop+compile", "fade-loop+eager",
            "fade-loop+coordinate-descent", "fade-loop+max-autotune")
# fade-loop spellings whose step compiles in a mode of STEP_COMPILE_MODES other than COMPILE_MODE, on any device
LOOP_MODES = {"fade-loop+coordinate-descent": "reduce-overhead+coordinate-descent", "fade-loop+max-autotune": "max-autotune"}
COMPILE_MODE = "reduce-overhead"  # gpt-fast's: CUDA graphs remove the per-kernel launch cost of a decode step
AUTO_COMPILE_DEVICE_TYPES = ("cuda",)  # fade-loop compiles itself there (CUDA and ROCm builds); elsewhere eager
PROMPT_SEED = 1  # the prompt's token ids: a different stream from the weights'


def build_model(config, device: str):
    """The model of `config` on `device` in fp32, in eval mode, SDPA attention: its weights drawn from WEIGHT_SEED
    on the device, or loaded from `config.weights` (a local model folder). Greedy runs never stop early: the model
    has no eos token."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if config.weights:  # a local model folder: its own weights, read from disk (local_files_only: no download)
        model = AutoModelForCausalLM.from_pretrained(config.weights, dtype=torch.float32, attn_implementation="sdpa",
                                                     local_files_only=True).to(device)
        # greedy runs of a fixed length: no end-of-sequence token may stop one early
        model.generation_config.eos_token_id = None
        model.config.eos_token_id = None
    else:
        hf_config = AutoConfig.for_model(config.model_type, **config.hf_fields())
        torch.manual_seed(WEIGHT_SEED)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    model.generation_config.pad_token_id = 0  # silences "setting pad_token_id"; no padding is ever generated
    return model


def cast_model(model, dtype: str):
    """The same weights in `dtype` (rounded from the fp32 ones the reference ran)."""
    return model.to(torch_dtype(dtype))


def prompt_ids(vocab_size: int, batch: int, tokens: int, device: str):
    """Uniform random token ids (batch x tokens), drawn on the CPU from PROMPT_SEED and copied: the same
    prompt on every device."""
    import torch

    generator = torch.Generator().manual_seed(PROMPT_SEED)
    return torch.randint(0, vocab_size, (batch, tokens), generator=generator).to(device)


def hf_generator(model, *, static: bool) -> Callable:
    import torch

    options = {"cache_implementation": "static"} if static else {}

    def generate(ids, new_tokens: int, logits_processor=None):
        """`logits_processor`: the numerics check's (numerics.forcing_processor); the timed calls pass none."""
        extra = {} if logits_processor is None else {"logits_processor": logits_processor}
        with inference_context(str(ids.device)):
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False,
                                 **options, **extra)  # fmt: skip
        return out[:, ids.shape[1]:]

    return generate


CACHES = ("static", "dynamic")
# The decode step's compile modes: name -> torch.compile's keyword arguments. "reduce-overhead+coordinate-descent"
# is gpt-fast's setting (generate.py: torch._inductor.config.coordinate_descent_tuning = True, then
# mode="reduce-overhead"): CUDA graphs, and Inductor's generated kernels tuned by a coordinate descent over their
# block sizes. torch.compile takes a mode or options, not both, so it is spelled as the options
# reduce-overhead stands for (torch._inductor.list_mode_options: {"triton.cudagraphs": True}) plus that one.
STEP_COMPILE_MODES = {
    "reduce-overhead": {"mode": "reduce-overhead"},
    "reduce-overhead+coordinate-descent": {"options": {"triton.cudagraphs": True, "coordinate_descent_tuning": True}},
    "default": {"mode": "default"},
    "max-autotune": {"mode": "max-autotune"},
    "max-autotune-no-cudagraphs": {"mode": "max-autotune-no-cudagraphs"},
}


def compile_arguments(mode: str) -> dict:
    """torch.compile's keyword arguments for the decode step's compile `mode` (STEP_COMPILE_MODES)."""
    if mode not in STEP_COMPILE_MODES:
        raise ValueError(f"compile mode {mode!r}: one of {', '.join(STEP_COMPILE_MODES)}")
    return {key: dict(value) if isinstance(value, dict) else value for key, value in STEP_COMPILE_MODES[mode].items()}


def compile_call_text(target: str, mode: str) -> str:
    """The Python text of compiling `target` in `mode`: "torch.compile(model.forward, mode='reduce-overhead')"."""
    arguments = ", ".join(f"{key}={value!r}" for key, value in compile_arguments(mode).items())
    return f"torch.compile({target}, {arguments})"


class FadeLoop:
    """The fade-loop variant (module docstring) for one prompt length and new-token count, with its decode
    options; the cache takes its batch size from the prefill. `compile`: False (eager), True (COMPILE_MODE) or
    one of STEP_COMPILE_MODES."""

    def __init__(self, model, *, prompt_tokens: int, new_tokens: int, device: str, compile=False,
                 cache: str = "static", sdpa: str | None = None):
        import torch
        from transformers import StaticCache

        from fade.measure.step.runner import SDPA_BACKENDS

        mode = COMPILE_MODE if compile is True else (compile or None)
        if cache not in CACHES:
            raise ValueError(f"cache {cache!r}: one of {', '.join(CACHES)}")
        if mode is not None:
            compile_arguments(mode)  # a ValueError for an unknown mode
        if mode is not None and cache != "static":
            raise ValueError("a compiled decode step needs the static cache (a dynamic one changes shape every token)")
        if sdpa is not None and sdpa not in SDPA_BACKENDS:
            raise ValueError(f"SDPA backend {sdpa!r}: one of {', '.join(SDPA_BACKENDS)}")
        self.model = model
        self.cache_kind, self.sdpa, self.compile_mode = cache, sdpa, mode
        self.cache = StaticCache(config=model.config, max_cache_len=prompt_tokens + new_tokens) \
            if cache == "static" else None
        self.prefill_positions = torch.arange(prompt_tokens, device=device)
        self.step_positions = [torch.tensor([prompt_tokens + index], device=device) for index in range(new_tokens - 1)]
        self.compiled = mode is not None
        # one function for the timed step and the numerics check's: the same graph, compiled once per loop, and
        # a second loop of the same shapes (the gate's) finds it in Inductor's cache. A logits step of its own
        # was a second cold compile: 158 s of an int8 8B trial's 381 s on an H200 (results/s22-h200/C)
        self.decode = torch.compile(self.eager_decode, **compile_arguments(mode)) if mode else self.eager_decode

    def facts(self) -> dict:
        """How this loop decodes: its cache, compile mode and SDPA backend."""
        facts = {"cache": "StaticCache" if self.cache_kind == "static" else "DynamicCache", "compiled": self.compiled,
                 "sdpa_backend": self.sdpa or "default"}
        if self.compiled:
            facts["compile_mode"] = self.compile_mode
        return facts

    def _start(self) -> None:
        """A run's cache: the static one reset (module docstring), or a new dynamic one."""
        if self.cache_kind == "static":
            self.cache.reset()
        else:
            from transformers import DynamicCache

            self.cache = DynamicCache(config=self.model.config)

    def _context(self, device: str):
        """inference_context, and the forced SDPA backend where one is set."""
        import contextlib

        stack = contextlib.ExitStack()
        stack.enter_context(inference_context(device))
        if self.sdpa is not None:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            from fade.measure.step.runner import SDPA_BACKENDS

            stack.enter_context(sdpa_kernel(getattr(SDPBackend, SDPA_BACKENDS[self.sdpa])))
        return stack

    def eager_logits_step(self, token, position):
        """One decode step's forward: the logits (batch x vocab) of the next token after `token` at `position`."""
        return self.model(token, past_key_values=self.cache, cache_position=position, use_cache=True).logits[:, -1]

    def eager_decode(self, token, position):
        """One decode step: (the next token of each sequence, batch x 1, from its last one at `position`; the
        logits it was picked from, batch x vocab). The timed loop keeps the token, the numerics check the logits."""
        logits = self.eager_logits_step(token, position)
        return logits.argmax(dim=-1, keepdim=True), logits

    def step(self, token, position):
        """One decode step's next tokens (batch x 1), through `decode` (compiled when the loop is)."""
        return self.decode(token, position)[0]

    def logits_step(self, token, position):
        """One decode step's logits (batch x vocab), through the same `decode` as `step`."""
        return self.decode(token, position)[1]

    def forced(self, ids, tokens, observe) -> None:
        """The numerics check's run (numerics.py): the prefill as generate() runs it, then the step fed tokens[:, i]
        (the reference's) in place of its own argmax, for tokens.shape[1] - 1 steps; observe(i, logits) hears each
        new token's logits (i = 0: the prefill's) before the next step runs (a graph replay overwrites them)."""
        with self._context(str(ids.device)):
            self._start()
            logits = self.model(ids, past_key_values=self.cache, cache_position=self.prefill_positions, use_cache=True,
                                logits_to_keep=1).logits  # fmt: skip
            observe(0, logits[:, -1])
            for index, position in enumerate(self.step_positions[: tokens.shape[1] - 1]):
                observe(index + 1, self.logits_step(tokens[:, index : index + 1].clone(), position))

    def generate(self, ids, new_tokens: int):
        import torch

        with self._context(str(ids.device)):
            self._start()
            logits = self.model(ids, past_key_values=self.cache, cache_position=self.prefill_positions, use_cache=True,
                                logits_to_keep=1).logits  # fmt: skip
            token = logits[:, -1].argmax(dim=-1, keepdim=True)
            tokens = [token]
            for position in self.step_positions[: new_tokens - 1]:
                token = self.step(token, position).clone()  # a graph replay overwrites its output buffer
                tokens.append(token)
            return torch.cat(tokens, dim=1)


def fade_loop_compiles(variant: str, device: str) -> bool:
    """Whether `variant` (a fade-loop spelling) compiles its step on `device` (module docstring)."""
    if variant.endswith("+compile"):
        return True
    if variant.endswith("+eager"):
        return False
    return device.split(":", 1)[0] in AUTO_COMPILE_DEVICE_TYPES


def variant_generator(variant: str, model, *, batch: int, prompt_tokens: int, new_tokens: int, device: str):
    """(generate function, facts about how it runs) for `variant`."""
    if variant == "hf-generate":
        return hf_generator(model, static=False), {"cache": "DynamicCache", "compiled": False}
    if variant == "hf-static":
        return hf_generator(model, static=True), {"cache": "StaticCache"}  # `compiled` is read after a run
    loop = FadeLoop(model, prompt_tokens=prompt_tokens, new_tokens=new_tokens, device=device,
                    compile=LOOP_MODES.get(variant) or fade_loop_compiles(variant, device))  # fmt: skip
    facts = {"cache": "StaticCache", "compiled": loop.compiled}
    if loop.compiled:
        facts["compile_mode"] = loop.compile_mode
    return loop.generate, facts


def hf_compiled(model) -> bool:
    """Whether transformers compiled the model's forward inside generate() (it keeps the compiled call on the
    model: PreTrainedModel.get_compiled_call)."""
    return getattr(model, "_compiled_call", None) is not None


WEIGHT_QUANT = ("none", "int8", "int4")


def quantize_weights(model, kind: str):
    """`model` with its linear layers' weights quantized in place by torchao (weight-only, `kind` int8 or int4;
    "none" leaves it); RuntimeError when torchao is missing or the kind has no kernel on the model's device
    (int4: CUDA only)."""
    if kind not in WEIGHT_QUANT:
        raise ValueError(f"weight quantization {kind!r}: one of {', '.join(WEIGHT_QUANT)}")
    if kind == "none":
        return model
    try:
        from torchao.quantization import Int4WeightOnlyConfig, Int8WeightOnlyConfig, quantize_
    except ImportError:
        raise RuntimeError("weight-only quantization needs torchao (pip install torchao)") from None
    device = next(model.parameters()).device
    if kind == "int4" and device.type != "cuda":
        raise RuntimeError(f"int4 weight-only quantization has no torchao kernel on {device.type} (CUDA only)")
    quantize_(model, Int8WeightOnlyConfig() if kind == "int8" else Int4WeightOnlyConfig())
    return model


def weight_bytes(model) -> int:
    """Bytes the model's parameters hold, a quantized tensor's inner tensors (data, scales) counted."""
    import torch

    def size(tensor) -> int:
        if type(tensor) not in (torch.Tensor, torch.nn.Parameter) and hasattr(tensor, "__tensor_flatten__"):
            names, _ = tensor.__tensor_flatten__()
            return sum(size(getattr(tensor, name)) for name in names)
        return tensor.numel() * tensor.element_size()

    return sum(size(parameter) for parameter in model.parameters())
