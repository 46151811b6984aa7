"""FADE: find and close the gap between what a GPU can do and what PyTorch gets on it.

    import fade
    fade.apply_fade_patches()      # env advice for this device, before the GPU runtime starts
    print(fade.device_truth(0))    # CUs, wave size and peaks as the hardware has them
    with fade.guard():             # CPU work, hidden syncs and copies inside a GPU region, per line
        train_one_epoch()

torch is imported lazily: `import fade` alone never starts a GPU runtime.
"""

__version__ = "0.1.0"

__all__ = ["apply_fade_patches", "device_truth", "guard", "tune", "load_tuning", "collect_snapshot", "diagnose",
           "__version__"]

# Eager, not a lazy wrapper: `fade.guard` is also a subpackage, and importing it (as a wrapper would on its
# first call) rebinds `fade.guard` to the module. The package imports no torch.
from fade.guard import guard  # noqa: E402


def apply_fade_patches(*args, **kwargs):
    from fade.act.patches import apply_fade_patches as _apply

    return _apply(*args, **kwargs)


def device_truth(index: int = 0):
    from fade.act.patches import device_truth as _truth

    return _truth(index)


def collect_snapshot(**kwargs):
    from fade.collect.snapshot import collect_snapshot as _collect

    return _collect(**kwargs)


def diagnose(snapshot, **kwargs):
    from fade.analyze.doctor import diagnose as _diagnose

    return _diagnose(snapshot, **kwargs)


def tune(*args, **kwargs):
    from fade.act.tune import tune as _tune

    return _tune(*args, **kwargs)


def load_tuning(*args, **kwargs):
    from fade.act.tune import load_tuning as _load

    return _load(*args, **kwargs)
