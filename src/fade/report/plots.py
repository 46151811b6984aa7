"""PNG plots of micro-suite records: GEMM TFLOP/s vs size with the dtype's peak, bandwidth vs size,
convolution per layer and direction, SDPA per backend, and CPU vs GPU; of the dist suite's collectives and
scaling; and of `fade bench llm`'s decode tokens/s against the bandwidth roofline, per batch.

Reads result records only (dicts as record.read_records returns them), and draws with matplotlib's
object API on the Agg canvas, so no global backend is switched. Error bars span the interquartile range
of the per-call times, converted to the plotted unit (value * median_s / q3_s .. value * median_s / q1_s).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Iterable, Optional

from fade.errors import FadeUsageError
from fade.results import GEMM_DTYPES

GEMM_DTYPE_ORDER = GEMM_DTYPES  # the record reader refuses a GEMM record of another dtype
FIGURE_DPI = 110
SUBPLOT_INCHES = (5.2, 3.8)  # width, height of one panel


def require_matplotlib(what: str = "plotting") -> None:
    """FadeUsageError naming the extra to install when matplotlib is missing: called before a run that will
    plot (so nothing is measured in vain) and again where the plots are drawn."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
    except ImportError:
        raise FadeUsageError(f"{what} needs matplotlib: pip install 'torch-fade[plot]'") from None


def plot_micro(records: Iterable[dict], out_dir) -> list:
    """Write one PNG per family that has "ok" records into `out_dir`; returns the paths written.

    The newest record per (case, device) is plotted. Several devices in `records` become several series.
    """
    require_matplotlib()
    latest: dict = {}
    for record in records:
        latest[(record.get("case_id"), record.get("torch_device"))] = record
    usable = [record for record in latest.values() if record.get("status") == "ok" and record.get("value") is not None]
    by_family = defaultdict(list)
    for record in usable:
        by_family[str(record.get("case_id", "")).split("/", 1)[0]].append(record)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, plotter, families in (
        ("gemm.png", _plot_gemm, ("gemm",)),
        ("bandwidth.png", _plot_bandwidth, ("memory", "transfer", "norm")),
        ("conv.png", _plot_conv, ("conv",)),
        ("sdpa.png", _plot_sdpa, ("sdpa",)),
        ("cpu_vs_gpu.png", _plot_cpu_vs_gpu, ("cpu_vs_gpu",)),
    ):
        selected = {family: by_family[family] for family in families if by_family.get(family)}
        if not selected:
            continue
        figure = plotter(selected)
        path = out_dir / name
        _save(figure, path)
        written.append(path)
    return written


# -- helpers ---------------------------------------------------------------------------------------------
def _figure(panels: int, columns: int = 2, *, panel_width: float = SUBPLOT_INCHES[0]):
    from matplotlib.figure import Figure

    columns = max(1, min(columns, panels))
    rows = (panels + columns - 1) // columns
    figure = Figure(figsize=(panel_width * columns, SUBPLOT_INCHES[1] * rows), dpi=FIGURE_DPI)
    axes = [figure.add_subplot(rows, columns, index + 1) for index in range(panels)]
    return figure, axes


def _save(figure, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    import io

    from fade.files import atomic_write_bytes

    FigureCanvasAgg(figure)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format=path.suffix.lstrip(".") or "png")
    atomic_write_bytes(path, buffer.getvalue())  # a full disk leaves the previous plot, never half a PNG


def _device_label(record: dict) -> str:
    device = record.get("device") or {}
    name = device.get("name") or (device.get("torch") or {}).get("name") or device.get("marketing_name")
    torch_device = record.get("torch_device", "?")
    return f"{name} ({torch_device})" if name else str(torch_device)


def _iqr_error(record: dict) -> tuple:
    """(below, above) the value: the IQR of per-call time as the plotted rate."""
    stats = record.get("stats") or {}
    value, median, q1, q3 = record.get("value"), stats.get("median_s"), stats.get("q1_s"), stats.get("q3_s")
    if not (value and median and q1 and q3) or record.get("unit") not in ("TFLOP/s", "GB/s"):
        return 0.0, 0.0
    return max(0.0, value - value * median / q3), max(0.0, value * median / q1 - value)


def _peak(records: list) -> Optional[dict]:
    for record in records:
        if record.get("peak"):
            return record["peak"]
    return None


def _draw_peak(axis, peak: Optional[dict], color=None) -> None:
    if not peak:
        return
    basis = f", {peak['basis']}" if peak.get("basis") else ""
    axis.axhline(
        peak["value"], linestyle="--", linewidth=1.2, color=color or "black",
        label=f"peak {peak['value']:.4g} {peak['unit']}{basis}",
    )  # fmt: skip


def _legend(axis, **options) -> None:
    """A legend only when something is labelled (matplotlib warns on an empty one)."""
    if axis.get_legend_handles_labels()[0]:
        axis.legend(**options)


def _size_ticks(axis, sizes_bytes) -> None:
    """Log x axis with a tick at each measured size, labelled in KiB/MiB/GiB."""
    from matplotlib.ticker import NullFormatter, NullLocator

    sizes = sorted(set(sizes_bytes))
    axis.set_xscale("log")
    axis.xaxis.set_minor_locator(NullLocator())
    axis.xaxis.set_minor_formatter(NullFormatter())
    axis.set_xticks([size / 2**20 for size in sizes])
    axis.set_xticklabels([_bytes_label(size) for size in sizes], fontsize=8)


def _bytes_label(nbytes: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


def _series_by_device(records: list) -> dict:
    series = defaultdict(list)
    for record in records:
        series[_device_label(record)].append(record)
    return series


def _with_errors(axis, xs, records, **style):
    errors = [_iqr_error(record) for record in records]
    axis.errorbar(
        xs, [record["value"] for record in records],
        yerr=[[below for below, _ in errors], [above for _, above in errors]], capsize=3, **style,
    )  # fmt: skip


# -- families --------------------------------------------------------------------------------------------
def _plot_gemm(families: dict):
    records = families["gemm"]
    dtypes = [dtype for dtype in GEMM_DTYPE_ORDER if any(r["params"].get("dtype") == dtype for r in records)]
    figure, axes = _figure(len(dtypes))
    for axis, dtype in zip(axes, dtypes):
        of_dtype = [record for record in records if record["params"].get("dtype") == dtype]
        for device_label, series in _series_by_device(of_dtype).items():
            squares = sorted((r for r in series if str(r["params"].get("shape", "")).startswith("square")),
                             key=lambda r: r["params"]["m"])  # fmt: skip
            others = [r for r in series if r not in squares]
            if squares:
                _with_errors(axis, [r["work"]["flops"] / 1e9 for r in squares], squares, marker="o", label=f"square, {device_label}")
                for record in squares:
                    axis.annotate(str(record["params"]["m"]), (record["work"]["flops"] / 1e9, record["value"]),
                                  textcoords="offset points", xytext=(0, 6), fontsize=7, ha="center")  # fmt: skip
            if others:
                _with_errors(axis, [r["work"]["flops"] / 1e9 for r in others], others, marker="^", linestyle="none",
                             label=f"transformer shapes, {device_label}")  # fmt: skip
                for record in others:
                    label = str(record["params"].get("shape", "")).split(".")[-1]
                    axis.annotate(label, (record["work"]["flops"] / 1e9, record["value"]),
                                  textcoords="offset points", xytext=(4, -10), fontsize=7)  # fmt: skip
        _draw_peak(axis, _peak(of_dtype))
        axis.set_xscale("log")
        axis.set_xlabel("GFLOP per call (2*m*n*k / 1e9)")
        axis.set_ylabel("TFLOP/s")
        axis.set_ylim(bottom=0)
        axis.set_title(f"GEMM {dtype}")
        axis.grid(True, alpha=0.3)
        _legend(axis, fontsize=7, loc="best")
    figure.suptitle("GEMM throughput vs size (median, IQR bars)")
    return figure


def _plot_bandwidth(families: dict):
    panels = [family for family in ("memory", "transfer", "norm") if families.get(family)]
    figure, axes = _figure(len(panels))
    for axis, family in zip(axes, panels):
        records = families[family]
        if family == "memory":
            for op in ("copy", "scale", "add", "triad"):
                for device_label, series in _series_by_device([r for r in records if r["params"].get("op") == op]).items():
                    series.sort(key=lambda r: r["params"]["elements"])
                    _with_errors(axis, [r["params"]["elements"] * 4 / 2**20 for r in series], series, marker="o",
                                 label=f"{op}, {device_label}")  # fmt: skip
            _draw_peak(axis, _peak(records))
            _size_ticks(axis, [r["params"]["elements"] * 4 for r in records])
            axis.set_xlabel("bytes per array (GB/s counts arrays read + written)")
            axis.set_title("Device memory bandwidth (STREAM)")
        elif family == "transfer":
            for key in sorted({(r["params"]["direction"], r["params"]["memory"]) for r in records}):
                series = sorted((r for r in records if (r["params"]["direction"], r["params"]["memory"]) == key),
                                key=lambda r: r["params"]["nbytes"])  # fmt: skip
                _with_errors(axis, [r["params"]["nbytes"] / 2**20 for r in series], series, marker="o", label=" ".join(key))
            _size_ticks(axis, [r["params"]["nbytes"] for r in records])
            axis.set_xlabel("payload per copy")
            axis.set_title("Host <-> device transfer")
        else:
            records = sorted(records, key=lambda r: r["case_id"])
            labels = [r["case_id"].split("/", 1)[1] for r in records]
            errors = [_iqr_error(r) for r in records]
            axis.bar(range(len(records)), [r["value"] for r in records],
                     yerr=[[e[0] for e in errors], [e[1] for e in errors]], capsize=3)  # fmt: skip
            axis.set_xticks(range(len(records)))
            axis.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
            _draw_peak(axis, _peak(records))
            axis.set_title("layer_norm / softmax / sum (read + write)")
        axis.set_ylabel("GB/s")
        axis.set_ylim(bottom=0)
        axis.grid(True, alpha=0.3)
        _legend(axis, fontsize=7)
    figure.suptitle("Bandwidth (median, IQR bars)")
    return figure


def _plot_conv(families: dict):
    records = families["conv"]
    groups = sorted({(r["params"]["dtype"], r["params"]["layout"]) for r in records})
    figure, axes = _figure(len(groups), columns=1, panel_width=max(7.0, 1.1 * len({r['params']['layer'] for r in records})))
    directions = ("fwd", "bwd_data", "bwd_weight")
    width = 0.8 / len(directions)
    for axis, (dtype, layout) in zip(axes, groups):
        group = [r for r in records if (r["params"]["dtype"], r["params"]["layout"]) == (dtype, layout)]
        layers = list(dict.fromkeys(r["params"]["layer"] for r in group))
        for offset, direction in enumerate(directions):
            found = {r["params"]["layer"]: r for r in group if r["params"]["direction"] == direction}
            xs = [index + (offset - 1) * width for index, layer in enumerate(layers) if layer in found]
            bars = [found[layer] for layer in layers if layer in found]
            errors = [_iqr_error(r) for r in bars]
            axis.bar(xs, [r["value"] for r in bars], width=width, label=direction,
                     yerr=[[e[0] for e in errors], [e[1] for e in errors]], capsize=2)  # fmt: skip
        _draw_peak(axis, _peak(group))
        axis.set_xticks(range(len(layers)))
        axis.set_xticklabels(layers, rotation=30, ha="right", fontsize=8)
        axis.set_ylabel("TFLOP/s")
        axis.set_title(f"{dtype}, {layout}, batch {group[0]['params']['n']}")
        axis.grid(True, axis="y", alpha=0.3)
        _legend(axis, fontsize=7)
    figure.suptitle(f"ResNet-50 convolutions per layer and direction, {_device_label(records[0])} (median, IQR bars)")
    return figure


def _plot_sdpa(families: dict):
    records = sorted(families["sdpa"], key=lambda r: r["case_id"])
    figure, axes = _figure(1, columns=1, panel_width=max(7.0, 0.55 * len(records)))
    axis = axes[0]
    labels = [f"{r['params']['dtype']} {r['params']['backend']}" + (" causal" if r["params"].get("causal") else "") for r in records]
    errors = [_iqr_error(r) for r in records]
    axis.bar(range(len(records)), [r["value"] for r in records],
             yerr=[[e[0] for e in errors], [e[1] for e in errors]], capsize=3)  # fmt: skip
    for index, record in enumerate(records):
        ran = (record.get("extra") or {}).get("backend_ran", "?")
        axis.annotate(ran.lower().replace("_attention", ""), (index, record["value"]), textcoords="offset points",
                      xytext=(0, 3), fontsize=7, ha="center")  # fmt: skip
    axis.set_xticks(range(len(records)))
    axis.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
    drawn = set()
    for dtype in sorted({r["params"]["dtype"] for r in records}):
        peak = _peak([r for r in records if r["params"]["dtype"] == dtype])
        if peak and peak["value"] not in drawn:  # fp16 and bf16 usually share one peak: one line
            drawn.add(peak["value"])
            _draw_peak(axis, {**peak, "unit": f"{peak['unit']} ({dtype})"})
    shape = records[0]["params"]
    axis.set_ylim(0, 1.15 * max(max(r["value"] for r in records), (_peak(records) or {}).get("value", 0)))
    axis.set_title(f"B{shape['batch']} H{shape['heads']} S{shape['seq']} D{shape['head_dim']}; above each bar: the backend that ran")
    figure.suptitle(f"Scaled-dot-product attention forward, {_device_label(records[0])}")
    axis.set_ylabel("TFLOP/s")
    axis.grid(True, axis="y", alpha=0.3)
    _legend(axis, fontsize=7)
    return figure


def _plot_cpu_vs_gpu(families: dict):
    records = sorted(families["cpu_vs_gpu"], key=lambda r: r["params"]["n"])
    from matplotlib.ticker import FuncFormatter

    figure, axes = _figure(1, columns=1, panel_width=max(7.0, 1.6 * len(records)))
    axis = axes[0]
    positions = range(len(records))
    cpu = [r["extra"]["cpu"]["tflops"] for r in records]
    gpu = [r["extra"]["gpu"]["tflops"] for r in records]
    axis.bar([p - 0.2 for p in positions], cpu, width=0.4, label=f"CPU ({records[0]['extra']['cpu'].get('threads')} threads)")
    axis.bar([p + 0.2 for p in positions], gpu, width=0.4, label=f"GPU {_device_label(records[0])}")
    for position, record, height in zip(positions, records, gpu):
        axis.annotate(f"{record['value']:.3g}x", (position + 0.2, height), textcoords="offset points",
                      xytext=(0, 3), ha="center", fontsize=8)  # fmt: skip
    axis.set_yscale("log")
    axis.set_ylim(bottom=min(cpu + gpu) / 3, top=max(cpu + gpu) * 2)
    axis.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_xticks(list(positions))
    axis.set_xticklabels([f"{r['params']['n']}^3 {r['params']['dtype']}" for r in records])
    axis.set_ylabel("TFLOP/s (log)")
    axis.set_title("GEMM on CPU and GPU, both warm; label = GPU speed-up")
    axis.grid(True, axis="y", alpha=0.3)
    axis.legend(fontsize=8)
    return figure


def plot_dist(records: Iterable[dict], out_dir) -> list:
    """`fade bench dist`'s plots into `out_dir`: dist_busbw.png (bus bandwidth vs buffer size, one panel per
    collective, one series per device, process count and dtype, the slowest link's peak as a dashed line where
    the records know it) and dist_scaling.png (scaling efficiency vs process count per model and strategy).
    Returns the paths written; the newest record per (case, device) is plotted."""
    require_matplotlib()
    latest: dict = {}
    for record in records:
        if record.get("suite") == "dist":
            latest[(record.get("case_id"), record.get("torch_device"))] = record
    usable = [record for record in latest.values() if record.get("status") == "ok" and record.get("value") is not None]
    collectives = defaultdict(list)
    scaling = []
    for record in usable:
        extra = record.get("extra") or {}
        if extra.get("collective"):
            collectives[extra["collective"]].append(record)
        elif extra.get("scaling"):
            scaling.append(record)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, plotter, selected in (("dist_busbw.png", _plot_busbw, collectives), ("dist_scaling.png", _plot_scaling, scaling)):
        if selected:
            path = out_dir / name
            _save(plotter(selected), path)
            written.append(path)
    return written


def _plot_busbw(collectives: dict):
    figure, axes = _figure(len(collectives))
    for axis, (name, group) in zip(axes, sorted(collectives.items())):
        series = defaultdict(list)
        for record in group:
            extra = record["extra"]
            series[f"{_device_label(record)} x{extra['world']} {(record.get('params') or {}).get('dtype')}"].append(record)
        for label, members in sorted(series.items()):
            members.sort(key=lambda record: record["extra"]["size_bytes"])
            _with_errors(axis, [record["extra"]["size_bytes"] / 2**20 for record in members], members, marker="o",
                         markersize=3, label=label)  # fmt: skip
        _draw_peak(axis, _peak(group))
        _size_ticks(axis, [record["extra"]["size_bytes"] for record in group])
        axis.set_title(f"{name}: busbw = algbw x {group[0]['extra'].get('bus_factor')}", fontsize=9)
        _axis_labels(axis, "buffer size (nccl-tests' size)", "bus bandwidth GB/s (bars: IQR)")
    return figure


def _plot_scaling(scaling: list):
    figure, (axis,) = _figure(1)
    for record in scaling:
        entries = record["extra"]["scaling"]
        label = f"{record['extra'].get('model')} {record['extra'].get('strategy')} ({_device_label(record)})"
        axis.plot([entry["world"] for entry in entries], [entry["efficiency_pct"] for entry in entries], marker="o", label=label)
    axis.axhline(100.0, linestyle="--", linewidth=1.0, color="black", label="linear scaling")
    _axis_labels(axis, "processes", "efficiency %: samples/s per process vs 1 process")
    return figure


def plot_llm_roofline(views: Iterable, out_dir) -> list:
    """One PNG per fade.analyze.compare.RooflineView with decode cases, into `out_dir` (llm_roofline_<n>.png):
    decode tokens/s against the batch, one line per variant, the bandwidth roofline dashed where the device's
    bandwidth is known, each point labelled with its % of the roofline; both axes logarithmic. Returns the
    paths written."""
    require_matplotlib()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for index, view in enumerate(view for view in views if view.decode):
        path = out_dir / f"llm_roofline_{index}.png"
        _save(_plot_roofline(view), path)
        written.append(path)
    return written


def _plot_roofline(view):
    from matplotlib.ticker import FuncFormatter, NullFormatter, NullLocator

    figure, (axis,) = _figure(1, panel_width=7.0)
    drawn = []
    for variant in view.variants:
        points = sorted((point for point in view.decode
                         if point.variant == variant and point.batch > 0 and (point.tokens_per_s or 0) > 0),
                        key=lambda point: point.batch)  # fmt: skip
        if not points:
            continue
        axis.plot([point.batch for point in points], [point.tokens_per_s for point in points], marker="o", markersize=4,
                  label=variant)  # fmt: skip
        for point in points:
            drawn.append(point.batch)
            if point.pct_of_roofline is not None:
                axis.annotate(f"{point.pct_of_roofline:.0f}%", (point.batch, point.tokens_per_s), fontsize=7,
                              textcoords="offset points", xytext=(4, -10))  # fmt: skip
    lines = [(batch, line) for batch, line in view.roofline if line > 0 and batch > 0]  # a log axis draws no 0
    if lines:
        bandwidth = f" ({view.bandwidth_gbs:.4g} GB/s)" if view.bandwidth_gbs else ""
        axis.plot([batch for batch, _ in lines], [line for _, line in lines], linestyle="--",
                  linewidth=1.2, color="black", marker="_", label=f"bandwidth roofline{bandwidth}")  # fmt: skip
        drawn += [batch for batch, _ in lines]
    else:
        axis.text(0.02, 0.95, "no roofline: no memory bandwidth known for this device", transform=axis.transAxes,
                  fontsize=7, va="top")  # fmt: skip
    batches = sorted(set(drawn))
    if batches:
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.xaxis.set_minor_locator(NullLocator())
        axis.xaxis.set_minor_formatter(NullFormatter())
        axis.set_xticks(batches)
        axis.set_xticklabels([str(batch) for batch in batches], fontsize=8)
        plain = FuncFormatter(lambda value, _: f"{value:g}")  # 300, not 3 x 10^2
        axis.yaxis.set_major_formatter(plain)
        low, high = axis.get_ylim()
        axis.yaxis.set_minor_formatter(plain if high < 10 * low else NullFormatter())  # within a decade: label 2..9
        axis.tick_params(axis="y", which="both", labelsize=7)
    axis.set_title(view.title, fontsize=9)
    _axis_labels(axis, "batch (sequences decoded together)", "decode tokens/s over the batch")
    return figure


def _axis_labels(axis, x_label: str, y_label: str) -> None:
    axis.set_xlabel(x_label, fontsize=8)
    axis.set_ylabel(y_label, fontsize=8)
    axis.grid(True, alpha=0.3)
    _legend(axis, fontsize=7)
