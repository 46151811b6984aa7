"""Per-layer time of each convolution layout on ocl (forced), forward and forward+backward, median of 5."""
import sys, time, json, statistics, torch, fade.ocl
fade.ocl.register()
import fade.ocl.backend as b
from fade.ocl import runtime
dev = runtime.device(0)
shapes = [(64, 64, 224), (128, 128, 112), (256, 256, 56), (512, 512, 28), (512, 512, 14),  # vgg16
          (64, 64, 56), (128, 128, 28), (256, 256, 14), (512, 512, 7)]  # resnet
rows = []
for cin, cout, side in shapes:
    n = 64 if side <= 112 else 32
    x = torch.randn(n, cin, side, side, device="ocl:0", requires_grad=True)
    conv = torch.nn.Conv2d(cin, cout, 3, padding=1, bias=False).to("ocl:0")
    for layout in ("folded", "per-image", "winograd"):
        b._conv_layout = lambda dev, key, layouts, default, run, layout=layout: layout if layout in layouts else default
        for mode in ("forward", "train"):
            def step():
                y = conv(x)
                if mode == "train":
                    y.backward(torch.ones_like(y))
            step(); dev.queue.finish()
            ts = []
            for _ in range(5):
                t = time.perf_counter(); step(); dev.queue.finish(); ts.append(time.perf_counter() - t)
            row = {"shape": f"{n}x{cin}->{cout} {side}x{side}", "layout": layout, "mode": mode,
                   "ms": statistics.median(ts) * 1e3, "min_ms": min(ts) * 1e3}
            rows.append(row); print(json.dumps(row), flush=True)
    del x, conv; b._reclaim(True); dev.empty_cache()
json.dump(rows, open(sys.argv[1], "w"), indent=1)
