"""fade.guard on the real dispatch path, with no GPU: what it reports, where, and what it leaves alone.

The accelerator here is fade.hostwork.standin, a PrivateUse1 device registered from Python whose every ATen
kernel is one boxed fallback that computes on host memory. Why this stand-in, rather than the alternatives:
- synthetic events would test the bookkeeping but not what the dispatcher actually delivers (autograd's
  decompositions, `.item()` lowering to `_local_scalar_dense`, `.to()` becoming `_to_copy`, backward ops
  arriving on autograd's worker thread, `torch.tensor(data, device=...)` arriving as `lift_fresh`);
- the `meta` device cannot copy to the host, so `.cpu()`, `.item()` and printing cannot run;
- CPU tensors relabelled as "the accelerator" would make host and device the same device type, so the
  central question (is this tensor on the host?) could not be asked honestly;
- a tensor subclass carries a Python dispatch key that real device tensors do not have;
- torch's open-registration test backend (OpenReg) needs a C++ build.
A PrivateUse1 device is a real non-CPU device type with no Python key: torch dispatches to it exactly as to
"cuda", the guard's mode sees the same op stream, autograd runs its backward on a device thread, and
`.cpu()`/`.item()` really copy. What it cannot show: CUDA's own sync behaviour (sync-debug warnings from C++
kernels, pinned vs pageable copies, streams), Inductor-compiled regions, CUDA graphs and real timings:
benchmarks/guard_gpu_check.py and benchmarks/guard_overhead.py cover those on a GPU.
"""

import threading
import warnings

import pytest
import torch

from fade.errors import FadeUsageError
from fade.hostwork import FadeGuardWarning, Guard, GuardReport, GuardViolation, guard, standin
from fade.hostwork import hooks

from .helpers import at, found


def quiet_guard(device, mode="warn", **options):
    return guard(mode, device, quiet=True, **options)


def test_standin_device_trains_like_the_cpu(device):
    """The stand-in must compute correctly, or every other test here proves nothing."""
    losses = {}
    for where in ("cpu", device):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).to(where)
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
        inputs, labels = torch.randn(32, 8).to(where), torch.randint(0, 3, (32,)).to(where)
        history = []
        for _ in range(3):
            loss = torch.nn.functional.cross_entropy(model(inputs), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            history.append(loss.item())
        losses[where] = history
    assert losses[device] == pytest.approx(losses["cpu"], rel=1e-5)


def test_item_is_a_sync_at_the_calling_line(device):
    loss = torch.randn(4, device=device).sum()
    with quiet_guard(device) as watched:
        for _ in range(3):
            loss.item()  # SITE item
    assert found(watched.report) == {("sync", *at("item")): 3}
    assert watched.report.records[0].ops == {"aten::_local_scalar_dense": 3}


def test_mask_built_on_cpu_and_moved_each_step_is_cpu_compute_plus_h2d_copy_with_bytes(device):
    with quiet_guard(device) as watched:
        torch.zeros(1, device=device)  # the region is now a GPU region
        for _ in range(4):
            (torch.rand(8, 16) > 0.5).to(device)  # SITE mask
    report = watched.report
    copy = report.by_kind("copy")[0]
    assert (copy.what, copy.file, copy.line) == ("copy h2d", *at("mask"))
    assert copy.count == 4 and copy.total_bytes == 4 * 8 * 16  # bool: one byte each
    compute = report.by_kind("cpu_compute")[0]
    assert (compute.file, compute.line) == at("mask")
    assert set(compute.ops) == {"aten::rand", "aten::gt.Scalar"}


def test_cpu_then_numpy_is_a_d2h_copy_at_the_calling_line(device):
    logits = torch.randn(8, 4, device=device)
    with quiet_guard(device) as watched:
        logits.argmax(1).cpu().numpy().mean()  # SITE numpy
    copy = watched.report.by_kind("copy")[0]
    assert (copy.what, copy.file, copy.line, copy.total_bytes) == ("copy d2h", *at("numpy"), 8 * 8)


def test_a_blocking_copy_is_one_copy_record_that_counts_its_host_wait(device):
    """A blocking `.cpu()` or `.to(device)` makes the host wait (on CUDA both end in memcpy_and_sync). That
    wait is part of the copy: one record, with `syncs`, and no sync record. A non-blocking copy does not wait."""
    values, host = torch.randn(8, device=device), torch.randn(8)
    with quiet_guard(device) as watched:
        values.cpu()  # SITE blocking-d2h
        host.to(device)  # SITE blocking-h2d
        torch.empty(8).copy_(values, non_blocking=True)  # SITE async-d2h
    assert found(watched.report) == {("copy d2h", *at("blocking-d2h")): 1, ("copy h2d", *at("blocking-h2d")): 1,
                                     ("copy d2h", *at("async-d2h")): 1}
    assert {r.line: r.syncs for r in watched.report.records} == {
        at("blocking-d2h")[1]: 1, at("blocking-h2d")[1]: 1, at("async-d2h")[1]: 0}


def test_tensor_from_python_data_on_the_device_is_an_h2d_copy(device):
    with quiet_guard(device) as watched:
        torch.tensor([1.0, 2.0, 3.0], device=device)  # SITE lift
    assert found(watched.report) == {("copy h2d", *at("lift")): 1}


def test_zero_dim_cpu_scalar_is_legal_but_a_cpu_index_tensor_is_device_mixing(device):
    values = torch.randn(6, device=device)
    with quiet_guard(device) as watched:
        values * torch.tensor(2.0)
        values[torch.tensor([0, 2])]  # SITE cpu-index
    assert found(watched.report) == {("device_mix", *at("cpu-index")): 1}
    assert watched.report.records[0].total_bytes == 2 * 8


def test_device_mix_that_torch_refuses_is_still_recorded_and_torch_error_wins(device):
    values, host_values = torch.randn(6, device=device), torch.ones(6)
    with quiet_guard(device, "strict") as watched:
        with pytest.raises(RuntimeError, match="same device"):
            values + host_values  # SITE refused
    assert ("device_mix", *at("refused")) in found(watched.report)


def test_boolean_mask_indexing_and_nonzero_sync_but_integer_indexing_does_not(device):
    values = torch.randn(6, device=device)
    with quiet_guard(device) as watched:
        values[values > 0]  # SITE bool-mask
        values[torch.arange(3, device=device)]
        torch.nonzero(values)  # SITE nonzero
    assert found(watched.report) == {("sync", *at("bool-mask")): 1, ("sync", *at("nonzero")): 1}


def test_backward_ops_are_charged_to_the_backward_call(device):
    """Autograd runs these on its own worker thread, where no user frame exists: the guard charges them to
    the line that is blocked in backward()."""
    weights = torch.randn(8, device=device, requires_grad=True)
    mask = torch.randn(8, device=device) > 0
    with quiet_guard(device) as watched:
        loss = weights[mask].sum()
        loss.backward()  # SITE backward
    record = next(r for r in watched.report.records if (r.file, r.line) == at("backward"))
    assert record.kind == "sync" and record.in_backward and "aten::index_put" in record.ops


def test_cpu_work_is_not_flagged_until_the_region_uses_the_accelerator(device):
    with Guard("warn", device, quiet=True, memory_counts_as_use=False) as watched:
        torch.randn(16, 16).sum()
    assert watched.report.records == []


def test_zero_dim_cpu_bookkeeping_is_not_cpu_compute(device):
    """AdamW keeps its step counters on the CPU on purpose; a clean AdamW loop reports nothing."""
    model = torch.nn.Linear(4, 2).to(device)
    optimizer = torch.optim.AdamW(model.parameters())
    inputs = torch.randn(8, 4, device=device)
    with quiet_guard(device) as watched:
        for _ in range(2):
            model(inputs).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
    assert watched.report.records == []
    assert watched.report.steps_seen == 2


def test_strict_raises_at_the_first_offence_with_the_line(device):
    loss = torch.randn(4, device=device).sum()
    with pytest.raises(GuardViolation) as raised:
        with guard("strict", device):
            loss.item()  # SITE strict
    file, line = at("strict")
    assert f":{line}" in str(raised.value) and "loss.item()" in str(raised.value)
    assert (raised.value.record.file, raised.value.record.line) == (file, line)


def test_strict_raises_through_backward(device):
    class SyncsInBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            grad.sum().item()  # SITE backward-item
            return grad * 2

    weights = torch.randn(4, device=device, requires_grad=True)
    with pytest.raises(GuardViolation) as raised:
        with guard("strict", device):
            SyncsInBackward.apply(weights).sum().backward()
    assert (raised.value.record.file, raised.value.record.line) == at("backward-item")
    assert raised.value.record.in_backward


def test_warn_mode_warns_once_per_site_at_the_users_line(device):
    loss = torch.randn(4, device=device).sum()
    with pytest.warns(FadeGuardWarning) as warned:
        with guard("warn", device):
            for _ in range(3):
                loss.item()  # SITE warn
    ours = [w for w in warned if issubclass(w.category, FadeGuardWarning)]
    assert len(ours) == 1
    assert (ours[0].filename, ours[0].lineno) == at("warn")


def test_nested_guards_both_record_and_unwind(device):
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    loss = torch.randn(4, device=device).sum()
    with quiet_guard(device) as outer:
        loss.item()  # SITE outer
        with quiet_guard(device) as inner:
            loss.item()  # SITE inner
        assert _get_current_dispatch_mode().guard is outer
    assert found(inner.report) == {("sync", *at("inner")): 1}
    assert found(outer.report) == {("sync", *at("outer")): 1, ("sync", *at("inner")): 1}
    assert _get_current_dispatch_mode() is None


def test_guard_leaves_no_state_behind(device):
    import warnings as warnings_module

    from torch.utils._python_dispatch import _get_current_dispatch_mode

    showwarning, filters = warnings_module.showwarning, list(warnings_module.filters)
    synchronize = torch.standin.synchronize
    with quiet_guard(device):
        assert torch.standin.synchronize is not synchronize
        torch.randn(2, device=device).sum().item()
    assert _get_current_dispatch_mode() is None
    assert warnings_module.showwarning is showwarning and warnings_module.filters == filters
    assert torch.standin.synchronize is synchronize
    assert hooks._step_hook is None and hooks.thread_state().entered == []
    assert torch.randn(2, device=device).sum().item() is not None  # no guard, no error, no record


def test_other_threads_are_not_watched_and_a_threads_own_guard_sees_only_it(device):
    values = torch.randn(4, device=device)
    seen_by_worker = {}

    def worker():
        values.sum().item()  # SITE unwatched
        with quiet_guard(device) as own:
            values.sum().item()  # SITE worker
        seen_by_worker.update(found(own.report))

    with quiet_guard(device) as main:
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        values.sum().item()  # SITE main
    assert found(main.report) == {("sync", *at("main")): 1}
    assert seen_by_worker == {("sync", *at("worker")): 1}


def test_decorator_form_guards_each_call(device):
    watched = Guard("warn", device, quiet=True)

    @watched
    def step(values):
        return values.sum().item()  # SITE decorated

    values = torch.randn(4, device=device)
    step(values)
    step(values)
    values.sum().item()  # outside: not counted
    assert found(watched.report) == {("sync", *at("decorated")): 2}


def _train(model, optimizer, inputs, steps, watched=None, explicit_steps=False):
    for _ in range(steps):
        loss = model(inputs).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        loss.item()  # SITE sampled-item
        optimizer.step()
        if explicit_steps:
            watched.step()


@pytest.mark.parametrize("explicit_steps", [False, True], ids=["optimizer-steps", "guard-step"])
def test_sampled_mode_inspects_every_nth_step_only(device, explicit_steps):
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    model = torch.nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs = torch.randn(8, 4, device=device)
    with quiet_guard(device, "sampled", sample_every=4) as watched:
        _train(model, optimizer, inputs, 12, watched, explicit_steps)
        assert watched.inspecting and _get_current_dispatch_mode() is not None  # step 12: inspected
        _train(model, optimizer, inputs, 1, watched, explicit_steps)
        assert not watched.inspecting and _get_current_dispatch_mode() is None  # popped: costs nothing
    report = watched.report
    assert (report.steps_seen, report.steps_inspected) == (13, 4)
    assert found(report) == {("sync", *at("sampled-item")): 4}


def test_explicit_synchronize_is_a_sync(device):
    with quiet_guard(device) as watched:
        torch.standin.synchronize()  # SITE synchronize
    assert found(watched.report) == {("sync", *at("synchronize")): 1}
    assert watched.report.records[0].ops == {"torch.standin.synchronize()": 1}


def test_backend_cpu_fallback_warnings_are_captured_at_the_users_line(device):
    """MPS and DirectML warn "... will fall back to run on the CPU" for ops they lack; the stand-in can warn
    the same way. The guard counts each occurrence and keeps the warning off the user's console."""
    values = torch.randn(8, device=device)
    with standin.simulated_cpu_fallback("aten::cumsum"), warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("default")
        with quiet_guard(device) as watched:
            for _ in range(3):
                values.cumsum(0)  # SITE fallback
    assert found(watched.report) == {("backend_fallback", *at("fallback")): 3}
    assert watched.report.records[0].ops == {"aten::cumsum": 3}
    assert not [w for w in shown if "fall back" in str(w.message)]


def test_sync_debug_warning_adds_a_sync_only_when_the_op_is_not_already_one(device):
    """On CUDA the guard turns on torch.cuda.set_sync_debug_mode("warn") to see syncs inside kernels. Here
    the stand-in emits that warning from inside ops: a hidden sync in `add` is reported, while the one
    `.item()` causes is the same event as the sync already counted."""
    values = torch.randn(4, device=device)
    message = "called a synchronizing CUDA operation"
    with standin.simulated_warnings({"aten::add": message, "aten::_local_scalar_dense": message}):
        with quiet_guard(device) as watched:
            values + values  # SITE hidden-sync
            values.sum().item()  # SITE item-sync
    assert found(watched.report) == {("sync", *at("hidden-sync")): 1, ("sync", *at("item-sync")): 1}
    assert watched.report.records[0].ops.keys() | watched.report.records[1].ops.keys() == {
        "aten::add.Tensor", "aten::_local_scalar_dense"}


SYNC_DEBUG_WARNING = "called a synchronizing CUDA operation"


def test_sync_debug_warning_after_the_call_settles_the_wait_already_counted_at_that_line(device):
    """On CUDA a kernel's sync-debug warning reaches Python only when the Python call returns, after the op's
    dispatch (benchmarks/guard_sync_debug_probe.py shows the order). Each line below replays that order in
    one expression: the op, then the warning. `.item()` and a blocking copy already count the wait, so their
    warnings add nothing; indexing with a CPU index waits inside the kernel, so its warning is a sync."""
    values, index, loss = torch.randn(8, device=device), torch.tensor([1, 3]), torch.randn(4, device=device).sum()
    with quiet_guard(device) as watched:
        for _ in range(2):
            loss.item(), warnings.warn(SYNC_DEBUG_WARNING)  # SITE item-then-warning
            values.cpu(), warnings.warn(SYNC_DEBUG_WARNING)  # SITE copy-then-warning
            values[index], warnings.warn(SYNC_DEBUG_WARNING)  # SITE index-then-warning
    assert found(watched.report) == {
        ("sync", *at("item-then-warning")): 2, ("copy d2h", *at("copy-then-warning")): 2,
        ("device_mix", *at("index-then-warning")): 2, ("sync", *at("index-then-warning")): 2}


def test_sync_debug_warning_in_a_python_backward_reaches_the_guard_from_autograds_thread(device):
    """A custom Function's backward runs on autograd's worker thread, which never entered the guard but has
    its mode on the stack; a hidden sync warned there is charged to the backward's own line."""
    class HiddenSyncInBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            warnings.warn(SYNC_DEBUG_WARNING)  # SITE backward-hidden-sync
            return grad * 2

    weights = torch.randn(4, device=device, requires_grad=True)
    with quiet_guard(device) as watched:
        HiddenSyncInBackward.apply(weights).sum().backward()
    assert found(watched.report) == {("sync", *at("backward-hidden-sync")): 1}
    assert watched.report.records[0].in_backward


def test_torch_compiles_own_syncs_are_not_charged_to_the_users_line(device):
    """Inductor times its kernels with device syncs at their first launch (and Dynamo/Inductor may sync while
    compiling); a compiled backward's kernels are timed on autograd's thread, below no user frame at all.
    Here functions defined as if in torch.compile's modules sync and warn, and nothing is reported."""
    from fade.hostwork.callsite import COMPILER_MODULES

    compiler = {"__name__": COMPILER_MODULES[0], "torch": torch, "warnings": warnings,
                "message": SYNC_DEBUG_WARNING, "device": device}
    exec("def autotune():\n    getattr(torch, device).synchronize()\n    warnings.warn(message)\n", compiler)
    runtime = {"__name__": "torch._functorch.compiled_backward_stand_in", "torch": torch,
               "autotune": compiler["autotune"]}
    exec("class CompiledFunction(torch.autograd.Function):\n"
         "    @staticmethod\n    def forward(ctx, x):\n        return x * 2\n"
         "    @staticmethod\n    def backward(ctx, grad):\n        autotune()\n        return grad * 2\n", runtime)
    weights = torch.randn(4, device=device, requires_grad=True)
    with quiet_guard(device) as watched:
        compiler["autotune"]()
        runtime["CompiledFunction"].apply(weights).sum().backward()
    assert watched.report.records == []


def test_guard_over_a_region_already_holding_gpu_memory_arms_the_sync_debug_mode_at_entry(monkeypatch):
    """No op in such a region is the accelerator's "first use", so arming cannot wait for one (it did, and
    the H100 check found the mode never armed). Re-entering the same guard arms it again."""
    from fade.hostwork import session

    calls = []
    monkeypatch.setattr(session, "_accelerator_memory_in_use", lambda device_type: True)
    monkeypatch.setattr(hooks, "arm_cuda_sync_debug", lambda: calls.append("arm"))
    monkeypatch.setattr(hooks, "disarm_cuda_sync_debug", lambda: calls.append("disarm"))
    watched = Guard("warn", "cuda", quiet=True)
    for _ in range(2):
        with watched:
            assert calls[-1] == "arm"
    assert calls == ["arm", "disarm", "arm", "disarm"]
    with Guard("sampled", "cuda", quiet=True):
        pass
    assert calls == ["arm", "disarm", "arm", "disarm"]  # sampled mode leaves the debug mode alone


def test_torch_compile_region_stays_compiled_under_the_guard(device):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()

    @torch.compile(backend="eager")
    def scaled_sum(values):
        return (values * 2).relu().sum()

    values = torch.randn(16, device=device)
    with quiet_guard(device) as watched:
        scaled_sum(values)
        scaled_sum(values).item()  # SITE compiled-item
    assert counters["stats"]["unique_graphs"] >= 1  # compiled, not silently run eagerly
    assert found(watched.report) == {("sync", *at("compiled-item")): 1}


def test_report_json_round_trips_with_schema_version(device):
    with quiet_guard(device) as watched:
        torch.randn(4, device=device).sum().item()
    data = watched.report.to_dict()
    assert data["schema_version"] == 1 and data["offence_count"] == 1
    assert data["records"][0]["first_stack"][-1].endswith("in test_report_json_round_trips_with_schema_version")
    assert GuardReport.from_dict(data).to_dict() == data


@pytest.mark.parametrize("options, message", [
    ({"mode": "stict"}, "did you mean 'strict'"),
    ({"mode": "warn", "sample_every": 0}, "positive integer"),
    ({"mode": "warn", "device": "cpu"}, "is the host"),
    ({"mode": "warn", "device": "gpu0"}, "not a torch device"),
])
def test_bad_arguments_are_usage_errors(options, message):
    with pytest.raises(FadeUsageError, match=message):
        guard(**options)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_a_forked_child_stops_inspecting(device):
    """DataLoader workers fork from the guarded thread; they must not pay for a guard nobody reads."""
    import os

    from torch.utils._python_dispatch import _get_current_dispatch_mode

    read_end, write_end = os.pipe()
    with quiet_guard(device) as watched:
        pid = os.fork()
        if pid == 0:  # the child: report and leave at once
            os.write(write_end, b"%d%d" % (watched.inspecting, _get_current_dispatch_mode() is None))
            os._exit(0)
        os.waitpid(pid, 0)
        assert watched.inspecting  # the parent keeps inspecting
    assert os.read(read_end, 2) == b"01"
    os.close(read_end)
    os.close(write_end)


def test_a_mode_left_open_inside_the_guard_stays_and_the_guard_still_leaves(device):
    from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

    class LeftOpen(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    left_open = LeftOpen()
    watched = quiet_guard(device)
    with pytest.warns(RuntimeWarning, match="left in place"):
        with watched:
            left_open.__enter__()
    assert _get_current_dispatch_mode_stack() == [left_open]
    left_open.__exit__(None, None, None)
    assert _get_current_dispatch_mode_stack() == []
