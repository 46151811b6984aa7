"""FADE: find and close the gap between what a GPU can do and what PyTorch gets on it.

    import fade
    fade.apply_fade_patches()      # env advice for this device, before the GPU runtime starts
    print(fade.device_truth(0))    # CUs, wave size and peaks as the hardware has them
    with fade.guard():             # CPU work, hidden syncs and copies inside a GPU region, per line
        train_one_epoch()
    with fade.profile(steps=3) as p:  # where a step's time goes, and the fix to try: p.summary
        train_one_epoch()          # steps end at optimizer.step(), or at fade.step()
    result = fade.doctor()         # what `fade doctor` does; result.to_dict() is its JSON
    result = fade.bench("micro", quick=True)

torch is imported lazily: `import fade` alone never starts a GPU runtime. Every name below is defined in
fade.api, which imports each library module inside the function that needs it.
"""

from fade.version import __version__
from fade.api import (
    BenchResult,
    DoctorResult,
    apply_fade_patches,
    bench,
    collect_snapshot,
    device_truth,
    diagnose,
    doctor,
    guard,
    load_tuning,
    profile,
    step,
    tune,
)

__all__ = ["doctor", "bench", "tune", "load_tuning", "guard", "profile", "step", "apply_fade_patches", "device_truth",
           "collect_snapshot", "diagnose", "DoctorResult", "BenchResult", "__version__"]
