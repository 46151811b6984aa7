"""`fade tune`: search the knobs that change a model's speed on this device, keep only sound and
measurably faster ones, and write a profile the user's program applies.

Pipeline: knobs.py (the table in data/knobs.toml, filtered per target) -> search.py (noise-aware greedy
search, injectable measurement) with trial.py (one trial in a worker) and numerics.py (sound or not) ->
profile.py (versioned JSON, load_tuning) with cache.py (per-device cache, locks, stack invalidation) ->
pretune.py (seed 002: exhaustive find/tuning of one step's shapes into the cache).
"""

from fade.act.tune.profile import ProfileError, Tuning, load_profile, load_tuning, tuned
from fade.act.tune.tuner import run_tune, tune

__all__ = ["run_tune", "tune", "load_tuning", "load_profile", "tuned", "Tuning", "ProfileError"]
