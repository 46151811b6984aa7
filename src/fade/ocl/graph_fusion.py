"""The graph mode's pure planning (graph.py runs it): which elementwise nodes share one generated kernel
(`group_elementwise`), when each value of a graph can be dropped (`release_after`), and the OpenCL C of a fused
kernel (`fused_source`). Nothing here touches a device, so tests/ocl/test_graph_offline.py runs it anywhere.

A fused kernel computes its members in graph order, one work item per element of their common shape: each
member is one of pointwise.POINTWISE's expressions over operands a, b, c (an input tensor read once per work
item, an earlier member's value, or a scalar argument) evaluated in its compute type and rounded to its result
type exactly as the eager kernel stores it, so a chain computes what the eager ops compute, without writing
and reading back its intermediates. Only the members read outside the kernel are stored.
"""

from __future__ import annotations

import dataclasses

import torch

from fade.ocl.pointwise import broadcast_strides, collapse, helper_source, strided_indexing
from fade.ocl.sources import cl_type, FLOAT_LITERAL

MAX_MEMBERS = 64  # per fused kernel: a kernel of a few dozen expressions still builds in milliseconds
MAX_INPUTS = 24  # tensor inputs of one fused kernel (OpenCL guarantees at least 128 arguments)


@dataclasses.dataclass(frozen=True)
class NodeInfo:
    """What grouping reads of one graph node: `fusible` (an elementwise op the fused kernel can compute), its
    result's `shape`, and the positions (in the node list) of the nodes it reads and of those that read it."""
    fusible: bool
    shape: tuple
    inputs: tuple
    users: tuple


def group_elementwise(nodes: list[NodeInfo]) -> list[list[int]]:
    """Groups of fusible nodes, each one kernel run where its last member stands: every fusible node is in
    exactly one group (alone if nothing joins it). A node joins the groups of the fusible nodes it reads that
    have its shape, merging them; where not all of them can, those that can, in graph order. A group cannot
    where a node outside the merged kernel already read one of its members before it (that reader runs before
    the kernel, so the value must exist by then) or the kernel would grow past MAX_MEMBERS members or MAX_INPUTS
    inputs."""
    group_of: dict[int, int] = {}
    groups: dict[int, list[int]] = {}

    def joinable(chosen: list[int], position: int) -> bool:
        merged = [m for g in chosen for m in groups[g]] + [position]
        members = set(merged)
        early_reader = any(user < position and user not in members for m in merged for user in nodes[m].users)
        inputs = {i for m in merged for i in nodes[m].inputs if i not in members}
        return not early_reader and len(merged) <= MAX_MEMBERS and len(inputs) <= MAX_INPUTS

    for position, node in enumerate(nodes):
        if not node.fusible:
            continue
        candidates = sorted({group_of[i] for i in node.inputs
                             if i in group_of and nodes[i].shape == node.shape})
        if candidates and not joinable(candidates, position):
            # the groups that can join, one at a time: a residual add reads the block's last value, which the
            # next block's convolution read first, and the bias add before it, which only the add reads
            chosen: list[int] = []
            for g in candidates:
                if joinable(chosen + [g], position):
                    chosen.append(g)
            candidates = chosen
        merged = [m for g in candidates for m in groups[g]] + [position]
        if candidates:
            target = candidates[0]
            for g in candidates[1:]:
                for m in groups.pop(g):
                    group_of[m] = target
            groups[target] = sorted(merged)
            group_of[position] = target
        else:
            group_of[position] = position
            groups[position] = [position]
    return sorted(groups.values(), key=lambda g: g[-1])


def release_after(reads: list[list[int]], keep: set) -> list[list[int]]:
    """Liveness: per step (each reading the values `reads[step]`), the values last read there, which the plan
    drops after it so their buffers go back to the allocator's pool for the next steps; values in `keep` (the
    graph's outputs) are never dropped. A value nobody reads is dropped after the step that made it, which is
    the caller's to add (see graph.py)."""
    last: dict[int, int] = {}
    for step, values in enumerate(reads):
        for value in values:
            last[value] = step
    released: list[list[int]] = [[] for _ in reads]
    for value, step in last.items():
        if value not in keep:
            released[step].append(value)
    return [sorted(r) for r in released]


@dataclasses.dataclass(frozen=True)
class Member:
    """One elementwise op inside a fused kernel: its POINTWISE expression over letters a, b, c, ...; per letter
    ("input", k), ("member", j) or ("scalar", k); its named scalars (expression name, scalar k); the dtype it
    computes in and the dtype of its result."""
    expr: str
    operands: tuple
    named: tuple
    compute: torch.dtype
    dtype: torch.dtype


def compute_type(dtype) -> str:
    """The OpenCL type an expression computed in `dtype` is evaluated in (float16 in float, as eager does)."""
    return "float" if dtype == torch.float16 else cl_type(dtype)


def fused_source(members: list[Member], input_dtypes: list, scalar_dtypes: list, outputs: list[int],
                 sizes: list[int], strides: list[list[int]], name: str = "fused") -> str:
    """The OpenCL C of a fused kernel `name`(out0, off_o0, ..., in0, off_i0, ..., s0, ...): one work item per
    element of the (collapsed) shape `sizes`; `strides` holds each output's then each input's strides over it
    (0 where an input is broadcast). Members' values live in registers; `outputs` lists the stored members."""
    total = 1
    for size in sizes:
        total *= size
    reach = max([total] + [sum((size - 1) * abs(st) for size, st in zip(sizes, sts)) + 1 for sts in strides])
    idx, decode, address = strided_indexing(sizes, reach)
    params = [f"__global {cl_type(members[j].dtype)}* out{k}, long off_o{k}" for k, j in enumerate(outputs)]
    params += [f"__global const {cl_type(dtype)}* in{k}, long off_i{k}" for k, dtype in enumerate(input_dtypes)]
    params += [f"{compute_type(dtype)} s{k}" for k, dtype in enumerate(scalar_dtypes)]
    body = [f"{cl_type(dtype)} x{k} = in{k}[off_i{k} + {address(strides[len(outputs) + k])}];"
            for k, dtype in enumerate(input_dtypes)]
    helpers: dict[str, str] = {}
    for j, member in enumerate(members):
        ct, ot = compute_type(member.compute), cl_type(member.dtype)
        expr = FLOAT_LITERAL.sub(r"\1", member.expr) if ct == "double" else member.expr
        for line in helper_source(expr, ct).split("#define T ")[1:]:
            helpers.setdefault(line, "#define T " + line)
        loads = [f"{ct} {letter} = ({ct}){_operand(operand)};" for letter, operand in zip("abcdefgh", member.operands)]
        loads += [f"{ct} {scalar} = ({ct})s{k};" for scalar, k in member.named]
        store = f"({ot})(({ct})({expr}) != 0)" if member.dtype == torch.bool else f"({ot})({expr})"
        body.append(f"{ot} v{j}; {{ {' '.join(loads)} v{j} = {store}; }}")
    body += [f"out{k}[off_o{k} + {address(strides[k])}] = v{j};" for k, j in enumerate(outputs)]
    lines = "\n    ".join(body)
    return "".join(helpers.values()) + f"""
__kernel void {name}({', '.join(params)}) {{
    {idx} i = get_global_id(0);
    if (i >= {total}) return;
    {' '.join(decode)}
    {lines}
}}"""


def _operand(operand) -> str:
    kind, k = operand
    return {"input": "x", "member": "v", "scalar": "s"}[kind] + str(k)


def geometry(shape, output_strides: list, inputs: list) -> tuple:
    """(sizes, strides) of a fused kernel after pointwise.collapse: each output's strides, then each input
    tensor's broadcast to `shape` (any tensor: only its shape and strides are read)."""
    return collapse(list(shape), [list(st) for st in output_strides] + [broadcast_strides(x, shape) for x in inputs])
