"""fade.ocl's graph mode: `torch.compile(model, backend="fade_ocl")` (the name `fade.ocl.register()` gives
dynamo) or `backend=fade.ocl.graph_backend`.

AOTAutograd hands over the forward and the backward as aten graphs; `compile_graph` walks each once and makes a
plan that `GraphPlan.__call__` replays with no trip through torch's dispatcher: every op node calls the kernel
eager dispatch would route it to (dispatch.route_of: the same kernels, so the same numbers), chains of
elementwise nodes run as one generated kernel each (graph_fusion.py: only the values read outside a chain are
written to memory), and each value is dropped after its last reader so its buffer goes back to the pool for
the next steps. A node the plan cannot take (a kernel that raises NoKernel for its call, an op with no kernel
here, a non-aten call) runs through eager dispatch, still correct, and is counted in `fallback_counts()` as
"graph:<op>" per run; each dynamo graph break is counted once as "graph:break" (`graph_fallback_counts()`).
"""

from __future__ import annotations

import collections
import operator
import threading
import warnings

import numpy as np
import torch
import torch.fx

from fade.ocl import capture, dispatch, runtime
from fade.ocl.graph_fusion import compute_type, fused_source, geometry, group_elementwise, Member, NodeInfo, \
    release_after
from fade.ocl.graph_rewrite import BN_FOLD_OP, fold_batch_norms
from fade.ocl.memory import block_of, contiguous_strides, empty, NAME, storage_table
from fade.ocl.meta import base_name, bind_arguments, is_view_op, schema_of
from fade.ocl.normalization import bn_fold
from fade.ocl.pointwise import numpy_scalar, pointwise, POINTWISE, typed_expression, variant_expression
from fade.ocl.settings import setting
from fade.ocl.sources import CL_TYPES, NoKernel

aten = torch.ops.aten

BACKEND_NAME = "fade_ocl"

REPLAY = setting("FADE_OCL_GRAPH_REPLAY") == "on"
CAPTURE_AT = 2  # the call recorded: the first builds the kernels and fills the per-shape caches (conv benchmark)

_lock = threading.Lock()
_stats: collections.Counter = collections.Counter()


def graph_stats() -> dict:
    """What the graph mode compiled and ran in this process: graphs, nodes, op_steps (nodes calling a kernel
    directly), elementwise_kernels (generated kernels, fused or of one op), fused_kernels and fused_nodes (those
    computing two or more nodes, and how many), folded_batch_norms (graph_rewrite.py), replays, eager_runs (node
    runs through eager dispatch), and graph_breaks (dynamo's count, by reason)."""
    with _lock:
        found = dict(_stats)
    breaks = _dynamo_breaks()
    found["graph_breaks"] = dict(breaks) if breaks is not None else {}
    return found


def reset_graph_stats() -> None:
    with _lock:
        _stats.clear()


def graph_fallback_counts() -> dict[str, int]:
    """The graph mode's share of fade.ocl.fallback_counts(): "graph:<op>" per node run through eager dispatch,
    "graph:break" per dynamo graph break."""
    return {name: n for name, n in dispatch.fallback_counts().items() if name.startswith("graph:")}


def _count(key: str, n: int = 1) -> None:
    with _lock:
        _stats[key] += n


def _eager_run(name: str) -> None:
    _count("eager_runs")
    if dispatch.note_fallback("graph:" + name):
        warnings.warn(f"fade.ocl graph mode: the node '{name}' has no plan and runs through eager dispatch; "
                      "fade.ocl.graph_fallback_counts() counts them", UserWarning, stacklevel=4)


def _dynamo_breaks():
    import sys
    if "torch._dynamo" not in sys.modules:
        return None
    from torch._dynamo.utils import counters
    return counters["graph_break"]


_breaks_seen = 0


def _note_graph_breaks() -> None:
    """Count the graph breaks dynamo made since the last look, each once, as "graph:break" fallbacks."""
    global _breaks_seen
    breaks = _dynamo_breaks()
    total = sum(breaks.values()) if breaks is not None else 0
    if total < _breaks_seen:  # torch._dynamo.reset() cleared its counters
        _breaks_seen = 0
    for _ in range(total - _breaks_seen):
        _eager_run("break")
    _breaks_seen = total


# ---------------------------------------------------------------------------------------------------------- args

class _Ref:
    """A graph value in a node's arguments: its slot in the plan's environment."""
    __slots__ = ("slot",)

    def __init__(self, slot: int):
        self.slot = slot


def _template(value, slots: dict):
    if isinstance(value, torch.fx.Node):
        return _Ref(slots[value])
    if isinstance(value, (list, tuple)):
        kind = tuple if isinstance(value, tuple) else list
        return kind(_template(v, slots) for v in value)
    if isinstance(value, dict):
        return {k: _template(v, slots) for k, v in value.items()}
    return value


def _refs(template) -> list[int]:
    if isinstance(template, _Ref):
        return [template.slot]
    if isinstance(template, (list, tuple)):
        return [s for v in template for s in _refs(v)]
    if isinstance(template, dict):
        return [s for v in template.values() for s in _refs(v)]
    return []


def _resolver(template):
    """A function env -> the template's value with its graph values filled in (constants built once)."""
    if isinstance(template, _Ref):
        slot = template.slot
        return lambda env: env[slot]
    if not _refs(template):
        return lambda env: template
    if isinstance(template, dict):
        parts = {k: _resolver(v) for k, v in template.items()}
        return lambda env: {k: p(env) for k, p in parts.items()}
    parts = [_resolver(v) for v in template]
    kind = type(template)
    return lambda env: kind([p(env) for p in parts])


# --------------------------------------------------------------------------------------------------------- steps

class _OpStep:
    """One op node: the kernel eager dispatch routes it to, called directly; on NoKernel (then for good) the op
    through eager dispatch, counted."""

    def __init__(self, op, call, args, kwargs, slot: int):
        self.op, self.call, self.slot = op, call, slot
        self.args, self.kwargs = _resolver(args), _resolver(kwargs)
        self.reads = _refs((args, kwargs))
        self.eager = call is None
        self.name = op.name() if isinstance(op, torch._ops.OpOverload) else getattr(op, "__name__", str(op))

    expect = None  # the strides the graph says its tensor result has (a static, non-view node), or None

    def __call__(self, env) -> None:
        args, kwargs = self.args(env), self.kwargs(env)
        if not self.eager:
            try:
                result = self.call(self.op, args, kwargs)
                env[self.slot] = result if self.expect is None or result.stride() == self.expect else \
                    _conformed(result, self.expect)
                return
            except NoKernel:
                self.eager = True
        _eager_run(self.name)
        env[self.slot] = self.op(*args, **kwargs)


def _conformed(t: torch.Tensor, stride: tuple) -> torch.Tensor:
    """t copied into the strides the graph expects: a kernel whose output layout differs from torch's meta
    result (pools and convolutions of a channels-last input write NCHW; torch's keep channels-last) would reach a
    later node planned for the graph's layout (a `view` that cannot be made of it)."""
    out = empty(t.shape, stride, t.dtype, t.device.index or 0)
    pointwise("a", out, [t])
    _count("layout_copies")
    return out


class _ViewStep:
    """A view node whose input has a static geometry: the view's size, strides and offset from the input's are
    the graph's (its fake tensors'), so it is made without a meta computation; the view kernel runs instead
    when the input comes with other strides."""

    def __init__(self, op_step: _OpStep, source: int, in_stride: tuple, delta: int, size: tuple, stride: tuple):
        self.op_step, self.source, self.slot, self.reads = op_step, source, op_step.slot, op_step.reads
        self.in_stride, self.delta, self.size, self.stride = in_stride, delta, size, stride

    def __call__(self, env) -> None:
        base = env[self.source]
        if isinstance(base, torch.Tensor) and base.stride() == self.in_stride and base.device.type == NAME:
            env[self.slot] = storage_table.view_of(base, base.dtype, base.storage_offset() + self.delta, self.size,
                                                   self.stride)
        else:
            self.op_step(env)


class _GetItem:
    def __init__(self, source: int, index, slot: int):
        self.source, self.index, self.slot = source, index, slot
        self.reads = [source]

    expect = None

    def __call__(self, env) -> None:
        value = env[self.source][self.index]
        env[self.slot] = value if self.expect is None or value.stride() == self.expect else \
            _conformed(value, self.expect)


class _FusedStep:
    """A group of elementwise nodes as one generated kernel (compiled at the first run, when the inputs'
    strides are known; kept per stride set), launched over their common shape; its members' own steps run
    instead, for good, when an input is not an ocl tensor or the kernel cannot be made."""

    def __init__(self, members: list[Member], input_slots: list[int], scalars: list, output_slots: list[int],
                 outputs: list[tuple], index: int, fallback: list[_OpStep], label: str, targets: tuple = ()):
        self.members, self.input_slots, self.output_slots = members, input_slots, output_slots
        self.outputs = outputs  # per stored member: (member position, shape, stride, dtype)
        self.scalar_values = scalars  # (value, compute dtype)
        # per output: None, or the slot of a graph input it is written into (a copy_ back fused away)
        self.targets = tuple(targets) or (None,) * len(outputs)
        self.index, self.fallback, self.label = index, fallback, label
        self.numel = int(np.prod(outputs[0][1])) if outputs[0][1] else 1
        self.kernels: dict = {}
        self.eager = False
        self.reads = list(input_slots)
        self.scalar_args = None  # typed at the first run (numpy_scalar makes a tensor: not under AOT's fake mode)

    def _kernel(self, inputs: list):
        if any(not isinstance(t, torch.Tensor) or t.device.type != NAME or t.dtype not in CL_TYPES or
               t.dim() > len(self.outputs[0][1]) for t in inputs):
            raise NoKernel("a fused kernel's input is not an ocl tensor of an OpenCL type")
        if self.scalar_args is None:
            self.scalar_args = [numpy_scalar(compute_type(dtype), dtype)(value) for value, dtype in self.scalar_values]
        shape = self.outputs[0][1]
        sizes, strides = geometry(shape, [stride for _, _, stride, _ in self.outputs], inputs)
        source = fused_source(self.members, [t.dtype for t in inputs], [d for _, d in self.scalar_values],
                              [j for j, _, _, _ in self.outputs], sizes, strides)
        return runtime.device(self.index).kernel("fused", source)

    def __call__(self, env) -> None:
        if self.eager:
            for step in self.fallback:
                step(env)
            return
        inputs = [env[s] for s in self.input_slots]
        key = tuple(t.stride() if isinstance(t, torch.Tensor) else None for t in inputs)
        kernel = self.kernels.get(key)
        if kernel is None:
            try:
                kernel = self.kernels[key] = self._kernel(inputs)
            except NoKernel:
                self.eager = True
                return self(env)
        outs = [empty(shape, stride, dtype, self.index) if target is None else env[target]
                for (_, shape, stride, dtype), target in zip(self.outputs, self.targets)]
        args = []
        for t in outs:
            args += [block_of(t).buffer, np.int64(t.storage_offset())]
        for t in inputs:
            args += [block_of(t).buffer, np.int64(t.storage_offset())]
        runtime.device(self.index).launch(kernel, (self.numel,), None, *args, *self.scalar_args, label=self.label)
        for slot, t in zip(self.output_slots, outs):
            env[slot] = t


# ----------------------------------------------------------------------------------------------------- lowerings

def _routed(op, args, kwargs=None):
    return dispatch.route_of(op)(op, args, kwargs or {})


def _batch_norm_functional(op, args, kwargs):
    """_native_batch_norm_legit_functional: the running statistics' new values in copies, by the batch norm
    kernel eager runs (its composite does the same)."""
    bound = bind_arguments(op, args, kwargs)
    mean, var = (_routed(aten.clone.default, (bound[name],)) for name in ("running_mean", "running_var"))
    out, save_mean, save_invstd = _routed(aten._native_batch_norm_legit.default, (
        bound["input"], bound["weight"], bound["bias"], mean, var, bound["training"], bound["momentum"],
        bound["eps"]))
    return out, save_mean, save_invstd, mean, var


def _batch_norm_functional_in_place(op, args, kwargs):
    """_native_batch_norm_legit_functional whose running statistics the graph copies back into the same inputs
    and reads nowhere else (`_in_place_batch_norms`): they are updated where they are, as eager does, and the
    copies back are skipped."""
    bound = bind_arguments(op, args, kwargs)
    mean, var = bound["running_mean"], bound["running_var"]
    out, save_mean, save_invstd = _routed(aten._native_batch_norm_legit.default, (
        bound["input"], bound["weight"], bound["bias"], mean, var, bound["training"], bound["momentum"],
        bound["eps"]))
    return out, save_mean, save_invstd, mean, var


def _copy_in_place(op, args, kwargs):
    """copy_ (an input the graph updates, written back: AOTAutograd keeps those in the graph) by the elementwise
    copy kernel."""
    target, source = args[0], args[1]
    if not isinstance(source, torch.Tensor) or source.device.type != NAME or torch.bfloat16 in (
            source.dtype, target.dtype) or kwargs.get("non_blocking") or len(args) > 2:
        raise NoKernel("copy_ from the host or of bfloat16")
    pointwise("a", target, [source])
    return target


def _copy_functional(op, args, kwargs):
    """copy (functionalized copy_ into an intermediate): a fresh tensor of self's geometry holding src."""
    target, source = args[0], args[1]
    if not isinstance(source, torch.Tensor) or source.device.type != NAME or torch.bfloat16 in (
            source.dtype, target.dtype) or kwargs.get("non_blocking") or len(args) > 2:
        raise NoKernel("copy from the host or of bfloat16")
    stride = target.stride() if target.is_contiguous() else contiguous_strides(target.shape)
    out = empty(target.shape, stride, target.dtype, target.device.index or 0)
    pointwise("a", out, [source])
    return out


def _scatter(op, args, kwargs):
    """slice_scatter / select_scatter / as_strided_scatter (functionalized writes into a part): a copy of self
    with src written into the part (a view made by the view kernel, or as_strided's own geometry)."""
    bound = bind_arguments(op, args, kwargs)
    x, source = bound["self"], bound["src"]
    if x.device.type != NAME or not isinstance(source, torch.Tensor) or source.device.type != NAME or \
            torch.bfloat16 in (x.dtype, source.dtype):
        raise NoKernel("a scatter from the host or of bfloat16")
    out = empty(x.shape, contiguous_strides(x.shape), x.dtype, x.device.index or 0)
    pointwise("a", out, [x])
    if op is aten.select_scatter.default:
        part = _routed(aten.select.int, (out, bound["dim"], bound["index"]))
    elif op is aten.as_strided_scatter.default:  # the strides address self's storage: out must be laid out alike
        if not x.is_contiguous() or x.storage_offset():
            raise NoKernel("as_strided_scatter into a strided tensor")
        offset = bound["storage_offset"]
        part = storage_table.view_of(out, out.dtype, 0 if offset is None else offset, bound["size"], bound["stride"])
    else:
        part = _routed(aten.slice.Tensor, (out, bound["dim"], bound["start"], bound["end"], bound["step"]))
    pointwise("a", part, [source])
    return out


def _in_place_batch_norms(nodes: list) -> tuple[set, set]:
    """(batch norm nodes, copy_ nodes): the _native_batch_norm_legit_functional nodes whose running statistics are
    graph inputs read by nothing but the batch norm and a copy_ of its new value back into them, and those
    copy_ nodes, which the plan then skips."""
    norms, copies = set(), set()
    for node in nodes:
        if node.target is not aten._native_batch_norm_legit_functional.default or len(node.args) < 5:
            continue
        found = []
        for position, stat in ((3, node.args[3]), (4, node.args[4])):
            if not isinstance(stat, torch.fx.Node) or stat.op != "placeholder":
                break
            others = [u for u in stat.users if u is not node]
            if len(others) != 1 or others[0].target is not aten.copy_.default or others[0].args[0] is not stat:
                break
            value = others[0].args[1]
            if not (isinstance(value, torch.fx.Node) and value.target is operator.getitem and
                    value.args == (node, position)):
                break
            found.append(others[0])
        if len(found) == 2:
            norms.add(node)
            copies.update(found)
    return norms, copies


def _layout(node: torch.fx.Node):
    """The strides of a node's result where later nodes were planned for them: a static ocl tensor of more than
    one element (None otherwise: nothing is checked)."""
    val = node.meta.get("val")
    if not _static(val) or val.device.type != NAME or val.numel() <= 1:
        return None
    return tuple(val.stride())


def _view_step(node: torch.fx.Node, step: _OpStep, slots: dict):
    """A _ViewStep for a view op node of one tensor input and one output of its dtype, both static, or None."""
    op = node.target
    if not isinstance(op, torch._ops.OpOverload) or not is_view_op(op) or not node.args or \
            not isinstance(node.args[0], torch.fx.Node):
        return None
    base, out = node.args[0].meta.get("val"), node.meta.get("val")
    if not (_static(base) and _static(out)) or base.dtype != out.dtype or base.device != out.device:
        return None
    return _ViewStep(step, slots[node.args[0]], tuple(base.stride()), out.storage_offset() - base.storage_offset(),
                     tuple(out.shape), tuple(out.stride()))


def _fused_copies(nodes: list, slots: dict, groups: list) -> dict:
    """{elementwise node's slot: graph input's slot} for each copy_(input, node) whose node is fused, read by
    nothing else, and has the input's geometry, where nothing reads the input after the node's kernel ran: the
    kernel writes the input itself and the copy_ is skipped (batch norm's num_batches_tracked + 1)."""
    end_of = {m: g[-1] for g in groups for m in g}
    found = {}
    for node in nodes:
        if node.target is not aten.copy_.default or len(node.args) != 2 or node.kwargs:
            continue
        target, value = node.args
        if not (isinstance(target, torch.fx.Node) and target.op == "placeholder" and
                isinstance(value, torch.fx.Node) and slots[value] in end_of and list(value.users) == [node]):
            continue
        t, v = target.meta.get("val"), value.meta.get("val")
        if not (_static(t) and _static(v) and t.shape == v.shape and t.stride() == v.stride() and
                t.dtype == v.dtype and t.device == v.device):
            continue
        end = end_of[slots[value]]
        # every other reader of the input runs before the kernel or in it (a member of another group runs at
        # that group's end)
        if all(u is node or end_of.get(slots[u], slots[u]) <= end for u in target.users) and not any(
                u.op == "output" for u in target.users):
            found[slots[value]] = slots[target]
    return found


def _batch_norm_no_training(op, args, kwargs):
    bound = bind_arguments(op, args, kwargs)
    return _routed(aten._native_batch_norm_legit.default, (
        bound["input"], bound["weight"], bound["bias"], bound["running_mean"], bound["running_var"], False,
        bound["momentum"], bound["eps"]))


def _bn_fold(op, args, kwargs):
    return bn_fold(*args, **kwargs)


def _filled(size, stride, dtype, device, value):
    out = empty(size, stride, dtype, device.index or 0 if device is not None else 0)
    if out.numel():
        pointwise("a", out, [value])
    return out


def _scalar_tensor(op, args, kwargs):
    bound = bind_arguments(op, args, kwargs)
    return _filled((), (), bound["dtype"] or torch.get_default_dtype(), bound["device"], bound["s"])


def _full_like(op, args, kwargs):
    bound = bind_arguments(op, args, kwargs)
    x = bound["self"]
    if bound["memory_format"] not in (None, torch.preserve_format) or not x.is_contiguous():
        raise NoKernel("full_like of a non-contiguous tensor")
    return _filled(x.shape, x.stride(), bound["dtype"] or x.dtype, bound["device"] or x.device, bound["fill_value"])


def _empty_permuted(op, args, kwargs):
    """empty_permuted (empty_like's decomposition): dense in the order `physical_layout` gives."""
    bound = bind_arguments(op, args, kwargs)
    size, layout = list(bound["size"]), list(bound["physical_layout"])
    physical = contiguous_strides([size[d] for d in layout])
    stride = [0] * len(size)
    for position, d in enumerate(layout):
        stride[d] = physical[position]
    device = bound["device"]
    return empty(size, stride, bound["dtype"] or torch.get_default_dtype(),
                 (device.index or 0) if device is not None else 0)


def _scatter_backward(op, args, kwargs):
    """select_backward / slice_backward: zeros of the input's size, the gradient copied into the selected part
    (a view made by the view kernel), as their composites do."""
    bound = bind_arguments(op, args, kwargs)
    grad, size = bound["grad_output"], bound["input_sizes"]
    out = _filled(size, contiguous_strides(size), grad.dtype, grad.device, 0)
    if op is aten.select_backward.default:
        part = _routed(aten.select.int, (out, bound["dim"], bound["index"]))
    else:
        part = _routed(aten.slice.Tensor, (out, bound["dim"], bound["start"], bound["end"], bound["step"]))
    pointwise("a", part, [grad])
    return out


LOWERINGS = {  # ops with no kernel of their own that the plan runs by other ops' kernels (as their composites do)
    aten._native_batch_norm_legit_functional.default: _batch_norm_functional,
    aten._native_batch_norm_legit_no_training.default: _batch_norm_no_training,
    aten.scalar_tensor.default: _scalar_tensor,
    aten.full_like.default: _full_like,
    aten.select_backward.default: _scatter_backward,
    aten.slice_backward.default: _scatter_backward,
    aten.copy_.default: _copy_in_place,
    aten.copy.default: _copy_functional,
    aten.slice_scatter.default: _scatter,
    aten.select_scatter.default: _scatter,
    aten.as_strided_scatter.default: _scatter,
    aten.empty_permuted.default: _empty_permuted,
    BN_FOLD_OP: _bn_fold,
}


def _decompositions() -> dict:
    """AOTAutograd's decompositions for the graph mode: composites into ops with kernels here (what the
    composites dispatch to in eager), so the plan runs them without eager dispatch."""
    from torch._decomp import get_decompositions
    return get_decompositions([aten.ones,
                               aten.zeros, aten.full, aten.new_empty_strided, aten.empty_like, aten._unsafe_view,
                               aten.new_zeros, aten.new_ones, aten.new_full, aten.zeros_like, aten.ones_like])


# ---------------------------------------------------------------------------------------------------------- plan

def _fake(value):
    if isinstance(value, torch.fx.Node):
        return value.meta.get("val")
    if isinstance(value, (list, tuple)):
        return type(value)(_fake(v) for v in value)
    return value


def _static(val) -> bool:
    return isinstance(val, torch.Tensor) and all(isinstance(s, int) for s in val.shape) and \
        all(isinstance(s, int) for s in val.stride())


def _static_value(val) -> bool:
    """A node's value has no symbolic size, stride or number (None and other constants count as static)."""
    if isinstance(val, torch.Tensor):
        return _static(val) and isinstance(val.storage_offset(), int)
    if isinstance(val, (list, tuple)):
        return all(_static_value(v) for v in val)
    return not isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool))


def _elementwise(node: torch.fx.Node):
    """(bound arguments as graph nodes and numbers, expression, compute dtype) of a node the fused kernel can
    compute, or None: a functional elementwise op of a static shape on ocl, whose tensor operands are ocl graph
    values no larger than its result, in an OpenCL type, with no helper function (integer pow, remainder)."""
    op = node.target
    if not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten" or base_name(op) not in POINTWISE or \
            op._schema.name.endswith("_") or schema_of(op)[1] or schema_of(op)[2]:
        return None
    val = node.meta.get("val")
    if not _static(val) or val.device.type != NAME or val.dtype not in CL_TYPES or val.numel() == 0 or \
            val.dim() > 8 or val.dtype == torch.float16:
        return None
    try:
        bound = bind_arguments(op, node.args, node.kwargs)
        fake = {name: _fake(value) for name, value in bound.items()}
        expr = variant_expression(op, fake)
        expr, compute = typed_expression(op, fake, expr, val.dtype)
    except (NoKernel, RuntimeError, TypeError, KeyError):
        return None
    if "fade_" in expr or compute not in CL_TYPES or compute == torch.float16:
        return None
    for name in POINTWISE[base_name(op)][0]:
        value = bound[name]
        if isinstance(value, torch.fx.Node):
            operand = value.meta.get("val")
            if not _static(operand) or operand.device.type != NAME or operand.dim() > val.dim() or \
                    operand.dtype not in CL_TYPES:
                return None
        elif not isinstance(value, (bool, int, float)):
            return None
    if any(not isinstance(bound[name], (bool, int, float, type(None))) for name in POINTWISE[base_name(op)][2]):
        return None
    return bound, expr, compute


class GraphPlan:
    """A graph's plan, called by AOTAutograd with the list of its inputs (boxed: the list is emptied, so each
    input lives only until its last reader); returns the list of its outputs."""

    def __init__(self, gm: torch.fx.GraphModule):
        self._boxed_call = True  # an instance attribute: the wrappers AOTAutograd puts around it copy __dict__
        folded = fold_batch_norms(gm)
        nodes = list(gm.graph.nodes)
        slots = {node: position for position, node in enumerate(nodes)}
        self.size = len(nodes)
        self.constants: dict[int, object] = {}
        self.inputs: list[int] = []
        outputs = None
        elementwise = {}
        for node in nodes:
            if node.op == "call_function":
                found = _elementwise(node)
                if found is not None:
                    elementwise[node] = found
        infos = []
        for node in nodes:
            val = node.meta.get("val")
            infos.append(NodeInfo(node in elementwise, tuple(val.shape) if _static(val) else None,
                                  tuple(slots[n] for n in node.all_input_nodes),
                                  tuple(slots[u] for u in node.users)))
        groups = [g for g in group_elementwise(infos)]
        group_at = {g[-1]: g for g in groups}
        in_group = {m for g in groups for m in g}
        norms, skipped_copies = _in_place_batch_norms(nodes)
        self.copy_targets = _fused_copies(nodes, slots, groups)  # elementwise slot -> the input slot it writes
        skipped_copies |= {node for node in nodes if node.target is aten.copy_.default and
                           isinstance(node.args[1], torch.fx.Node) and slots[node.args[1]] in self.copy_targets}
        steps: list = []
        for node in nodes:
            slot = slots[node]
            if node.op == "placeholder":
                self.inputs.append(slot)
            elif node.op == "get_attr":
                value = gm
                for part in node.target.split("."):
                    value = getattr(value, part)
                self.constants[slot] = value
            elif node.op == "output":
                outputs = _template(node.args[0], slots)
            elif slot in group_at:
                steps.append(self._fused(group_at[slot], nodes, slots, elementwise))
            elif slot in in_group:
                continue
            elif node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
                steps.append(_GetItem(slots[node.args[0]], node.args[1], slot))
                steps[-1].expect = _layout(node)
            elif node in skipped_copies:
                continue  # its batch norm updated the input in place; the node has no readers
            else:
                step = self._op_step(node, slots, _batch_norm_functional_in_place if node in norms else None)
                view = _view_step(node, step, slots)
                if view is None and isinstance(node.target, torch._ops.OpOverload) and not is_view_op(node.target):
                    step.expect = _layout(node)
                steps.append(view or step)
        self.outputs = _resolver(outputs)
        keep = set(_refs(outputs))
        reads = [list(step.reads) + self._written(step) for step in steps]
        release = release_after(reads, keep)
        read_anywhere = {s for r in reads for s in r}
        self.unread_inputs = {s for s in self.inputs if s not in read_anywhere and s not in keep}
        self.steps = [(step, tuple(r)) for step, r in zip(steps, release)]
        self.releases = [tuple(r) for r in release]
        self.keep = keep
        self.calls = 0
        self.replay = None
        self.dynamic_steps: dict = {}
        self.capture_failure = None
        # replayable only with static shapes: the commands carry the recorded sizes
        self.static = all(_static_value(node.meta.get("val")) for node in nodes if node.op != "output")
        if not self.static:
            self.capture_failure = "symbolic shapes"
        fused = [g for g in groups if len(g) > 1]
        with _lock:
            _stats["graphs"] += 1
            _stats["nodes"] += sum(node.op == "call_function" for node in nodes)
            _stats["op_steps"] += sum(isinstance(s, _OpStep) for s in steps)
            _stats["view_steps"] += sum(isinstance(s, _ViewStep) for s in steps)
            _stats["elementwise_kernels"] += len(groups)
            _stats["fused_kernels"] += len(fused)
            _stats["fused_nodes"] += sum(len(g) for g in fused)
            _stats["folded_batch_norms"] += folded
        self.groups = groups

    @staticmethod
    def _written(step) -> list[int]:
        if isinstance(step, _FusedStep):
            return list(step.output_slots)
        return [step.slot]

    @staticmethod
    def _op_step(node: torch.fx.Node, slots: dict, call=None) -> _OpStep:
        op = node.target
        args, kwargs = _template(tuple(node.args), slots), _template(dict(node.kwargs), slots)
        if call is not None:
            pass
        elif isinstance(op, torch._ops.OpOverload):
            call = LOWERINGS.get(op) or dispatch.route_of(op)
        else:
            call = None  # a Python callable in the graph: run as it is, counted
        return _OpStep(op, call, args, kwargs, slots[node])

    def _fused(self, group: list[int], nodes: list, slots: dict, elementwise: dict) -> _FusedStep:
        members, input_slots, scalars, position = [], [], [], {}
        for j, m in enumerate(group):
            node = nodes[m]
            bound, expr, compute = elementwise[node]
            position[m] = j
            names, _, scalar_names = POINTWISE[base_name(node.target)]
            operands = []
            for name in names:
                value = bound[name]
                if isinstance(value, torch.fx.Node):
                    s = slots[value]
                    if s in position:
                        operands.append(("member", position[s]))
                    else:
                        if s not in input_slots:
                            input_slots.append(s)
                        operands.append(("input", input_slots.index(s)))
                else:
                    scalars.append((float(value) if isinstance(value, bool) else value, compute))
                    operands.append(("scalar", len(scalars) - 1))
            named = []
            for name in scalar_names:
                scalars.append((1 if bound[name] is None else bound[name], compute))
                named.append((name, len(scalars) - 1))
            members.append(Member(expr, tuple(operands), tuple(named), compute, node.meta["val"].dtype))
        members_set = set(group)
        stored = [m for m in group if any(slots[u] not in members_set for u in nodes[m].users)]
        outputs = [(position[m], tuple(nodes[m].meta["val"].shape), tuple(nodes[m].meta["val"].stride()),
                    nodes[m].meta["val"].dtype) for m in stored]
        index = nodes[group[-1]].meta["val"].device.index or 0
        fallback = [self._op_step(nodes[m], slots) for m in group]
        label = "fused " + "+".join(base_name(nodes[m].target) for m in group)
        targets = [self.copy_targets.get(m) for m in stored]
        for target in filter(None, targets):
            if target not in input_slots:  # read by the step (liveness: the input lives until the kernel ran)
                input_slots.append(target)
        return _FusedStep(members, input_slots, scalars, [m for m in stored], outputs, index, fallback, label,
                          targets)

    def __call__(self, args: list) -> list:
        if self.replay is not None:
            outputs = self._replayed(args)
            if outputs is not None:
                return outputs
        self.calls += 1
        if REPLAY and self.calls == CAPTURE_AT and self.replay is None and self.static:
            return self._captured(args)
        return self._stepwise(args)

    def _environment(self, args: list) -> list:
        env = [None] * self.size
        for slot, value in self.constants.items():
            env[slot] = value
        for slot, value in zip(self.inputs, args):
            if slot not in self.unread_inputs:
                env[slot] = value
        return env

    def _stepwise(self, args: list) -> list:
        env = self._environment(args)
        args.clear()
        for step, release in self.steps:
            step(env)
            for slot in release:
                env[slot] = None
        _count("replays")
        return list(self.outputs(env))

    def _replayed(self, args: list) -> list | None:
        """The call by the recorded commands, or None (nothing done) when an input is not where the capture had
        it."""
        env = self._environment(args)
        inputs = self.replay.inputs(env)
        if inputs is None:
            _count("replay_misses")
            return None
        args.clear()
        held = self.replay.run(env, inputs, self.releases)
        outputs = list(self.outputs(env))
        del held
        _count("replays")
        _count("captured_replays")
        return outputs

    @staticmethod
    def _dynamic_reason(step) -> str | None:
        """Why a step must run itself on every call (None: its commands can be replayed)."""
        if isinstance(step, _FusedStep):
            return "a fused kernel's members through eager dispatch" if step.eager else None
        if isinstance(step, _OpStep):
            if step.eager:
                return f"{step.name} through eager dispatch"
            if isinstance(step.op, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in step.op.tags:
                return f"{step.name} draws random numbers"
        return None

    def _captured(self, args: list) -> list:
        """A step-by-step call that records its device commands, then the replay made of them (or the reason
        there is none, in graph_stats()'s capture_failures)."""
        devices = runtime.active_devices()
        if not devices:
            return self._stepwise(args)
        env = self._environment(args)
        args.clear()
        recording = capture.Recording(devices[0].cl)
        recording.inputs(env, [s for s in self.inputs if s not in self.unread_inputs])
        dynamic = {}
        for dev in devices:
            dev.capture = recording
        try:
            for index, (step, release) in enumerate(self.steps):
                recording.step = index
                step(env)
                reason = self._dynamic_reason(step) or recording.host_reasons.get(index)
                if reason:
                    dynamic[index] = reason
                recording.end_step(index, self._written(step), env, bool(reason))
                for slot in release:
                    env[slot] = None
            outputs = list(self.outputs(env))
        finally:
            for dev in devices:
                dev.capture = None
        del env
        needed = set(self.keep)
        for index in dynamic:
            needed.update(self.steps[index][0].reads)
        try:
            self.replay = capture.build(recording, [step for step, _ in self.steps], dynamic, needed, devices)
            self.dynamic_steps = dynamic
            _count("captures")
            _count("replayed_commands", self.replay.counts["commands"])
            _count("dynamic_steps", len(dynamic))
        except capture.Uncapturable as why:
            self.capture_failure = str(why)
            _count("capture_failures")
        _count("replays")
        return outputs


def compile_graph(gm: torch.fx.GraphModule, example_inputs) -> GraphPlan:
    """AOTAutograd's forward, backward and inference compiler: the graph's plan (a boxed callable)."""
    return GraphPlan(gm)


def graph_backend(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """The torch.compile backend of fade.ocl's graph mode: AOTAutograd with compile_graph for the forward, the
    backward and inference graphs. `torch.compile(model, backend=fade.ocl.graph_backend)`, or "fade_ocl"."""
    from torch._dynamo.backends.common import aot_autograd
    _note_graph_breaks()
    # input mutations (batch norm's running statistics) stay in the graph as copy_ nodes, so the plan can make
    # them in place (_in_place_batch_norms)
    backend = aot_autograd(fw_compiler=compile_graph, bw_compiler=compile_graph, decompositions=_decompositions(),
                           keep_inference_input_mutations=True)
    return backend(gm, example_inputs, **kwargs)


def register_backend() -> None:
    """Name graph_backend "fade_ocl" for torch.compile (idempotent)."""
    from torch._dynamo.backends import registry
    if BACKEND_NAME not in registry.list_backends(exclude_tags=()):
        registry.register_backend(compiler_fn=graph_backend, name=BACKEND_NAME)
