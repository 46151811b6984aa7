"""Replayed against step-by-step graph-mode training on PoCL: five SGD steps and four eval calls per network, the
same process, FADE_OCL_GRAPH_REPLAY toggled (graph.REPLAY); prints SAME when every loss and output is bitwise
equal (NaN counted equal to NaN), with the capture counters. Usage: python replay_sweep.py [name,name,...]"""
import sys, torch, os, warnings, gc
warnings.simplefilter("ignore")
import torch.nn as nn, torch.nn.functional as F
import fade.ocl as ocl
from fade.ocl import graph
from fade.measure.zoo import ZOO
from fade.measure.zoo.workload import zoo_workload
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "tests" / "ocl"))
ocl.register()

class UNet(nn.Module):
    def __init__(s):
        super().__init__()
        s.d1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.GELU())
        s.d2 = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.LeakyReLU(0.1))
        s.up = nn.Upsample(scale_factor=2, mode="nearest")
        s.o = nn.Conv2d(24, 10, 1)
    def forward(s, x):
        a = s.d1(x); b = s.d2(a)
        y = s.o(torch.cat([a, s.up(b)], 1))
        return y.mean((2, 3))

class Enc(nn.Module):
    def __init__(s):
        super().__init__()
        s.emb = nn.Embedding(50, 32)
        s.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True, norm_first=True), 2)
        s.head = nn.Linear(32, 10)
    def forward(s, t):
        return s.head(s.enc(s.emb(t)).mean(1))

def make(name):
    torch.manual_seed(0)
    if name == "unet":
        return UNet(), (torch.randn(2, 3, 16, 16),), torch.randint(0, 10, (2,)), F.cross_entropy
    if name == "encoder":
        return Enc(), (torch.randint(0, 50, (2, 12)),), torch.randint(0, 10, (2,)), F.cross_entropy
    if name == "vit_b_16":
        from fade.measure.zoo import vit
        m = vit.VisionTransformer(num_classes=10, image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64)
        return m, (torch.randn(2, 3, 32, 32),), torch.randint(0, 10, (2,)), F.cross_entropy
    import graph_checks as g
    m, x, t, l = g.build(name)
    if name in ("alexnet", "vgg16"):
        x = torch.randn(2, 3, 64, 64)
    return m, (x,), t, l

def losses(name, replay):
    graph.REPLAY = replay
    torch._dynamo.reset()
    m, xs, t, loss_fn = make(name)
    m = m.to("ocl:0"); xs = [x.to("ocl:0") for x in xs]; t = t.to("ocl:0")
    step = torch.compile(m, backend="fade_ocl")
    opt = torch.optim.SGD(m.parameters(), lr=1e-2, momentum=0.9)
    torch.manual_seed(3)
    out = []
    for _ in range(5):
        opt.zero_grad(); l = loss_fn(step(*xs), t); l.backward(); opt.step(); out.append(l.item())
    m.eval()
    with torch.no_grad():
        ev = [step(*xs).sum().item() for _ in range(4)]
    return out, ev

names = sys.argv[1].split(",") if len(sys.argv) > 1 else list(ZOO) + ["unet", "encoder"]
for name in names:
    s0 = ocl.graph_stats()
    a = losses(name, True)
    s1 = ocl.graph_stats()
    b = losses(name, False)
    d = {k: s1.get(k, 0) - s0.get(k, 0) for k in ("captures", "capture_failures", "captured_replays", "dynamic_steps", "replay_misses")}
    same = torch.equal(torch.tensor(a[0] + a[1]).nan_to_num(7.5), torch.tensor(b[0] + b[1]).nan_to_num(7.5))
    print(name, "SAME" if same else f"DIFF {a} {b}", d, flush=True)
    gc.collect(); ocl.empty_cache()
