"""`fade tune`: search the knobs that change a model's speed on this device, keep only sound and
measurably faster ones, and write a tuning file the user's program applies.

Pipeline: fade.analyze.knobs (the table in data/knobs.toml, filtered per target) -> search.py (noise-aware
greedy search, injectable measurement) with trial.py (one trial in a worker) and numerics.py (sound or not) ->
tuning_file.py (versioned JSON, load_tuning) with cache.py (per-device cache, locks, stack invalidation) ->
pretune.py (seed 002: exhaustive find/tuning of one step's shapes into the cache).
"""

from fade.act.tune.tuning_file import Tuning, TuningFileError, load_tuning, read_tuning, tuned
from fade.act.tune.tuner import TuneResult, run_tune, tune

__all__ = ["run_tune", "tune", "TuneResult", "load_tuning", "read_tuning", "tuned", "Tuning", "TuningFileError"]
