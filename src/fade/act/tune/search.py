"""The noise-aware knob search: greedy coordinate ascent over the knob table, within a time budget.

Method
    The baseline (every knob at its first value: PyTorch's defaults) is measured first. Then compile first:
    the compile knob's values are measured against the baseline, because the compile mode decides which
    precision and layout win (on an H100, mobilenet_v2 inference at batch 64: amp-bf16 is 21% slower than
    fp32 in eager mode, launch-bound, yet 1.44x faster once reduce-overhead's CUDA graphs remove the launch
    cost; a search that judges precision in eager mode first never sees that). The other knobs are then
    visited in knobs.GROUP_ORDER (precision, layout, backend, optimizer) under the best compile mode, each
    value measured with the rest of the current best configuration (coordinate ascent). `compile_first=False`
    keeps the table's order (compile last), the search before issue 14, for comparison. The passes repeat (up to
    MAX_PASSES) while a pass changed the best configuration: a knob is visited again, over every value but its
    current one, when the other knobs' values moved since its last visit (gpt2-small inference on an H100:
    CUDA graphs gain 1% in fp32, where the step is GEMM-bound, and 2.3x once amp-bf16 makes it launch-bound).
    No configuration is judged twice; rows of a later pass say which knobs had moved. Every value of a knob
    is judged against the configuration before that knob (its start), and of the values that beat the start
    beyond the noise bar the fastest median is kept: a steady candidate (reduce-overhead: CUDA graphs, 0.04%
    spread) is not lost to a wandering one (compile default, 28%) whose spread would hide the difference
    (mobilenet_v2 infer, H100, docs/performance.md). A candidate is
        rejected      when it crashed, ran out of memory, timed out, or failed the numerics check
                      (numerics.check: loss vs fp32 from the same seed, finite gradients, outputs);
        accepted      when its median step time beats the start's by more than the noise bar
                      (noise_bar: the larger relative IQR of the two, at least NOISE_FLOOR) and is the
                      fastest such value of its knob so far; it becomes the current best (an earlier
                      accepted value of the knob is then marked slower, with the reason);
        within-noise  when it is faster by less than the bar;
        slower        otherwise;
        skipped       when it needs another knob value the current best lacks (knob table `needs`);
        not-tried     when the search budget ran out before it, when its expected cost (the knob table's
                      `cost` factor times the dearest trial of that knob so far) exceeds the budget left,
                      or when it outran the budget left and was stopped.
    `exhaustive=True` measures every combination instead (for verification) and picks the fastest sound
    one, subject to the same bar against the baseline.
Budget
    `budget_s` covers everything: the caller's set-up (`spent_s`), the search and the final check. The
    final check keeps a reserve (FINAL_SHARE of the budget, or twice the cost of the baseline and best
    trials if more); a candidate is started only while budget beyond the reserve is left, and (when
    `measure` takes `timeout_s`) it is stopped when it outruns that share (at least
    MIN_TRIAL_TIMEOUT_S), so one max-autotune compile cannot eat the whole budget.
Final check
    The chosen configuration and the baseline are re-measured interleaved, so clock drift hits both alike:
    in one worker taking turns (`measure.side_by_side`, nothing compiled twice), else FINAL_ORDER
    repeated FINAL_ROUNDS times; the before/after figures come from these pooled
    samples, not from the search. A profile only says what this check proved: unless the chosen
    configuration is faster than the baseline beyond the bar here, the baseline's knobs are the result
    (verdict "not-proven" when within the bar, "reverted" when slower) and a candidates row says why. If the
    search's baseline and the final check's baseline differ by more than max(HOST_DRIFT_TOLERANCE, the bar,
    the search baseline's relative IQR),
    the host changed under the run: verdict "noisy-host", nothing is recommended. (The caller adds the
    measured host load: recommend_nothing with "noisy-host" when other processes used the cores.)
Resume
    Each search trial is appended to a journal (cache.Journal) as it finishes. A resumed search with the
    same journal reuses recorded trials instead of measuring them again; the final check always measures.

The measurement is injected (`measure(config) -> Trial`) and so is the clock: tests drive the whole
search with a deterministic fake timer.
"""

from __future__ import annotations

import inspect
import itertools
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

from fade.act.tune import numerics
from fade.act.tune.knobs import baseline_config, unmet_needs
from fade.measure.timing import quantile

NOISE_FLOOR = 0.02  # 2%: below this, run-to-run drift of one H100 under its power cap (docs/performance.md) decides
FINAL_SHARE = 0.25  # of the budget, kept for the interleaved final check (at least)
MIN_TRIAL_TIMEOUT_S = 30.0  # a trial started near the end of the budget still gets this long
# Coordinate ascent passes: knobs interact both ways on the H100 (mobilenet_v2 infer: bf16 pays only under CUDA
# graphs; gpt2-small infer: CUDA graphs pay only once bf16 makes the step launch-bound,
# results/tune-shakedown-h100/), so a knob is judged again when the knobs after it moved. Three passes cover
# precision -> compile -> layout chains; the budget stops them earlier.
MAX_PASSES = 3
FINAL_ROUNDS = 2  # x FINAL_ORDER: four measurements of each side
FINAL_ORDER = ("baseline", "chosen", "chosen", "baseline")  # ABBA: a linear drift cancels within each round
# the search's baseline and the final check's differ by more than this (or the noise bar): the host changed.
# Same-process drift on an H100 under its power cap stays within a few % (docs/performance.md); the
# busy 2-core host of issue 14 moved 8-12x.
HOST_DRIFT_TOLERANCE = 0.10
STATUSES = ("baseline", "accepted", "within-noise", "slower", "rejected", "skipped", "not-tried")
# "faster": the final check proved the chosen configuration faster; every other verdict recommends the baseline
VERDICTS = ("faster", "baseline-kept", "not-proven", "reverted", "noisy-host")


@dataclass(frozen=True)
class Trial:
    """One measured configuration. `status` is "ok" when it ran; "failed" (crash, OOM, timeout) with `reason`."""

    config: dict
    samples_s: tuple = ()  # seconds per step
    status: str = "ok"
    reason: Optional[str] = None
    numerics: Optional[dict] = None  # what numerics.check reads
    samples_per_step: int = 1  # batch: turns step times into samples/s
    cost_s: float = 0.0  # wall time the trial took, compile and checks included
    extra: dict = field(default_factory=dict)

    @property
    def median_s(self) -> float:
        return quantile(self.samples_s, 0.5)

    @property
    def relative_iqr(self) -> float:
        return (quantile(self.samples_s, 0.75) - quantile(self.samples_s, 0.25)) / self.median_s

    def to_dict(self) -> dict:
        data = asdict(self)
        data["samples_s"] = list(self.samples_s)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Trial":
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        known["samples_s"] = tuple(known.get("samples_s", ()))
        return cls(**known)


@dataclass
class Candidate:
    """One row of the profile's candidates table."""

    knob: Optional[str]  # None for the baseline and for exhaustive combinations
    value: Optional[str]
    config: dict
    status: str  # one of STATUSES
    reason: str = ""
    samples_per_s: Optional[float] = None
    relative_iqr: Optional[float] = None
    speedup_vs_best: Optional[float] = None  # best median / this median, against the best at the time
    noise_bar: Optional[float] = None
    cost_s: Optional[float] = None  # wall time of the trial: build, compile, checks and timing


@dataclass
class SearchResult:
    chosen: dict
    baseline: dict
    candidates: list
    before: Optional[dict]  # samples/s figures of the baseline in the final check
    after: Optional[dict]
    verdict: str  # one of VERDICTS; only "faster" recommends knobs other than the baseline's
    left_out: dict = field(default_factory=dict)  # knob id -> why it was not searched
    elapsed_s: float = 0.0
    trials_measured: int = 0
    trials_resumed: int = 0
    verdict_reason: str = ""
    candidate: Optional[dict] = None  # what the search chose before the final check judged it
    samples_per_step: Optional[int] = None  # the batch the workload really has (a user's may differ from --batch)

    @property
    def recommends(self) -> bool:
        return self.verdict == "faster"

    def to_dict(self) -> dict:
        return asdict(self)


class SearchError(Exception):
    """The search cannot produce a profile: the baseline itself failed."""


def config_key(config: dict) -> str:
    return json.dumps(config, sort_keys=True)


def noise_bar(first: Trial, second: Trial) -> float:
    """The relative speed-up a candidate must exceed: max(NOISE_FLOOR, either side's IQR / median)."""
    return max(NOISE_FLOOR, first.relative_iqr, second.relative_iqr)


def compare(candidate: Trial, best: Trial) -> tuple:
    """(speed-up of candidate over best as best_median / candidate_median, the noise bar)."""
    return best.median_s / candidate.median_s, noise_bar(candidate, best)


def search(
    knobs: list,
    measure: Callable[[dict], Trial],
    *,
    reference: Optional[dict] = None,
    budget_s: float,
    exhaustive: bool = False,
    journal=None,
    left_out: Optional[dict] = None,
    clock: Callable[[], float] = time.monotonic,
    progress: Optional[Callable[[str], None]] = None,
    spent_s: float = 0.0,
    compile_first: bool = True,
) -> SearchResult:
    """Search `knobs` (already filtered and ordered: knobs.searched_knobs) as the module docstring says.

    `measure(config)` returns a Trial and must not raise for a candidate's own failure (it returns status
    "failed"). `reference` is fp32's {"losses", "rounded_losses"} for training candidates. `journal` has
    `load() -> {config_key: Trial dict}` and `append(Trial dict)` (cache.Journal). SearchError if the
    baseline fails; KeyboardInterrupt passes through after the journal holds every finished trial.
    """
    if budget_s <= 0:
        raise ValueError("budget_s must be > 0")
    started = clock() - spent_s  # the caller's set-up (fingerprint, fp32 reference) counts against the budget

    def search_left_s(best: Trial) -> float:
        """Budget left for search trials: the final check's reserve is FINAL_SHARE of the budget, or twice
        what the baseline and the best trial cost if more (it builds and compiles both again)."""
        reserve_s = max(FINAL_SHARE * budget_s, 2 * (baseline_trial.cost_s + best.cost_s))
        return budget_s - reserve_s - (clock() - started)
    recorded = journal.load() if journal is not None else {}
    counts = {"measured": 0, "resumed": 0}
    say = progress or (lambda message: None)

    takes_timeout = "timeout_s" in inspect.signature(measure).parameters
    costs: dict = {}  # (knob id, value) -> wall seconds its trial took, for _expected_cost_s

    def run(config: dict, timeout_s: Optional[float] = None) -> Trial:
        key = config_key(config)
        if key in recorded:
            counts["resumed"] += 1
            return Trial.from_dict(recorded[key])
        trial = measure(dict(config), timeout_s=timeout_s) if takes_timeout else measure(dict(config))
        counts["measured"] += 1
        if journal is not None:
            journal.append(trial.to_dict())
        recorded[key] = trial.to_dict()
        return trial

    def reason_rejected(trial: Trial) -> Optional[str]:
        if trial.status != "ok":
            return trial.reason or trial.status
        if not trial.samples_s:
            return "no timing samples"
        return numerics.check(trial.numerics, reference)

    baseline = baseline_config(knobs)
    baseline_trial = run(baseline)
    failure = reason_rejected(baseline_trial)
    if failure:
        raise SearchError(f"the baseline configuration itself fails: {failure}")
    candidates = [_row(None, None, baseline_trial, "baseline", "PyTorch's defaults")]
    say(f"baseline: {_rate(baseline_trial):.4g} samples/s")

    if exhaustive:
        best = _exhaustive(knobs, baseline_trial, run, reason_rejected, candidates)
    else:
        best = baseline_trial
        judged = {config_key(baseline)}  # configurations already judged in this search: never judged twice
        seen_with: dict = {}  # knob id -> the other knobs' values when it was last visited
        for pass_number in range(1, MAX_PASSES + 1):
            best_before_pass = best.config
            for knob in search_order(knobs, compile_first=compile_first):
                others = {name: value for name, value in best.config.items() if name != knob.id}
                seen_before = seen_with.get(knob.id)
                if seen_before == others:
                    continue  # nothing it depends on moved since its last visit
                seen_with[knob.id] = others
                start, kept_row = best, None  # each value is judged against the configuration before this knob
                values = knob.values[1:] if pass_number == 1 else [v for v in knob.values if v != best.config[knob.id]]
                first_row = len(candidates)
                for value in values:
                    config = {**best.config, knob.id: value}
                    if config_key(config) in judged:
                        continue
                    judged.add(config_key(config))
                    left_s = search_left_s(best)
                    if left_s <= 0:
                        if pass_number == 1:  # a later pass is a second look: its unstarted values say nothing new
                            candidates.append(Candidate(knob.id, value, config, "not-tried", "the search budget ran out"))
                        continue
                    unmet = unmet_needs(knobs, config)
                    if unmet:
                        candidates.append(Candidate(knob.id, value, config, "skipped", unmet))
                        continue
                    expected_s = _expected_cost_s(knob, value, costs)
                    if expected_s is not None and expected_s > left_s:
                        reason = f"expected to take ~{expected_s:.0f} s, {left_s:.0f} s of the search budget left"
                        candidates.append(Candidate(knob.id, value, config, "not-tried", reason))
                        say(f"{knob.id}={value}: not tried ({reason})")
                        continue
                    trial = run(config, timeout_s=max(left_s, MIN_TRIAL_TIMEOUT_S))
                    costs[(knob.id, value)] = trial.cost_s
                    if trial.status != "ok" and (trial.reason or "").startswith("timeout"):
                        reason = f"outran the {left_s:.0f} s left of the search budget and was stopped"
                        candidates.append(_row(knob.id, value, trial, "not-tried", reason))
                        say(f"{knob.id}={value}: not tried ({reason})")
                        continue
                    failure = reason_rejected(trial)
                    if failure:
                        candidates.append(_row(knob.id, value, trial, "rejected", failure))
                        say(f"{knob.id}={value}: rejected: {failure}")
                        continue
                    speedup, bar = compare(trial, start)
                    if speedup > 1 + bar and trial.median_s >= best.median_s:  # beats the start, not the value kept
                        status = "slower"
                        reason = (f"{100 * (speedup - 1):.1f}% faster than without {knob.id}, beyond the {100 * bar:.1f}% noise bar, "
                                  f"but {knob.id}={best.config[knob.id]} is faster still")  # fmt: skip
                    elif speedup > 1 + bar:
                        status, reason = "accepted", f"{100 * (speedup - 1):.1f}% faster than the best so far, beyond the {100 * bar:.1f}% noise bar"
                    elif speedup >= 1:
                        status, reason = "within-noise", f"{100 * (speedup - 1):.1f}% faster, inside the {100 * bar:.1f}% noise bar"
                    else:
                        status, reason = "slower", f"{100 * (1 - speedup):.1f}% slower than the best so far"
                    row = _row(knob.id, value, trial, status, reason, speedup, bar)
                    candidates.append(row)
                    say(f"{knob.id}={value}: {status} ({reason})")
                    if status == "accepted":
                        if kept_row is not None:  # an earlier value of this knob, beaten on the median
                            kept_row.status = "slower"
                            kept_row.reason += f"; then {knob.id}={value} was faster still"
                        best, kept_row = trial, row
                if pass_number > 1:
                    for row in candidates[first_row:]:
                        row.reason = f"pass {pass_number}, after {_changed(knob.id, start.config, seen_before)}: {row.reason}"
            if best.config == best_before_pass:
                break  # a pass that changed nothing: every knob was judged under the final configuration

    chosen = best.config
    verdict, before, after, why = "baseline-kept", None, None, "no candidate beat PyTorch's defaults beyond the noise bar"
    if chosen != baseline:
        before_trial, after_trial = _final_check(measure, baseline, chosen)
        before, after = _figures(before_trial), _figures(after_trial)
        verdict, why, row = judge_final(baseline_trial, before_trial, after_trial, reason_rejected(after_trial))
        candidates.append(row)
        if verdict != "faster":
            chosen = baseline
    return SearchResult(
        chosen=chosen,
        baseline=baseline,
        candidates=candidates,
        before=before,
        after=after,
        verdict=verdict,
        left_out=dict(left_out or {}),
        elapsed_s=clock() - started,
        trials_measured=counts["measured"],
        trials_resumed=counts["resumed"],
        verdict_reason=why,
        candidate=dict(best.config),
        samples_per_step=baseline_trial.samples_per_step,
    )


def _changed(knob_id: str, config: dict, before: Optional[dict]) -> str:
    """Which other knobs moved since `knob_id` was last judged: 'precision=amp-bf16, channels_last=on'."""
    moved = [f"{name}={value}" for name, value in config.items() if name != knob_id and (before or {}).get(name) != value]
    return ", ".join(moved) or "nothing"


def search_order(knobs: list, *, compile_first: bool = True) -> list:
    """The knobs in the order the coordinate ascent visits them: compile first (module docstring), then the rest
    in the table's order; `compile_first=False`: the table's order."""
    if not compile_first:
        return list(knobs)
    return [knob for knob in knobs if knob.group == "compile"] + [knob for knob in knobs if knob.group != "compile"]


def judge_final(search_baseline: Trial, before: Trial, after: Trial, failure: Optional[str]) -> tuple:
    """(verdict, reason, candidates row) of the final side-by-side check: "faster" only when the chosen
    configuration beats the baseline there beyond the noise bar and the baseline agrees with the search's."""
    speedup, bar = compare(after, before) if after.status == "ok" and after.samples_s and before.samples_s else (0.0, NOISE_FLOOR)
    drift = _drift(search_baseline, before)
    allowed = max(HOST_DRIFT_TOLERANCE, bar, search_baseline.relative_iqr if search_baseline.samples_s else 0.0)
    if drift is not None and drift > 1 + allowed:
        reason = (f"the host was noisy: the baseline ran at {_rate(search_baseline):.4g} samples/s in the search and "
                  f"{_rate(before):.4g} in the final check ({drift:.2f}x apart, beyond the {100 * allowed:.0f}% "
                  "allowed); nothing is recommended, run again on a quiet host")  # fmt: skip
        verdict = "noisy-host"
    elif failure:
        verdict, reason = "reverted", f"the chosen configuration failed in the final check ({failure}); the baseline is kept"
    elif speedup > 1 + bar:
        verdict = "faster"
        reason = f"the final side-by-side check proved it {100 * (speedup - 1):.1f}% faster than the baseline, beyond the {100 * bar:.1f}% noise bar"
    elif speedup >= 1 - bar:
        verdict = "not-proven"
        reason = (f"the final side-by-side check measured x{speedup:.2f}, inside the {100 * bar:.1f}% noise bar: not proven "
                  "faster, so the baseline's knobs are kept")  # fmt: skip
    else:
        verdict = "reverted"
        reason = f"the final side-by-side check found it {100 * (1 - speedup):.1f}% slower than the baseline; the baseline is kept"
    status = "accepted" if verdict == "faster" else "rejected"
    return verdict, reason, _row(None, None, after, status, reason, speedup or None, bar)


def _drift(search_baseline: Trial, final_baseline: Trial) -> Optional[float]:
    """How far apart (>= 1) the baseline's median step times in the search and in the final check are."""
    if not search_baseline.samples_s or final_baseline.status != "ok" or not final_baseline.samples_s:
        return None
    first, second = search_baseline.median_s, final_baseline.median_s
    return max(first, second) / min(first, second)


def recommend_nothing(result: SearchResult, verdict: str, reason: str) -> SearchResult:
    """`result` with the baseline's knobs, `verdict` (VERDICTS) and `reason`: for a judgement the search itself
    cannot make, such as the host load measured around the whole run."""
    from dataclasses import replace

    return replace(result, chosen=dict(result.baseline), verdict=verdict, verdict_reason=reason)


def _exhaustive(knobs, baseline_trial: Trial, run, reason_rejected, candidates: list) -> Trial:
    """Every combination; the fastest sound one if it beats the baseline beyond the bar."""
    names = [knob.id for knob in knobs]
    fastest = baseline_trial
    for values in itertools.product(*(knob.values for knob in knobs)):
        config = dict(zip(names, values))
        if config == baseline_trial.config:
            continue
        unmet = unmet_needs(knobs, config)
        if unmet:
            candidates.append(Candidate(None, None, config, "skipped", unmet))
            continue
        trial = run(config)
        failure = reason_rejected(trial)
        if failure:
            candidates.append(_row(None, None, trial, "rejected", failure))
            continue
        speedup, bar = compare(trial, baseline_trial)
        status = "accepted" if speedup > 1 + bar else ("within-noise" if speedup >= 1 else "slower")
        candidates.append(_row(None, None, trial, status, "against the baseline", speedup, bar))
        if status == "accepted" and trial.median_s < fastest.median_s:
            fastest = trial
    return fastest


def _expected_cost_s(knob, value: str, costs: dict) -> Optional[float]:
    """Seconds a trial of knob=value is expected to take: the knob table's cost factor for the value times
    the dearest trial of the same knob so far; None when the table gives no factor or nothing was measured."""
    factor = knob.cost.get(value)
    measured = [cost for (knob_id, _), cost in costs.items() if knob_id == knob.id]
    if factor is None or not measured:
        return None
    return factor * max(measured)


def _final_check(measure, baseline: dict, chosen: dict) -> tuple:
    """(baseline Trial, chosen Trial), each pooled over the final rounds.

    A measure with `side_by_side` (tuner.WorkerMeasure) builds and compiles both once in one worker and
    times them in turns, 2 x FINAL_ROUNDS rounds; otherwise, or when that fails, each side is measured
    separately in FINAL_ORDER x FINAL_ROUNDS (ABBA)."""
    paired = getattr(measure, "side_by_side", None)
    if paired is not None:
        trials = paired({"baseline": baseline, "chosen": chosen}, rounds=2 * FINAL_ROUNDS)
        if trials:
            return trials["baseline"], trials["chosen"]
    pooled: dict = {"baseline": [], "chosen": []}
    last: dict = {}
    for side in FINAL_ORDER * FINAL_ROUNDS:
        trial = measure(dict(baseline if side == "baseline" else chosen))
        last[side] = trial
        if trial.status == "ok":
            pooled[side].extend(trial.samples_s)
    merged = []
    for side in ("baseline", "chosen"):
        trial = last[side]
        if not pooled[side]:
            merged.append(trial)  # every run failed: its reason travels
        else:
            merged.append(Trial(trial.config, tuple(pooled[side]), "ok", None, trial.numerics, trial.samples_per_step))
    return tuple(merged)


def _figures(trial: Trial) -> Optional[dict]:
    """samples/s median and quartiles of `trial` (quartiles of the rate, from the step-time quartiles)."""
    if trial.status != "ok" or not trial.samples_s:
        return None
    per_step = trial.samples_per_step
    return {
        "samples_per_s": per_step / trial.median_s,
        "samples_per_s_q1": per_step / quantile(trial.samples_s, 0.75),
        "samples_per_s_q3": per_step / quantile(trial.samples_s, 0.25),
        "relative_iqr": trial.relative_iqr,
        "median_step_ms": 1e3 * trial.median_s,
        "n": len(trial.samples_s),
    }


def _rate(trial: Trial) -> float:
    return trial.samples_per_step / trial.median_s


def _row(knob, value, trial: Trial, status: str, reason: str, speedup=None, bar=None) -> Candidate:
    timed = trial.status == "ok" and bool(trial.samples_s)
    return Candidate(
        knob=knob,
        value=value,
        config=dict(trial.config),
        status=status,
        reason=reason,
        samples_per_s=_rate(trial) if timed else None,
        relative_iqr=trial.relative_iqr if timed else None,
        speedup_vs_best=speedup,
        noise_bar=bar,
        cost_s=round(trial.cost_s, 2) if trial.cost_s else None,
    )

