"""fade.ocl's graph mode (torch.compile(model, backend="fade_ocl")) on the ocl device: zoo networks at tiny sizes
train and evaluate as eager ocl does (and as the CPU does, within float32 tolerance), elementwise chains are
fused into fewer launches than eager issues, a node with no kernel is counted and still right, and a dynamo graph
break is counted. Run by test_ocl_graph.py in a child process (PrivateUse1 is named once per process)."""

import gc
import warnings

import pytest
import torch
import torch.nn.functional as F

import fade.ocl as ocl
from fade.measure.zoo import transformer, vision, vision_more

ocl.register()
DEV = "ocl:0"
STEPS = 4  # the forward and backward graphs' first call runs step by step, the second is recorded, then replays
TINY = dict(vocab_size=128, max_positions=32, hidden=32, layers=2, heads=2, intermediate=64)


def build(name):
    torch.manual_seed(0)
    if name in ("gpt2-small", "bert-base"):
        model = transformer.gpt2(**TINY) if name == "gpt2-small" else transformer.bert(**TINY)
        tokens = torch.randint(0, TINY["vocab_size"], (2, 16))
        if name == "gpt2-small":
            loss = lambda out, t: F.cross_entropy(out.reshape(-1, out.shape[-1]), t.reshape(-1))  # noqa: E731
            return model, tokens, torch.roll(tokens, -1, 1), loss
        return model, tokens, torch.randint(0, 2, (2,)), F.cross_entropy
    model = (getattr(vision, name, None) or getattr(vision_more, name))(num_classes=10)
    return model, torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,)), F.cross_entropy


def run(name, device, graph: bool):
    """Eval outputs before training, first-step gradients, STEPS training losses (SGD with momentum), eval
    outputs after them and the buffers then, of `name`."""
    model, x, target, loss_fn = build(name)
    model = model.to(device)
    x, target = x.to(device), target.to(device)
    step = torch.compile(model, backend="fade_ocl") if graph else model
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    model.eval()
    with torch.no_grad():
        before = step(x).cpu()
    losses, grads = [], None
    model.train()
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = loss_fn(step(x), target)
        loss.backward()
        if grads is None:
            grads = {k: p.grad.cpu() for k, p in model.named_parameters() if p.grad is not None}
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        after = step(x).cpu()
    buffers = {k: b.cpu().double() for k, b in model.named_buffers()}  # running statistics, batches tracked
    return before, grads, torch.tensor(losses), after, buffers


@pytest.fixture(autouse=True)
def fresh():
    """Dropout off (its masks differ between the graph and eager, both drawn on the device): the tiny
    transformers' dropout is then the identity; each network's buffers go back to the pool afterwards."""
    torch._dynamo.reset()
    yield
    gc.collect()
    ocl.empty_cache()


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small", "gpt2-small"])
def test_graph_mode_trains_and_evaluates_as_eager(name, monkeypatch):
    from fade.ocl import philox
    monkeypatch.setattr(philox, "DROPOUT_RNG", "cpu")  # the CPU generator's masks: the same in every run
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cpu = run(name, "cpu", graph=False)
        ocl.reset_fallback_counts()
        eager = run(name, DEV, graph=False)
        before = ocl.graph_stats()
        graph = run(name, DEV, graph=True)
        after = ocl.graph_stats()
        fallbacks = ocl.fallback_counts()
    # the CPU generator's draws (DROPOUT_RNG=cpu) run on the host: dropout decomposed into bernoulli in the graph
    drawn = {"aten::bernoulli.p", "aten::bernoulli_.float", "graph:aten::bernoulli.p"}
    assert set(fallbacks) <= drawn, f"{name}: {fallbacks}"
    assert after["graphs"] - before.get("graphs", 0) >= 3  # forward, backward, inference
    assert after["replays"] - before.get("replays", 0) >= 2 * STEPS + 1
    assert after.get("captured_replays", 0) - before.get("captured_replays", 0) >= 2 * (STEPS - 2)
    # against eager ocl: the same kernels, so float32 rounding apart from fused chains' (none in practice)
    for got, reference in zip(graph, eager):
        if isinstance(got, dict):
            assert got.keys() == reference.keys()
            for key, value in reference.items():
                assert (got[key] - value).norm().item() <= 1e-5 * (value.norm().item() or 1.0), f"{name}: {key}"
        else:
            assert (got - reference).norm().item() <= 1e-5 * (reference.norm().item() or 1.0), name
    # against the CPU: as close as eager ocl is (batch norm over a 1x1 map of two images makes the gradients
    # and trained statistics sensitive to rounding; eager ocl against the CPU is zoo_checks.py's)
    for got, reference, own in zip(graph, cpu, eager):
        pairs = [(got[k], reference[k], own[k]) for k in reference] if isinstance(got, dict) else \
            [(got, reference, own)]
        for g, r, o in pairs:
            scale = r.norm().item() or 1.0
            assert (g - r).norm().item() <= 2 * (o - r).norm().item() + 1e-5 * scale, name


def _elementwise_launches(step) -> tuple:
    """(elementwise launches, all commands) of one run of `step` after two warm-up runs."""
    step()
    step()  # compiled, kernels built
    ocl.synchronize()
    with ocl.profile() as times:
        step()
    labels = [label for label, _ in times.commands]
    return sum(label.startswith(("pointwise", "fused")) for label in labels), len(labels)


class _Residual(torch.nn.Module):
    """A mobilenet_v3-like block with a residual: hardswish, the add, relu and the scaling are one chain."""

    def __init__(self):
        super().__init__()
        self.stem, self.conv, self.norm = torch.nn.Conv2d(3, 8, 3), torch.nn.Conv2d(8, 8, 3, padding=1), \
            torch.nn.BatchNorm2d(8)

    def forward(self, x):
        y = F.silu(self.stem(x))
        return torch.relu(F.hardswish(self.norm(self.conv(y))) + y) * 0.5


def test_fusion_launches_fewer_elementwise_kernels_than_eager():
    torch.manual_seed(0)
    model = _Residual().to(DEV)
    x = torch.randn(2, 3, 8, 8).to(DEV)
    compiled = torch.compile(model, backend="fade_ocl")
    before = ocl.graph_stats()

    def step(net):
        return lambda: net(x).square().mean().backward()

    eager, graph = _elementwise_launches(step(model)), _elementwise_launches(step(compiled))
    stats = ocl.graph_stats()
    fused = stats["fused_kernels"] - before.get("fused_kernels", 0)
    assert fused > 0 and stats["fused_nodes"] - before.get("fused_nodes", 0) >= 2 * fused
    assert graph[0] < eager[0] and graph[1] < eager[1], (graph, eager)  # elementwise and all commands


class _ConvNorms(torch.nn.Module):
    """Convolutions each followed by a batch norm: with and without a bias, affine and not, a residual add and a
    branch whose convolution output is read twice (that batch norm cannot be folded)."""

    def __init__(self):
        super().__init__()
        self.a, self.na = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8)
        self.b, self.nb = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8, affine=False)
        self.c, self.nc = torch.nn.Conv2d(8, 8, 1, bias=False), torch.nn.BatchNorm2d(8)
        for norm in (self.na, self.nb, self.nc):  # statistics and affine parameters away from 0 and 1
            norm.running_mean.uniform_(-1, 1)
            norm.running_var.uniform_(0.5, 2)
            if norm.affine:
                norm.weight.data.uniform_(0.5, 1.5)
                norm.bias.data.uniform_(-1, 1)

    def forward(self, x):
        y = torch.relu(self.na(self.a(x)))
        z = self.b(y)
        return torch.relu(self.nb(z) + y) + self.nc(self.c(y)) + z.mean()


def test_eval_batch_norms_after_convolutions_fold_into_their_weights():
    """Inference graphs: each batch norm whose convolution nothing else reads is folded (no bn_eval kernel
    runs), the output matches the CPU's, a change to the running statistics between calls is seen, and a
    training call of the same eval-mode network (frozen statistics) keeps its gradients right."""
    torch.manual_seed(0)
    model = _ConvNorms().eval()
    x = torch.randn(2, 3, 6, 6)
    net = _ConvNorms().eval()
    net.load_state_dict(model.state_dict())
    net = net.to(DEV)
    compiled = torch.compile(net, backend="fade_ocl")
    before = ocl.graph_stats().get("folded_batch_norms", 0)
    with torch.no_grad():
        for _ in range(3):  # step by step, recorded, replayed
            got = compiled(x.to(DEV))
        with ocl.profile() as times:
            got = compiled(x.to(DEV))
        assert ocl.graph_stats()["folded_batch_norms"] - before == 2  # a and c; b's output is read twice
        labels = [label for label, _ in times.commands]
        assert sum(label.startswith("bn_fold") for label in labels) == 2 and \
            sum(label.startswith("bn_eval") for label in labels) == 1, labels
        torch.testing.assert_close(got.cpu(), model(x), rtol=1e-5, atol=1e-5)
        for norm in ("na", "nc"):  # new statistics in place, as a running-stat update or load_state_dict makes
            getattr(model, norm).running_var.mul_(3)
            getattr(net, norm).running_var.mul_(3)
        torch.testing.assert_close(compiled(x.to(DEV)).cpu(), model(x), rtol=1e-5, atol=1e-5)
    xg = x.clone().requires_grad_()
    model(xg).square().sum().backward()
    xo = x.to(DEV).requires_grad_()
    compiled(xo).square().sum().backward()
    torch.testing.assert_close(xo.grad.cpu(), xg.grad, rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), net.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_a_chain_of_elementwise_ops_is_one_kernel_with_eager_results():
    def f(x, y, b):
        return torch.relu(x * y + b).sigmoid() * 2 - torch.nn.functional.hardswish(x)

    x, y, b = torch.randn(3, 5, 7), torch.randn(3, 5, 7), torch.randn(5, 1)
    compiled = torch.compile(f, backend="fade_ocl")
    device = [t.to(DEV) for t in (x, y, b)]
    with torch.no_grad():
        compiled(*device)
        with ocl.profile() as times:
            got = compiled(*device)
    assert len(times.commands) == 1 and times.commands[0][0].startswith("fused "), times.commands
    torch.testing.assert_close(got.cpu(), f(*device).cpu(), rtol=0, atol=0)
    torch.testing.assert_close(got.cpu(), f(x, y, b), rtol=1e-6, atol=1e-6)


def test_masked_attention_softmax_is_one_kernel_with_zeros_for_fully_masked_rows():
    """SDPA's math path in the graph mode: _safe_softmax stays one node (its own kernel, not eq/any/where over
    the scores), a query whose every key is masked gives zeros as on the CPU, and the gradients of a training
    call match the CPU's."""
    def f(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 9, 16, requires_grad=True) for _ in range(3))
    mask = torch.rand(9, 9) > 0.3
    mask[4] = False
    expected = f(q, k, v, mask)
    expected.sum().backward()
    compiled = torch.compile(f, backend="fade_ocl")
    device = [t.detach().to(DEV).requires_grad_() for t in (q, k, v)]
    for _ in range(STEPS):
        for t in device:
            t.grad = None
        got = compiled(*device, mask.to(DEV))
        got.sum().backward()
    torch.testing.assert_close(got.detach().cpu(), expected.detach(), rtol=1e-5, atol=1e-5)
    assert (got.detach().cpu()[:, :, 4] == 0).all()
    for t, reference in zip(device, (q, k, v)):
        torch.testing.assert_close(t.grad.cpu(), reference.grad, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        compiled(*device, mask.to(DEV))
        with ocl.profile() as times:
            compiled(*device, mask.to(DEV))
    kernels = [row["kernel"] for row in times.table(by="kernel")]
    assert "softmax_team" in kernels and not [label for label, _ in times.commands if "eq" in label.split()[1:]], \
        times.commands


def test_a_node_with_no_kernel_runs_eagerly_and_is_counted():
    def f(x):
        return torch.cumsum(x.relu(), 0) * 3  # cumsum has no OpenCL kernel

    x = torch.randn(6, 4)
    compiled = torch.compile(f, backend="fade_ocl")
    ocl.reset_fallback_counts()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = compiled(x.to(DEV)).cpu()
        second = compiled(x.to(DEV)).cpu()
        later = [compiled(x.to(DEV) * k).cpu() for k in (2, 3)]  # recorded, then replayed: cumsum still runs
    counts = ocl.graph_fallback_counts()
    assert counts.get("graph:aten::cumsum", 0) == 4, counts
    assert ocl.fallback_counts().get("aten::cumsum.out", 0) + ocl.fallback_counts().get("aten::cumsum", 0) >= 4
    assert any("graph mode" in str(w.message) and "cumsum" in str(w.message) for w in caught)
    torch.testing.assert_close(first, f(x))
    torch.testing.assert_close(second, f(x))
    for k, got in zip((2, 3), later):
        torch.testing.assert_close(got, f(x * k))


def test_a_graph_break_is_counted():
    def f(x):
        y = x.relu() + 1
        torch._dynamo.graph_break()
        return y * 2

    x = torch.randn(4, 4)
    ocl.reset_fallback_counts()
    got = torch.compile(f, backend="fade_ocl")(x.to(DEV)).cpu()
    torch.testing.assert_close(got, f(x))
    assert ocl.graph_fallback_counts().get("graph:break", 0) >= 1, ocl.fallback_counts()
    assert sum(ocl.graph_stats()["graph_breaks"].values()) >= 1


def test_dynamic_shapes_run_unfused_and_right():
    def f(x, y):
        return (x.relu() * y + 1).view(-1, 2).sum(0)

    compiled = torch.compile(f, backend="fade_ocl", dynamic=True)
    before = ocl.graph_stats()
    for n in (4, 6, 8):
        x, y = torch.randn(n, 2), torch.randn(n, 2)
        torch.testing.assert_close(compiled(x.to(DEV), y.to(DEV)).cpu(), f(x, y))
    stats = ocl.graph_stats()
    assert stats["graphs"] - before.get("graphs", 0) == 1  # one graph for every size
    assert stats.get("elementwise_kernels", 0) == before.get("elementwise_kernels", 0)  # symbolic: not fused


def test_writes_into_slices_run_through_the_plan():
    def f(x, y):
        z = torch.zeros_like(x)
        z[1:] = y[1:] * 2
        w = x.clone()
        w[2] = y[0] + 1
        w[:, 1:] = 0
        return z + w + torch.as_strided_scatter(x * 2, y[:3, :2] + 1, (3, 2), (3, 2), 1)

    x, y = torch.randn(4, 3), torch.randn(4, 3)
    ocl.reset_fallback_counts()
    got = torch.compile(f, backend="fade_ocl")(x.to(DEV), y.to(DEV)).cpu()
    torch.testing.assert_close(got, f(x, y))
    assert ocl.fallback_counts() == {}  # slice_scatter, select_scatter, as_strided_scatter: lowered


def test_a_kernel_output_in_another_layout_than_the_graph_plans_is_conformed():
    """A pooled channels-last map flattened for a linear layer, which the graph makes a `view` of the pool's
    (channels-last, per torch's meta) output; fade.ocl's avg_pool2d writes NCHW, so the step conforms it."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(6, 4)

    def f(x):
        return linear(torch.nn.functional.avg_pool2d(x, 2).permute(0, 2, 3, 1).reshape(-1, 6))

    x = torch.randn(2, 6, 4, 6).contiguous(memory_format=torch.channels_last)
    expected = f(x)
    linear.to(DEV)
    before = ocl.graph_stats().get("layout_copies", 0)
    got = torch.compile(f, backend="fade_ocl")(x.to(DEV)).cpu()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert ocl.graph_stats().get("layout_copies", 0) > before


def _training_losses(name: str, steps: int, monkeypatch, replay: bool) -> tuple:
    from fade.ocl import graph
    monkeypatch.setattr(graph, "REPLAY", replay)
    torch._dynamo.reset()
    model, x, target, loss_fn = build(name)
    model, x, target = model.to(DEV), x.to(DEV), target.to(DEV)
    step = torch.compile(model, backend="fade_ocl")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    torch.manual_seed(3)  # dropout's keys (Philox on the device, keyed from the CPU generator)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = loss_fn(step(x), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return torch.tensor(losses), {k: b.cpu() for k, b in model.state_dict().items()}


@pytest.mark.parametrize("name,gemm_own", [("mobilenet_v3_small", "auto"), ("gpt2-small", "auto"),
                                            ("gpt2-small", "on")])
def test_replayed_calls_match_step_by_step_calls_exactly(name, gemm_own, monkeypatch):
    """Capture and replay issue the very commands the plan would: losses and every weight and buffer after six
    steps are bitwise those of the step-by-step plan. gpt2's dropout draws on the device each call (a dynamic
    step amid replayed ones); mobilenet_v3_small's batch norms update their running statistics in place; with
    FADE_OCL_GEMM_OWN=on every GEMM is a tiled_gemm launch, replayed with its arguments set once."""
    from fade.ocl import gemm
    monkeypatch.setattr(gemm, "GEMM_OWN", gemm_own)
    before = ocl.graph_stats()
    replayed = _training_losses(name, 6, monkeypatch, True)
    stats = ocl.graph_stats()
    stepwise = _training_losses(name, 6, monkeypatch, False)
    assert stats.get("captures", 0) - before.get("captures", 0) >= 2  # forward and backward
    assert stats.get("captured_replays", 0) - before.get("captured_replays", 0) >= 8
    if name == "gpt2-small":
        assert stats.get("dynamic_steps", 0) > before.get("dynamic_steps", 0)  # the dropouts
    torch.testing.assert_close(replayed[0], stepwise[0], rtol=0, atol=0)
    for key, value in stepwise[1].items():
        torch.testing.assert_close(replayed[1][key], value, rtol=0, atol=0, msg=lambda m: f"{name}.{key}: {m}")


def test_a_replay_leaves_earlier_outputs_alone_and_takes_inputs_where_they_are():
    """Outputs a caller keeps are not overwritten by later calls (they get fresh memory each call); an input at
    another storage offset than the recorded one is not replayed over but runs step by step, still right."""
    def f(x, w):
        return torch.relu(x @ w + 1) * 2

    w = torch.randn(5, 3)
    compiled = torch.compile(f, backend="fade_ocl")
    wd = w.to(DEV)
    inputs = [torch.randn(4, 5) for _ in range(5)]
    before = ocl.graph_stats()
    kept = [compiled(x.to(DEV), wd) for x in inputs]  # step by step, recorded, then replayed three times
    for got, x in zip(kept, inputs):
        torch.testing.assert_close(got.cpu(), f(x, w), rtol=1e-5, atol=1e-5)
    assert ocl.graph_stats().get("captured_replays", 0) - before.get("captured_replays", 0) == 3
    wide = torch.randn(5, 4, 5)  # a slice at storage offset 5, with the recorded strides
    x = wide.to(DEV)[1]
    misses = ocl.graph_stats().get("replay_misses", 0)
    torch.testing.assert_close(compiled(x, wd).cpu(), f(wide[1], w), rtol=1e-5, atol=1e-5)
    assert ocl.graph_stats().get("replay_misses", 0) == misses + 1


def test_replayed_training_steps_make_no_new_buffers():
    """A replayed call's fresh outputs and gradients come from the pool: before making them the replay sweeps
    once for the last call's dead ones (which a pool miss's look at the newest tensors does not reach), so
    steady-state training steps create no OpenCL buffers."""
    from fade.ocl import runtime
    model, x, target, loss_fn = build("mobilenet_v3_small")
    model, x, target = model.to(DEV), x.to(DEV), target.to(DEV)
    step = torch.compile(model, backend="fade_ocl")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)

    def train(steps: int) -> None:
        for _ in range(steps):
            optimizer.zero_grad()
            loss_fn(step(x), target).backward()
            optimizer.step()

    before = ocl.graph_stats()
    train(4)  # step by step, captured, then replayed
    dev = runtime.device(0)
    held = dev.held_bytes
    train(3)
    assert ocl.graph_stats().get("captured_replays", 0) - before.get("captured_replays", 0) >= 6
    assert dev.held_bytes == held
