"""What Inductor's on-disk caches answered while a trial compiled: FX-graph cache hits and misses, read from
torch._dynamo.utils.counters (the process-wide counters torch.compile keeps), as a difference around one trial.

Why the tuner needs it: a compile served from the cache costs a fraction of a cold one (the 8B decode's
reduce-overhead trial took 20 s on a warm cache on an H200, and ~84 s cold, results/s21-h200/, s22-h200/), so a
warm trial's cost says only that the next compile of a new graph takes at least that long
(act.tune.search, Cost)."""

from __future__ import annotations


def counts() -> dict:
    """{"hits": n, "misses": n} of Inductor's FX-graph cache in this process so far; {} where torch keeps none."""
    try:
        from torch._dynamo.utils import counters
    except Exception:  # no torch, or a torch without the counters
        return {}
    inductor = counters.get("inductor", {})
    return {"hits": int(inductor.get("fxgraph_cache_hit", 0)), "misses": int(inductor.get("fxgraph_cache_miss", 0))}


def since(before: dict) -> dict:
    """The hits and misses since `before` (a counts() taken earlier); {} where either side has none."""
    after = counts()
    if not before or not after:
        return {}
    return {name: after[name] - before.get(name, 0) for name in after}


def served_from_cache(record: dict) -> bool:
    """Whether a trial's compile_cache record says every graph it compiled came from the cache (hits, no miss).
    A record whose counts are not integers (a journal written elsewhere) says nothing: False."""
    hits, misses = (record.get("hits", 0), record.get("misses", 0)) if isinstance(record, dict) else (None, None)
    if not all(isinstance(count, int) and not isinstance(count, bool) for count in (hits, misses)):
        return False
    return hits > 0 and misses == 0
