"""The graph mode's capture and replay: a graph's device commands recorded on one call, then issued again on
each later call with no per-node Python in between (the OpenCL counterpart of a CUDA graph, built in Python).

On the H200 (results/ocl-diag-h200-s13) mobilenet_v3_small's training step kept the device busy 16 of its 95 ms
in eager mode and in the graph mode alike: every node still ran its kernel's Python (geometry, allocation, the
launch's arguments), ~1150 launches a step. A graph's shapes are static, so a node's commands are the same on
every call but for the buffers they touch. GraphPlan records its second call (`Recording`: each launch, CLBlast
GEMM, buffer copy and allocation, in order, per step) and `build` turns it into a `Replay`:

- Each buffer a command names is resolved to what it was at that moment: a graph input's (by slot and position:
  the next call's input), an allocation the call made (by its order), or memory from outside the call (a
  kernel's constant table, the null buffer: the same object each call).
- An allocation whose memory nothing outside the replayed commands sees (temporaries, values only captured steps
  read) gets memory the replay owns for good: the capture's own buffer when it ended free in the pool (taken out
  of it), else a new one, so its lifetime cannot clash with whatever holds the capture's. An allocation behind a
  graph output, or behind a value a step that is not replayed reads, is made fresh from the pool on each call.
- A step that cannot be replayed runs as before on each call ("dynamic"): a node that draws random numbers
  (Philox keys come from torch's CPU generator, new scalars each call), one that touched the host (a read or a
  write), one that runs through eager dispatch (counted as a fallback on each call). Its outputs' buffers are
  looked up after it ran.
- Each call checks its inputs first: every ocl tensor input where the capture had it (storage offset and strides,
  and inputs that shared a buffer still share it); otherwise the call runs the plan step by step, with nothing
  enqueued yet.

The replay holds the call's inputs until it returns (a view the replay does not build could otherwise outlive its
input's buffer, which could then go back to the pool mid-call), so a backward graph keeps its saved tensors
until it ends. What cannot be replayed safely raises Uncapturable while building, and the plan stays step by
step: a command naming memory a dynamic step allocated and its outputs do not hold, a value a later step needs
whose memory came from outside the call, or a value held on the host.
"""

from __future__ import annotations

import numpy as np
import torch

from fade.ocl.memory import Block, block_of, NAME, reclaim, storage_table


class Uncapturable(Exception):
    """The recorded call cannot be replayed safely (the message says why); the plan keeps running step by step."""


# positions of the buffers among runtime.gemm's parameters after `dev` (a, b, c, temp)
GEMM_BUFFERS = (7, 10, 14, 19)


def tensors_of(value, path=()):
    """(path, tensor) for each ocl tensor in a node's value (a tensor, or lists and tuples of them)."""
    if isinstance(value, torch.Tensor):
        if value.device.type == NAME:
            yield path, value
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from tensors_of(item, path + (i,))


def at_path(value, path):
    for i in path:
        value = value[i]
    return value


class Recording:
    """One call of a plan as it ran: its commands (each a tuple whose last item pairs its buffer positions with
    references: ("in", slot, path), ("a", allocation number) or ("fixed", buffer)), per step; the allocations
    (step, device, buffer, bytes); and
    per step the shapes of the values it wrote (see `shape_of`)."""

    def __init__(self, cl):
        self.cl = cl
        self.step = -1
        self.commands: dict[int, list] = {}
        self.allocations: list = []  # (step, device, buffer, nbytes)
        self.current: dict[int, tuple] = {}  # id(buffer) -> its reference now
        self.keep: list = []  # every buffer seen, so that no id() is reused while recording
        self.host_reasons: dict[int, str] = {}
        self.input_checks: list = []  # (slot, path, storage offset, strides, reference)
        self.written: dict[int, dict] = {}  # step -> {slot: shape}
        self.resolvers: dict[int, list] = {}  # dynamic step -> [(reference, slot, path)]

    # --- events (runtime.Device and runtime.gemm call these while the device's capture is this recording)
    def _ref(self, buffer) -> tuple:
        found = self.current.get(id(buffer))
        if found is None:
            self.keep.append(buffer)
            found = self.current[id(buffer)] = ("fixed", buffer)
        return found

    def _command(self, entry) -> None:
        self.commands.setdefault(self.step, []).append(entry)

    def launch(self, dev, kernel, global_size, local_size, args, label) -> None:
        refs = tuple((i, self._ref(a)) for i, a in enumerate(args) if isinstance(a, self.cl.MemoryObjectHolder))
        self._command(("launch", dev, kernel, global_size, local_size, label, tuple(args), refs))

    def gemm(self, dev, params: tuple) -> None:
        refs = tuple((i, self._ref(params[i])) for i in GEMM_BUFFERS if params[i] is not None)
        self._command(("gemm", dev, params, refs))

    def copy(self, dev, target, source, nbytes, target_offset, source_offset) -> None:
        refs = ((0, self._ref(target)), (1, self._ref(source)))
        self._command(("copy", dev, [target, source, nbytes, target_offset, source_offset], refs))

    def allocate(self, dev, buffer, nbytes: int) -> None:
        self.keep.append(buffer)
        self.current[id(buffer)] = ("a", len(self.allocations))
        self.allocations.append((self.step, dev, buffer, nbytes))

    def host(self, reason: str) -> None:
        self.host_reasons.setdefault(self.step, reason)

    # --- what the plan tells it
    def inputs(self, env, slots) -> None:
        for slot in slots:
            for path, t in tensors_of(env[slot]):
                buffer = block_of(t).buffer
                ref = self.current.get(id(buffer))
                if ref is None:
                    self.keep.append(buffer)
                    ref = self.current[id(buffer)] = ("in", slot, path)
                self.input_checks.append((slot, path, t.storage_offset(), t.stride(), ref))

    def shape_of(self, value):
        """How to build `value` on a later call: ("tensor", reference, dtype, offset, size, stride), ("seq",
        type, items), ("const", value), or ("host", value) for a tensor that is not on ocl."""
        if isinstance(value, torch.Tensor):
            if value.device.type != NAME:
                return ("host", value)
            return ("tensor", self._ref(block_of(value).buffer), value.dtype, value.storage_offset(),
                    tuple(value.shape), tuple(value.stride()))
        if isinstance(value, (list, tuple)):
            return ("seq", type(value), [self.shape_of(v) for v in value])
        return ("const", value)

    def end_step(self, step: int, slots, env, dynamic: bool) -> None:
        self.written[step] = {slot: self.shape_of(env[slot]) for slot in slots}
        if dynamic:
            found = []
            for slot in slots:
                for path, t in tensors_of(env[slot]):
                    ref = self.current[id(block_of(t).buffer)]
                    if ref[0] == "a" and self.allocations[ref[1]][0] == step:
                        found.append((ref, slot, path))
            self.resolvers[step] = found


def _refs_in(shape):
    if shape[0] == "tensor":
        yield shape[1]
    elif shape[0] == "seq":
        for item in shape[2]:
            yield from _refs_in(item)


def build(rec: Recording, steps: list, dynamic: dict, needed: set, devices: list) -> "Replay":
    """The Replay of a recorded call. `steps`: the plan's steps (a dynamic one runs itself on each call);
    `dynamic`: {step: reason} of the steps that are not replayed; `needed`: the slots a dynamic step reads or
    the outputs hold; `devices`: the runtime devices the call touched (for their pools)."""
    resolvable = {ref for found in rec.resolvers.values() for ref, _, _ in found}
    fresh = set()
    built: dict[int, list] = {}
    for step, shapes in rec.written.items():
        if step in dynamic:
            continue
        for slot, shape in shapes.items():
            if slot not in needed:
                continue
            if shape[0] == "host" or any(s[0] == "host" for s in _flat(shape)):
                raise Uncapturable(f"step {step} makes a host value a later step needs")
            for ref in _refs_in(shape):
                if ref[0] == "fixed":
                    raise Uncapturable(f"step {step} makes a value over memory from outside the call")
                if ref[0] == "a":
                    if rec.allocations[ref[1]][0] in dynamic:
                        if ref not in resolvable:
                            raise Uncapturable(f"step {step} names memory a dynamic step made and does not return")
                    else:
                        fresh.add(ref[1])
            built.setdefault(step, []).append((slot, shape))
    # every allocation a replayed command names: fresh (made on each call), a dynamic step's (looked up), or the
    # replay's own memory
    arena: dict[int, list] = {}  # id(capture buffer) -> allocation numbers
    for step, commands in rec.commands.items():
        if step in dynamic:
            continue
        for command in commands:
            for _, ref in command[-1]:
                if ref[0] != "a":
                    continue
                made_in = rec.allocations[ref[1]][0]
                if made_in in dynamic:
                    if ref not in resolvable:
                        raise Uncapturable(f"step {step} names memory the dynamic step {made_in} made and does "
                                           "not return")
                elif ref[1] not in fresh:
                    arena.setdefault(id(rec.allocations[ref[1]][2]), []).append(ref[1])
    reclaim()  # every dead tensor's buffer back to its pool: a capture buffer still out is held by someone
    pooled = set()
    for dev in devices:
        pooled |= dev.pooled()
    owned, concrete = [], {}
    for buffer_id, numbers in arena.items():
        _, dev, buffer, _ = rec.allocations[numbers[0]]
        if buffer_id in pooled and dev.take(buffer):
            mine = buffer
        else:
            mine = dev.allocate(max(rec.allocations[n][3] for n in numbers), reclaim)
        owned.append((dev, mine))
        for n in numbers:
            concrete[("a", n)] = mine
    # a fresh allocation's tensor is made with the geometry of the first value built over it, which is then that
    # tensor (a second tensor over it, a view, costs ~3 us of host time: a training step's forward and backward
    # built ~350 such pairs)
    geometry: dict[int, tuple] = {}
    for index in sorted(built):
        built[index] = [(slot, _first_over(shape, fresh, geometry)) for slot, shape in built[index]]
    program = []
    for index, step in enumerate(steps):
        if index in dynamic:
            program.append(("dynamic", step, tuple(rec.resolvers.get(index, ()))))
            continue
        # (an allocation no value is built over: a byte tensor over the whole of it, which keeps it alive)
        made = tuple((("a", n), dev, nbytes, torch.device(NAME, dev.index),
                      geometry.get(n, (torch.uint8, 0, (nbytes,), (1,))))
                     for n, (at, dev, _, nbytes) in enumerate(rec.allocations) if at == index and n in fresh)
        commands = [_compiled(command, concrete) for command in rec.commands.get(index, ())]
        program.append(("replay", made, tuple(commands), tuple(built.get(index, ()))))
    sizes: dict = {}  # device -> {pool size: buffers} a call makes fresh
    for n in fresh:
        _, dev, _, nbytes = rec.allocations[n]
        per_device = sizes.setdefault(dev, {})
        per_device[dev.rounded(nbytes)] = per_device.get(dev.rounded(nbytes), 0) + 1
    counts = {"commands": sum(len(c) for s, c in rec.commands.items() if s not in dynamic),
              "dynamic_steps": len(dynamic), "owned_buffers": len(owned),
              "owned_bytes": sum(b.size for _, b in owned), "fresh_allocations": len(fresh)}
    return Replay(program, rec.input_checks, owned, counts, tuple(sizes.items()))


def _first_over(shape, fresh: set, geometry: dict):
    """`shape` with each tensor that is the first over a fresh allocation made ("made", reference); its geometry
    (dtype, offset, size, stride) goes in `geometry` by allocation number."""
    if shape[0] == "tensor":
        _, ref, dtype, offset, size, stride = shape
        if ref[0] == "a" and ref[1] in fresh and ref[1] not in geometry:
            geometry[ref[1]] = (dtype, offset, size, stride)
            return ("made", ref)
        return shape
    if shape[0] == "seq":
        return ("seq", shape[1], [_first_over(item, fresh, geometry) for item in shape[2]])
    return shape


def _flat(shape):
    yield shape
    if shape[0] == "seq":
        for item in shape[2]:
            yield from _flat(item)


def _bound(values, refs, concrete: dict) -> tuple:
    """(template, late): a command's values with the buffers fixed for good put in place (the replay's own
    memory, memory from outside the call), and the (position, reference) pairs each call fills in."""
    template, late = list(values), []
    for position, ref in refs:
        if ref[0] == "fixed":
            template[position] = ref[1]
        elif ref in concrete:
            template[position] = concrete[ref]
        else:
            late.append((position, ref))
    return template, late


def _filled(template: list, late: list, buffers: dict) -> list:
    values = list(template)
    for position, ref in late:
        values[position] = buffers[ref]
    return values


def _compiled(command, concrete: dict):
    """A recorded command as a function of the call's buffers ({reference: buffer})."""
    kind, dev = command[0], command[1]
    if kind == "launch":
        _, _, kernel, global_size, local_size, label, args, refs = command
        template, late = _bound(args, refs, concrete)
        cl = dev.cl
        site = None
        if all(isinstance(a, (cl.MemoryObjectHolder, np.generic)) for a in template):
            # a kernel object of its own for this launch, its arguments set once: a call sets only the buffers
            # that change and enqueues (pyopencl's call sets every argument each time: 6.4 against 1.7 us a
            # launch on PoCL)
            site = cl.Kernel(kernel.program, kernel.function_name)
            site.set_args(*template)

        def launch(buffers):
            if site is not None and dev.recording is None:
                for position, ref in late:
                    site.set_arg(position, buffers[ref])
                dev.launch_set(site, global_size, local_size)
                return
            dev.launch(kernel, global_size, local_size, *_filled(template, late, buffers), label=label)
        return launch
    template, late = _bound(command[2], command[3], concrete)
    if kind == "gemm":
        from fade.ocl import runtime
        return lambda buffers: runtime.gemm(dev, *_filled(template, late, buffers))
    return lambda buffers: dev.copy(*_filled(template, late, buffers))


class Replay:
    """A recorded call as a program: per step, its commands (with the fresh allocations to make first and the
    values later steps need built after), or the step itself (dynamic)."""

    def __init__(self, program: list, input_checks: list, owned: list, counts: dict, fresh_sizes: tuple = ()):
        self.program, self.input_checks, self.owned, self.counts = program, input_checks, owned, counts
        self.fresh_sizes = fresh_sizes  # ((device, {pool size: buffers}), ...) a call makes

    def __del__(self):
        for dev, buffer in getattr(self, "owned", ()):
            try:
                dev.release(buffer)
            except Exception:  # noqa: BLE001 - at interpreter shutdown the device may be gone
                pass

    def inputs(self, env) -> dict | None:
        """{reference: input tensor} when every input is where the capture had it; else None."""
        found = {}
        for slot, path, offset, stride, ref in self.input_checks:
            try:
                t = at_path(env[slot], path)
            except (IndexError, TypeError, KeyError):
                return None
            if not isinstance(t, torch.Tensor) or t.device.type != NAME or t.storage_offset() != offset or \
                    t.stride() != stride:
                return None
            first = found.get(ref)
            if first is None:
                found[ref] = t
            elif block_of(first).buffer is not block_of(t).buffer:
                return None
        return found

    def run(self, env, inputs: dict, releases) -> dict:
        """Issue the program over `env` (the inputs in their slots, `inputs` from `inputs(env)`); returns what
        keeps the call's memory alive until its outputs are taken."""
        bases = dict(inputs)
        buffers = {ref: block_of(t).buffer for ref, t in inputs.items()}
        new_tensor = storage_table.new_tensor
        for dev, sizes in self.fresh_sizes:
            dev.reserve(sizes, reclaim)
        for entry, release in zip(self.program, releases):
            if entry[0] == "dynamic":
                _, step, resolve = entry
                step(env)
                for ref, slot, path in resolve:
                    t = bases[ref] = at_path(env[slot], path)
                    buffers[ref] = block_of(t).buffer
            else:
                _, made, commands, built = entry
                for ref, dev, nbytes, device, (dtype, offset, size, stride) in made:
                    buffer = dev.allocate(nbytes, reclaim)
                    buffers[ref] = buffer
                    bases[ref] = new_tensor(Block(dev.index, buffer), buffer.int_ptr, nbytes, device, dtype, offset,
                                            size, stride)
                for command in commands:
                    command(buffers)
                for slot, shape in built:
                    env[slot] = _build(shape, bases)
            for slot in release:
                env[slot] = None
        return bases


def _build(shape, bases):
    kind = shape[0]
    if kind == "made":
        return bases[shape[1]]
    if kind == "tensor":
        _, ref, dtype, offset, size, stride = shape
        return storage_table.view_of(bases[ref], dtype, offset, size, stride)
    if kind == "seq":
        return shape[1]([_build(item, bases) for item in shape[2]])
    return shape[1]
