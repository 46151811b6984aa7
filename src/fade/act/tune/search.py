"""The noise-aware knob search: cost-aware, profile-guided coordinate ascent over the knob table, within a budget.

Method
    The baseline (every knob at its first value: PyTorch's defaults) is measured first. The order of the rest is
    the plan's (fade.analyze.tuneplan.plan_search, from a profiled window of the baseline step): the knobs that
    need no compile (seconds a trial), those whose values answer the profile's verdicts first (GEMM/conv at a low
    % of peak: precision and layout), then the compile modes on the best eager configuration, those a verdict
    names first (launch-bound: CUDA graphs), then the cheapest. Why: on an H200 (issue 26) a torchvision CNN's search measured compile modes
    first, max-autotune ran until it was stopped, and the budget ended before amp-bf16 and channels_last, the knobs
    worth 5x: FADE chose 0.20x of the best hand configuration. Each knob's values are measured with the rest of the
    current best configuration (coordinate ascent) and judged against the configuration before that knob (its
    start); of the values that beat the start beyond the noise bar the fastest median is kept, so a steady
    candidate (reduce-overhead: CUDA graphs, 0.04% spread) is not lost to a wandering one (compile default, 28%)
    whose spread would hide the difference (mobilenet_v2 infer, H100, docs/performance.md).
Interaction
    Compile modes decide which precision wins (mobilenet_v2 inference at batch 64 on an H100: amp-bf16 is 21%
    slower than fp32 in eager mode, launch-bound, yet 1.44x faster once reduce-overhead's CUDA graphs remove the
    launch cost). So the passes repeat (up to MAX_PASSES) while a pass changed the best configuration: a knob is
    visited again, over every value but its current one, when the other knobs' values moved since its last visit
    (gpt2-small inference on an H100: CUDA graphs gain 1% in fp32, where the step is GEMM-bound, and 2.3x once
    amp-bf16 makes it launch-bound); a later pass tries a knob's values fastest-first by what they measured
    before, or, when the configuration compiles, in the knob table's compiled_order for the mode (half
    precision first, bf16 before fp16: eager rates say little under CUDA graphs), and leaves out values
    rejected before. Once a compile mode wins in a pass, the other compile modes
    wait for the next pass, after the knobs are judged again under the mode that won: each is a compile of about
    the same cost, and the interaction is worth more (EfficientNet-B0 training on an H200, results/tune-h200-s11/:
    reduce-overhead won 2.34x, then compile=default took the 63 s that amp-bf16 under reduce-overhead, 1.29x more,
    needed; reduce-overhead was at least as fast as default in 6 of the 7 cases measured, knobs.toml).
    After each pass in which no compile mode won, the precisions are judged (in the same
    order) under the fastest compile mode that ran sound (the interaction probe), since the compile mode
    alone may be within the noise while compile plus bf16 is not. No configuration is judged twice; rows of a
    later pass say which knobs had moved.
Cost
    Every trial has an expected cost before it starts (expected_cost_s): a trial that compiles is expected at the
    first compiled trial's wall time times the knob table's cost factor of its mode over that of the first
    (max-autotune 8x); any other at the dearest trial that compiled nothing so far times its value's factor. A
    trial that a resumed journal holds costs nothing and always counts. A trial of unknown cost (the first
    compile) starts only when TRIAL_SHARE of the search budget left is at least MIN_TRIAL_TIMEOUT_S, and is
    stopped at that share: one compile of unknown cost can take at most half of what is left, never all of it.
    Until a compiled trial has run to the end, a stopped one's cost is only a lower bound: the next compile is
    still of unproven cost and keeps the share rule. So is one whose graphs all came from Inductor's on-disk
    cache (measure.compile_cache): the 8B decode's reduce-overhead trial took 20 s warm on an H200 and ~84 s
    cold, and a new graph (another SDPA backend, coordinate descent) compiles cold. A trial's cost is divided by
    its values' cost factors (_State.cost_factor) before it stands for another: a dear value's trial (int8 under
    CUDA graphs, 15x) does not make the next plain one look dear (results/s22-h200/A).
    A trial whose cost is known starts when it fits the search budget left, counting the larger final check it
    would need should it win, and is stopped at OVERRUN_FACTOR times its expected cost (at least
    MIN_TRIAL_TIMEOUT_S) or at what is left, whichever is sooner. A crashed trial's cost proves nothing. Why not half of
    what is left for every trial: EfficientNet-B0 training on an H200 (results/tune-h200-s11/) left
    reduce-overhead, expected at 56 s, unstarted with 89 s of search budget left, and the whole run ended at
    108 s of its 300. The final check is stopped FINAL_OVERRUN_S past the budget.
Statuses
        rejected      it crashed, ran out of memory, or failed the numerics check (numerics.check: loss vs fp32
                      from the same seed, finite gradients, outputs);
        accepted      its median step time beats the start's by more than the noise bar (noise_bar: the larger
                      relative IQR of the two, at least NOISE_FLOOR) and it is the fastest such value of its
                      knob so far; it becomes the current best (an earlier accepted value of the knob is then
                      marked slower, with the reason);
        within-noise  faster by less than the bar;   slower  otherwise;
        skipped       it needs another knob value that cannot be set with it (knob table `needs`: a needed value
                      is set with the candidate where no other value of the configuration needs the old one);
        not-tried     the budget ran out before it, its expected cost did not fit what was left of the budget
                      (half of it for a compile of unproven cost), or it outran its limit and was stopped.
    Every row says why it was tried in its place (`why`: the verdict that names it, or its knob's place in the
    plan). A value the profile named that was never measured is listed first in the verdict (`untried_named`),
    with the budget that would have covered it (`budget_needed_s`): nothing important is left untried in silence.
    `exhaustive=True` measures every combination instead (for verification) and picks the fastest sound
    one, subject to the same bar against the baseline.
Budget
    `budget_s` covers everything: the caller's set-up (`spent_s`: fingerprint, fp32 reference, the diagnosis),
    the search and the final check. The final check keeps a reserve (final_reserve_s: FINAL_SHARE of the budget,
    or more where the trials say so: each side's build once when a measure with side_by_side builds both in one
    worker and times them in rounds that share a trial's samples (round_settings), twice when each side runs on
    its own, FINAL_ROUNDS x 2 runs of a trial's whole timing); trials use only what lies beyond it. (Twice the whole cost for the paired check left EfficientNet-B0 on an H200 a 126 s reserve
    for a check that took about 20 s; once the whole cost left an 8B decode 132 s for a check of ~180 s.)
Final check
    The chosen configuration and the baseline are re-measured interleaved, so clock drift hits both alike:
    in one worker taking turns (`measure.side_by_side`, nothing compiled twice), else FINAL_ORDER
    repeated FINAL_ROUNDS times; the before/after figures come from these pooled
    samples, not from the search. A result only says what this check proved: unless the chosen
    configuration is faster than the baseline beyond the bar here, the baseline's knobs are the result
    (verdict "not-proven" when within the bar, "reverted" when slower) and a candidates row says why. If the
    search's baseline and the final check's baseline differ by more than max(HOST_DRIFT_TOLERANCE, the bar,
    the search baseline's relative IQR),
    the host changed under the run: verdict "noisy-host", nothing is recommended, unless the check's speedup
    exceeds that change times the bar (the two took turns in the check, so a host that moved the baseline
    1.32x cannot make a candidate 8x: llama-3.2-1b's decode on an H200 beside three other jobs, session 20).
    (The caller adds the measured host load: recommend_nothing with "noisy-host" when other processes used the
    cores.)
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
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

from fade.act.tune import numerics
from fade.analyze.knobs import baseline_config, unmet_needs, with_needs
from fade.analyze.tuneplan import Plan, plan_search
from fade.measure.compile_cache import served_from_cache
from fade.measure.timing import MIN_SPLIT_SAMPLES, quantile, split_settings

NOISE_FLOOR = 0.02  # 2%: below this, run-to-run drift of one H100 under its power cap (docs/performance.md) decides
FINAL_SHARE = 0.25  # of the budget, kept for the interleaved final check (at least: final_reserve_s)
MIN_TRIAL_TIMEOUT_S = 30.0  # no trial is stopped sooner: a worker start and a small compile take this long
# a trial of unknown cost (the first compile) may take at most this share of the search budget left: it cannot eat
# the rest. A trial whose cost is known starts when it fits what is left (module docstring, Cost).
TRIAL_SHARE = 0.5
FINAL_OVERRUN_S = 45.0  # the final check may run this far past the budget before it is stopped (the bar: budget + 60 s)
# A decode's later pass leaves out the compile modes that do not answer a verdict this large (a share of the
# step) when the best configuration's mode does (training and inference keep theirs: their compile row does not
# mark which modes replay graphs, and max-autotune does): the 8B decode on an H200 waited on the host 89% of its step, and
# reduce-overhead (CUDA graphs) answered it 3.5x; default, which launches every kernel again, was then given the
# last 53 s of the budget (results/s22-h200/A), and on the 1B decode it ran at 195 tokens/s against 601
# (results/s22-h200/B).
GRAPHLESS_SHARE = 0.75
OVERRUN_FACTOR = 3.0  # a trial with a known expected cost is stopped at 3x it: something else is wrong by then
# Coordinate ascent passes: knobs interact both ways on the H100 (mobilenet_v2 infer: bf16 pays only under CUDA
# graphs; gpt2-small infer: CUDA graphs pay only once bf16 makes the step launch-bound,
# results/tune-shakedown-h100/), so a knob is judged again when the knobs after it moved. Three passes cover
# precision -> compile -> layout chains; the budget stops them earlier.
MAX_PASSES = 3
FINAL_ROUNDS = 2  # x FINAL_ORDER: four measurements of each side
FINAL_ORDER = ("baseline", "chosen", "chosen", "baseline")  # ABBA: a linear drift cancels within each round
TIMED_WARMUP_CALLS = 2  # warm-up calls before a trial's samples (tuner.TUNE_TIMING's min_warmup_calls)
# A paired final check's rounds split a trial's samples between them (round_settings): each side's pooled samples
# number about a trial's, not FINAL_ROUNDS x 2 times as many. A slow step's timing is its sample count (an eager 8B
# decode: ten 1.85 s calls), which four full rounds made a 180 s check; a fast step's is the timing budget, which
# each round keeps (ROUND_TIME_S covers it).
ROUND_WARMUP_CALLS = 1  # each round re-warms with one call: the build already warmed and checked the side
ROUND_TIME_S = 1.5  # a fast step's round: the timing's budget (TUNE_TIMING: 1 s) and its settling
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
    why: str = ""  # why it was tried in its place (the plan: the verdict that names it, or its knob's place)
    expected_s: Optional[float] = None  # the trial's expected cost when it was judged (expected_cost_s)
    expected_is_bound: bool = False  # expected_s is only a lower bound (a compile was stopped, none finished)


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
    plan: dict = field(default_factory=dict)  # fade.analyze.tuneplan.Plan.to_dict(): the diagnosis and the order
    untried_named: list = field(default_factory=list)  # {knob, value, verdict, reason, expected_s}: named, never measured
    budget_needed_s: Optional[float] = None  # about what budget would have measured untried_named too

    @property
    def recommends(self) -> bool:
        return self.verdict == "faster"

    def to_dict(self) -> dict:
        return asdict(self)


class SearchError(Exception):
    """The search cannot produce a profile: the baseline itself failed."""


def config_key(config: dict) -> str:
    return json.dumps(config, sort_keys=True)


def takes_timeout(function) -> bool:
    """Whether a measurement (or its diagnose/side_by_side) accepts a `timeout_s` limit: fakes and in-process
    measures may not."""
    return "timeout_s" in inspect.signature(function).parameters


def noise_bar(first: Trial, second: Trial) -> float:
    """The relative speed-up a candidate must exceed: max(NOISE_FLOOR, either side's IQR / median)."""
    return max(NOISE_FLOOR, first.relative_iqr, second.relative_iqr)


def compare(candidate: Trial, best: Trial) -> tuple:
    """(speed-up of candidate over best as the ratio of their rates, samples per step / median step time, which
    is best_median / candidate_median when they take the same samples a step; the noise bar). A knob that
    changes the samples per step (fade tune --generate's decode_batch) is compared by what it delivers."""
    return _rate(candidate) / _rate(best), noise_bar(candidate, best)


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
    plan: Optional[Plan] = None,
) -> SearchResult:
    """Search `knobs` (already filtered: knobs.searched_knobs) in `plan`'s order (default: plan_search without a
    diagnosis) as the module docstring says.

    `measure(config)` returns a Trial and must not raise for a candidate's own failure (it returns status
    "failed"); a measure that takes `timeout_s` is given each trial's limit. `reference` is fp32's {"losses",
    "rounded_losses"} for training candidates. `journal` has `load() -> {config_key: Trial dict}` and
    `append(Trial dict)` (cache.Journal). SearchError if the baseline fails; KeyboardInterrupt passes through
    after the journal holds every finished trial.
    """
    if budget_s <= 0:
        raise ValueError("budget_s must be > 0")
    started = clock() - spent_s  # the caller's set-up (fingerprint, fp32 reference, diagnosis) counts against the budget
    plan = plan or plan_search(knobs)
    state = _State(knobs, measure, reference=reference, budget_s=budget_s, journal=journal, clock=clock,
                   started=started, say=progress or (lambda message: None), plan=plan)  # fmt: skip
    baseline = baseline_config(knobs)
    baseline_trial = state.run(baseline)
    failure = state.reason_rejected(baseline_trial)
    if failure:
        raise SearchError(f"the baseline configuration itself fails: {failure}")
    state.baseline_trial = baseline_trial
    state.note_cost(baseline, baseline_trial)
    state.candidates.append(_row(None, None, baseline_trial, "baseline", "PyTorch's defaults"))
    state.say(f"baseline: {_rate(baseline_trial):.4g} samples/s")

    if exhaustive:
        best = _exhaustive(knobs, baseline_trial, state.run, state.reason_rejected, state.candidates)
    else:
        best = _coordinate_ascent(state, baseline_trial)
    searched_s = clock() - started  # set-up and search, before the final check

    candidates = state.candidates
    chosen = best.config
    verdict, before, after, why = "baseline-kept", None, None, "no candidate beat PyTorch's defaults beyond the noise bar"
    if chosen != baseline:
        final_limit_s = max(budget_s - (clock() - started), 0.0) + FINAL_OVERRUN_S
        before_trial, after_trial = _final_check(measure, baseline, chosen, timeout_s=final_limit_s, clock=clock)
        before, after = _figures(before_trial), _figures(after_trial)
        verdict, why, row = judge_final(baseline_trial, before_trial, after_trial, state.reason_rejected(after_trial))
        candidates.append(row)
        if verdict != "faster":
            chosen = baseline
    elapsed_s = clock() - started
    untried = [] if exhaustive else state.untried_named()  # exhaustive measures every combination
    needed_s = None
    if untried:  # the final check's room as if the dearest of them had won
        dearest = max([best.cost_s] + [entry["expected_s"] or 0.0 for entry in untried])
        reserve_s = final_reserve_s(0.0, baseline_trial, Trial(best.config, best.samples_s, cost_s=dearest),
                                    paired=bool(state.can_pair(baseline, best.config)))  # fmt: skip
        needed_s = budget_needed_s(searched_s, [entry["expected_s"] for entry in untried], state.dearest_trial_s(), reserve_s)
        why = untried_line(untried, needed_s) + " " + why
    return SearchResult(
        chosen=chosen,
        baseline=baseline,
        candidates=candidates,
        before=before,
        after=after,
        verdict=verdict,
        left_out=dict(left_out or {}),
        elapsed_s=elapsed_s,
        trials_measured=state.counts["measured"],
        trials_resumed=state.counts["resumed"],
        verdict_reason=why,
        candidate=dict(best.config),
        samples_per_step=baseline_trial.samples_per_step,
        plan=plan.to_dict(),
        untried_named=untried,
        budget_needed_s=needed_s,
    )


class _State:
    """What one search keeps while it runs: trials (and the journal), the candidates table, the costs measured
    so far (expected_cost_s), the budget left, and which named values were measured."""

    def __init__(self, knobs, measure, *, reference, budget_s, journal, clock, started, say, plan):
        self.knobs, self.measure, self.reference, self.budget_s = knobs, measure, reference, budget_s
        self.journal, self.clock, self.started, self.say, self.plan = journal, clock, started, say, plan
        self.recorded = journal.load() if journal is not None else {}
        for message in getattr(journal, "messages", ()):  # a corrupt journal set aside, lines skipped
            say(message)
        self.counts = {"measured": 0, "resumed": 0}
        self.takes_timeout = takes_timeout(measure)
        # the final check builds both sides once in one worker when the measure can pair them (same env)
        self.can_pair = getattr(measure, "pairable", None) or (lambda first, second: hasattr(measure, "side_by_side"))
        self.compile_knob = next((knob for knob in knobs if knob.group == "compile"), None)
        self.eager_costs: list = []  # (wall seconds, cost factor) of trials that compiled nothing
        self.compile_costs: list = []  # (mode, wall seconds, cost factor) of compiled trials, in measurement order
        self.compiles_finished = 0  # compiled trials that ran to the end: until one has, a compile's cost is a bound
        # wall seconds of compiled trials that ran to the end on graphs all served from Inductor's cache: what a
        # rebuild of a graph already compiled costs
        self.warm_costs: list = []
        self.candidates: list = []
        self.judged: set = set()  # configurations already judged in this search: never judged twice
        self.measured_values: set = set()  # "knob=value" that some measured trial had
        self.baseline_trial: Optional[Trial] = None
        self.accepted: dict = {}  # id(row) -> Trial of each accepted row: the new best

    # -- trials
    def recorded_usable(self, key: str) -> bool:
        """Whether the journal holds a finished trial of this configuration to reuse: not one that was stopped at
        its limit (a resumed run may have a larger budget for it)."""
        record = self.recorded.get(key)
        return record is not None and not (record.get("status") != "ok" and str(record.get("reason") or "").startswith("timeout"))

    def run(self, config: dict, timeout_s: Optional[float] = None) -> Trial:
        key = config_key(config)
        if self.recorded_usable(key):
            self.counts["resumed"] += 1
            return Trial.from_dict(self.recorded[key])
        if self.takes_timeout:
            trial = self.measure(dict(config), timeout_s=timeout_s)
        else:
            trial = self.measure(dict(config))
        self.counts["measured"] += 1
        if self.journal is not None:
            self.journal.append(trial.to_dict())
        self.recorded[key] = trial.to_dict()
        return trial

    def reason_rejected(self, trial: Trial) -> Optional[str]:
        if trial.status != "ok":
            return trial.reason or trial.status
        if not trial.samples_s:
            return "no timing samples"
        return numerics.check(trial.numerics, self.reference)

    # -- cost
    def compile_mode(self, config: dict) -> Optional[str]:
        """The compile mode `config` runs under, or None when it compiles nothing."""
        if self.compile_knob is None:
            return None
        value = config.get(self.compile_knob.id, self.compile_knob.baseline)
        return None if value == self.compile_knob.baseline else value

    def note_cost(self, config: dict, trial: Trial) -> None:
        stopped = str(trial.reason or "").startswith("timeout")
        if not trial.cost_s or (trial.status != "ok" and not stopped):
            return  # a crash after 3 s says nothing of what a compile costs
        mode = self.compile_mode(config)
        if mode is None:
            self.eager_costs.append((trial.cost_s, self.cost_factor(config)))
        else:
            self.compile_costs.append((mode, trial.cost_s, self.cost_factor(config)))
            if trial.status == "ok" and trial.samples_s:
                if served_from_cache((trial.extra if isinstance(trial.extra, dict) else {}).get("compile_cache")):
                    self.warm_costs.append(trial.cost_s)  # a warm compile bounds a new graph's cost from below only
                else:
                    self.compiles_finished += 1

    def compiles_stopped(self) -> bool:
        """Whether a compiled trial was stopped at its limit (its cost a lower bound)."""
        return any(row.status == "not-tried" and row.cost_s and self.compile_mode(row.config) is not None
                   for row in self.candidates)  # fmt: skip

    def cost_factor(self, config: dict) -> float:
        """What the values of `config` multiply a trial's cost by: the product of their knob rows' factors
        (`compiled_cost` under a compile mode, `cost` otherwise; a compile mode's own factor is the mode's cost,
        expected_cost_s). weight_quant=int8 under reduce-overhead counts 15x, so its stopped 243 s trial does not
        make the next one-compile trial expected at 243 s (results/s22-h200/A: the 8B decode's SDPA values, ~20 s
        trials each, were left out as 'expected to take ~243 s')."""
        mode = self.compile_mode(config)
        factor = 1.0
        for knob in self.knobs:
            if knob.group == "compile":
                continue
            factors = knob.compiled_cost if mode is not None else knob.cost
            factor *= factors.get(str(config.get(knob.id, knob.baseline)), 1.0)
        return factor

    def expected_s(self, knob, value: str, config: dict) -> Optional[float]:
        return expected_cost_s(self.compile_knob, self.compile_mode(config), self.cost_factor(config),
                               self.eager_costs, self.compile_costs)  # fmt: skip

    def dearest_trial_s(self) -> float:
        return max([cost for cost, _ in self.eager_costs] + [cost for _, cost, _ in self.compile_costs] + [0.0])

    def search_left_s(self, best: Trial, cost_if_best: Optional[float] = None, config: Optional[dict] = None) -> float:
        """Budget left for search trials: what lies beyond the final check's reserve (final_reserve_s) for `best`,
        or, with `cost_if_best`, for a candidate of that cost (and `config`) that would become the best: a trial
        that wins grows the final check, and it must still fit."""
        config = best.config if config is None else config
        cost_s = best.cost_s if cost_if_best is None else max(best.cost_s, cost_if_best)
        paired = bool(self.can_pair(self.baseline_trial.config, config))
        # a candidate's timing is not known before it runs: the best's stands for it (a winner times no slower)
        reserve_s = final_reserve_s(self.budget_s, self.baseline_trial, Trial(config, best.samples_s, cost_s=cost_s),
                                    paired=paired, warm_build_s=self.warm_build_s(config))  # fmt: skip
        return self.budget_s - reserve_s - (self.clock() - self.started)

    def warm_build_s(self, config: dict) -> Optional[float]:
        """What the final check's build of `config` costs once its trial has compiled it, where the search saw it:
        the dearest compiled trial whose graphs all came from Inductor's cache, for a configuration with no dear
        value (the check compiles what the trial did, and finds it in the cache); else None."""
        if self.compile_mode(config) is None or self.cost_factor(config) != 1.0 or not self.warm_costs:
            return None
        return max(self.warm_costs)

    # -- judging one candidate
    def judge(self, knob, value: str, config: dict, start: Trial, best: Trial, *, why: str, record_unstarted: bool):
        """Measure `config` (knob=value on top of `best`) and append its row; the row, or None when the
        configuration was judged before or was not started and `record_unstarted` is False. What `value` needs
        (the knob table's `needs`) comes with it: decode_compile=reduce-overhead is judged with kv_cache=static."""
        config = with_needs(self.knobs, config, keep=knob.id)
        key = config_key(config)
        if key in self.judged:
            return None
        self.judged.add(key)
        left_s = self.search_left_s(best)
        named = f"{knob.id}={value}" in self.plan.named
        resumed = self.recorded_usable(key)  # a journal's finished trial costs nothing: no budget gate
        if left_s <= 0 and not resumed:
            if record_unstarted or named:
                row = Candidate(knob.id, value, config, "not-tried", "the search budget ran out", why=why,
                                expected_s=self.expected_s(knob, value, config))  # fmt: skip
                self.candidates.append(row)
                return row
            return None
        unmet = unmet_needs(self.knobs, config)
        if unmet:
            row = Candidate(knob.id, value, config, "skipped", unmet, why=why)
            self.candidates.append(row)
            return row
        expected = self.expected_s(knob, value, config)
        share_s = TRIAL_SHARE * left_s
        # a compile's cost is known once one compiled trial ran to the end; a stopped one only bounds it from below
        known = expected is not None and (self.compile_mode(config) is None or self.compiles_finished > 0)
        if known:  # room for it and, should it win, for the larger final check it would need
            left_s = min(left_s, self.search_left_s(best, expected, config))
        too_dear = expected > left_s if known else (expected > share_s if expected is not None else share_s < MIN_TRIAL_TIMEOUT_S)
        if not resumed and too_dear:
            if known:
                reason = (f"expected to take ~{expected:.0f} s, more than the {max(left_s, 0.0):.0f} s of search budget "
                          "left (the final check's room included, should it win)")  # fmt: skip
            elif expected is not None:
                bound = ("the compiles so far came from Inductor's cache, and a new graph's costs more"
                         if self.warm_costs and not self.compiles_stopped() else "a compile outran that limit")
                reason = (f"expected to take more than ~{expected:.0f} s ({bound}); a compile of unproven "
                          f"cost may take {100 * TRIAL_SHARE:.0f}% of the {left_s:.0f} s of search budget left")  # fmt: skip
            else:
                reason = (f"no compiled trial has shown its cost yet, and {100 * TRIAL_SHARE:.0f}% of the {left_s:.0f} s of "
                          f"search budget left is under the {MIN_TRIAL_TIMEOUT_S:.0f} s a trial gets at least")  # fmt: skip
            self.say(f"{knob.id}={value}: not tried ({reason})")
            if record_unstarted or named:
                row = Candidate(knob.id, value, config, "not-tried", reason, why=why, expected_s=expected,
                                expected_is_bound=expected is not None and not known)  # fmt: skip
                self.candidates.append(row)
                return row
            return None
        timeout_s = OVERRUN_FACTOR * expected if known else share_s
        # at least MIN_TRIAL_TIMEOUT_S (a worker start), never more than the search budget left
        timeout_s = max(min(max(timeout_s, MIN_TRIAL_TIMEOUT_S), left_s), 1.0)
        self.say(f"{knob.id}={value}: measuring ({why})")
        trial = self.run(config, timeout_s=timeout_s)
        self.note_cost(config, trial)
        if trial.status != "ok" and (trial.reason or "").startswith("timeout"):
            limit = (f"{OVERRUN_FACTOR:g}x its expected ~{expected:.0f} s, within the {left_s:.0f} s of search budget left"
                     if known else f"{100 * TRIAL_SHARE:.0f}% of the {left_s:.0f} s of search budget left")  # fmt: skip
            reason = f"outran its {timeout_s:.0f} s limit ({limit}) and was stopped"
            row = _row(knob.id, value, trial, "not-tried", reason, why=why, expected_s=expected,
                       expected_is_bound=expected is not None and not known)
            self.candidates.append(row)
            self.say(f"{knob.id}={value}: not tried ({reason})")
            return row
        self.measured_values.update(f"{name}={setting}" for name, setting in config.items())
        failure = self.reason_rejected(trial)
        if failure:
            row = _row(knob.id, value, trial, "rejected", failure, why=why, expected_s=expected,
                       expected_is_bound=expected is not None and not known)
            self.candidates.append(row)
            self.say(f"{knob.id}={value}: rejected: {failure}")
            return row
        speedup, bar = compare(trial, start)
        if speedup > 1 + bar and _rate(trial) <= _rate(best):  # beats the start, not the value kept
            status = "slower"
            reason = (f"{100 * (speedup - 1):.1f}% faster than without {knob.id}, beyond the {100 * bar:.1f}% noise bar, "
                      f"but {knob.id}={best.config[knob.id]} is faster still")  # fmt: skip
        elif speedup > 1 + bar:
            status, reason = "accepted", f"{100 * (speedup - 1):.1f}% faster than the best so far, beyond the {100 * bar:.1f}% noise bar"
        elif speedup >= 1:
            status, reason = "within-noise", f"{100 * (speedup - 1):.1f}% faster, inside the {100 * bar:.1f}% noise bar"
        else:
            status, reason = "slower", f"{100 * (1 - speedup):.1f}% slower than the best so far"
        row = _row(knob.id, value, trial, status, reason, speedup, bar, why=why, expected_s=expected,
                   expected_is_bound=expected is not None and not known)
        self.candidates.append(row)
        self.say(f"{knob.id}={value}: {status} ({reason})")
        if status == "accepted":
            self.accepted[id(row)] = trial
        return row

    def untried_named(self) -> list:
        """The values the plan named that no trial measured, with the row that says why."""
        untried = []
        for name, verdict in self.plan.named.items():
            if name in self.measured_values:
                continue
            knob_id, value = name.split("=", 1)
            row = next((row for row in reversed(self.candidates) if row.knob == knob_id and row.value == value), None)
            untried.append({"knob": knob_id, "value": value, "verdict": verdict,
                            "reason": row.reason if row else "the search ended before it",
                            "expected_s": row.expected_s if row and not row.expected_is_bound else None})  # fmt: skip
        return untried


def _coordinate_ascent(state: _State, baseline_trial: Trial) -> Trial:
    """The plan's visits, pass after pass while a pass moved the best configuration (module docstring)."""
    knobs_by_id = {knob.id: knob for knob in state.knobs}
    best = baseline_trial
    seen_with: dict = {}  # visit index -> the other knobs' values when it was last visited
    deferred: dict = {}  # visit index -> compile modes left for the next pass once a mode won (module docstring)
    for pass_number in range(1, MAX_PASSES + 1):
        best_before_pass = best.config
        mode_won = False  # a compile mode was accepted in this pass
        for index, visit in enumerate(state.plan.visits):
            knob = knobs_by_id.get(visit.knob)
            if knob is None:
                continue
            others = {name: value for name, value in best.config.items() if name != knob.id}
            seen_before = seen_with.get(index)
            held = [value for value in deferred.pop(index, []) if value != best.config[knob.id]]
            if seen_before == others and not held:
                continue  # nothing it depends on moved since its last visit
            seen_with[index] = others
            start, kept_row = best, None  # each value is judged against the configuration before this knob
            values = [value for value in visit.values if value != best.config[knob.id]] if seen_before != others else held
            if pass_number > 1:
                if knob.baseline != best.config[knob.id] and visit.values == _all_values(state.plan, knob) and seen_before != others:
                    values.append(knob.baseline)  # a later pass may find the baseline value better again
                rejected = _rejected_values(state, knob)  # a crash or a numerics failure would repeat: not again
                values = _later_order(state, knob, [value for value in values if value not in rejected], best.config)
            if knob.group == "compile" and mode_won and pass_number < MAX_PASSES:
                deferred[index] = values  # another compile first: the knobs under the mode that won come before it
                continue
            if knob.group == "compile" and pass_number > 1 and state.plan.mode == "generate":
                values = _leave_out_unanswering(state, knob, values, best)
            first_row = len(state.candidates)
            for position, value in enumerate(values):
                config = {**best.config, knob.id: value}
                row = state.judge(knob, value, config, start, best, why=state.plan.why(knob.id, value),
                                  record_unstarted=pass_number == 1 or value in held)  # a later pass's unstarted values say nothing new
                if row is not None and row.status == "accepted":
                    if kept_row is not None:  # an earlier value of this knob, beaten on the median
                        kept_row.status = "slower"
                        kept_row.reason += f"; then {knob.id}={value} was faster still"
                    best, kept_row = state.accepted[id(row)], row
                    if knob.group == "compile" and value != knob.baseline and pass_number < MAX_PASSES:
                        mode_won = True
                        deferred[index] = values[position + 1:]
                        break
            if pass_number > 1:
                moved = (_changed(knob.id, start.config, seen_before) if seen_before != others else
                         f"waiting while the knobs were judged under {knob.id}={best.config[knob.id]}")  # fmt: skip
                for row in state.candidates[first_row:]:
                    row.reason = f"pass {pass_number}, after {moved}: {row.reason}"
        best = _interaction_probe(state, best)
        if best.config == best_before_pass:
            break  # a pass that changed nothing: every knob was judged under the final configuration
    return best


def _leave_out_unanswering(state: _State, knob, values: list, best: Trial) -> list:
    """`values` of the compile knob less those that do not answer a verdict of at least GRAPHLESS_SHARE of the
    step which the best configuration's mode answers (a launch-bound step won by CUDA graphs: the modes without
    them); each left out gets a not-tried row once."""
    from fade.analyze.tuneplan import answers, verdict_key

    current = best.config.get(knob.id)
    for verdict in state.plan.diagnosis:
        key, share = verdict_key(verdict), verdict.get("share") or 0.0
        if share < GRAPHLESS_SHARE or not answers(knob, current, key):
            continue
        kept = []
        for value in values:
            if answers(knob, value, key):
                kept.append(value)
                continue
            config = with_needs(state.knobs, {**best.config, knob.id: value}, keep=knob.id)
            if config_key(config) in state.judged:
                continue
            state.judged.add(config_key(config))
            reason = (f"the baseline's profile found it {key} ({100 * share:.0f}% of the step), {knob.id}={current} "
                      f"answered that, and {value} does not")  # fmt: skip
            state.candidates.append(Candidate(knob.id, value, config, "not-tried", reason, why=state.plan.why(knob.id, value)))
            state.say(f"{knob.id}={value}: not tried ({reason})")
        return kept
    return values


def _later_order(state: _State, knob, values: list, config: dict) -> list:
    """A later pass's values of `knob` on `config`: when `config` compiles and the knob table gives a
    compiled_order for the plan's mode, that order (the values it does not list after, fastest first); else the
    fastest in earlier passes first. When the budget covers one more compiled trial, it goes to the likeliest
    winner (H200, a Llama-shaped LM training: amp-fp16 and amp-bf16 within the noise in eager mode, fp16 kept;
    under reduce-overhead bf16 is 8% faster, and table order spent the one trial left on tf32; EfficientNet-B0
    training: amp-fp16 1.6x amp-bf16 in eager mode, 0.87x of it under reduce-overhead; results/tune-h200-s10/,
    s11/)."""
    fastest = _fastest_first(state, knob, values)
    order = knob.compiled_order.get(state.plan.mode or "") if state.compile_mode(config) is not None else None
    if not order:
        return fastest
    return [value for value in order if value in values] + [value for value in fastest if value not in order]


def _fastest_first(state: _State, knob, values: list) -> list:
    """`values` of `knob`, the fastest in earlier passes first (a value never measured last)."""
    rates: dict = {}
    for row in state.candidates:
        if row.status == "rejected":
            continue
        value = row.value if row.knob == knob.id else (knob.baseline if row.knob is None and row.status == "baseline" else None)
        if value is not None and row.samples_per_s:
            rates[value] = max(rates.get(value, 0.0), row.samples_per_s)
    return sorted(values, key=lambda value: -rates.get(value, 0.0))


def _rejected_values(state: _State, knob) -> set:
    return {row.value for row in state.candidates if row.knob == knob.id and row.status == "rejected"}


def _all_values(plan: Plan, knob) -> tuple:
    """Every alternative of `knob` across the plan's visits (a named value can have a visit of its own)."""
    return tuple(value for visit in plan.visits if visit.knob == knob.id for value in visit.values)


def _interaction_probe(state: _State, best: Trial) -> Trial:
    """When the best configuration compiles nothing: the precisions that did not win in eager mode, judged under the
    fastest compile mode that ran sound anywhere in the search (module docstring, Interaction). Judged
    configurations are never measured again, so running it after every pass costs only what is new."""
    precision = next((knob for knob in state.knobs if knob.group == "precision"), None)
    if precision is None or state.compile_knob is None or state.compile_mode(best.config) is not None:
        return best
    sound_modes = [row for row in state.candidates if row.knob == state.compile_knob.id and row.samples_per_s
                   and row.status in ("accepted", "within-noise", "slower")]  # fmt: skip
    if not sound_modes:
        return best
    mode = max(sound_modes, key=lambda row: row.samples_per_s).value
    rejected = _rejected_values(state, precision)
    compiled = {**best.config, state.compile_knob.id: mode}
    order = _later_order(state, precision, list(_all_values(state.plan, precision) or precision.alternatives), compiled)
    start, kept_row = best, None
    for value in [value for value in (*order, precision.baseline) if value != best.config[precision.id] and value not in rejected]:
        config = {**best.config, precision.id: value, state.compile_knob.id: mode}
        why = (f"interaction: {precision.id}={value} judged under compile={mode}, which alone did not win "
               "(bf16 can lose in eager mode and win under CUDA graphs)")  # fmt: skip
        row = state.judge(precision, value, config, start, best, why=why, record_unstarted=True)
        if row is not None and row.status == "accepted":
            if kept_row is not None:
                kept_row.status = "slower"
                kept_row.reason += f"; then {precision.id}={value} was faster still"
            best, kept_row = state.accepted[id(row)], row
    return best


def final_reserve_s(budget_s: float, baseline: Trial, best: Trial, *, paired: bool,
                    warm_build_s: Optional[float] = None) -> float:
    """What the final check is expected to take: FINAL_SHARE of `budget_s`, or more where the trials say so. A
    trial's cost splits into its build (model, compile, checks) and its timing (timed_s). When `paired` (one
    worker) the check builds each side once and times it in FINAL_ROUNDS x 2 rounds that share a trial's samples
    (round_settings: a warm-up call and MIN_SPLIT_SAMPLES or more each, or a fast step's ROUND_TIME_S); otherwise
    each side runs FINAL_ROUNDS x 2 times in fresh workers, each a build (on warm compiler caches: twice one
    build in all) and a trial's whole timing. (An 8B decode on an H200 was given 132 s, its trials' costs, for a
    check whose rounds each timed ten 1.85 s calls of the eager baseline again: ~180 s, killed at its limit.)
    `warm_build_s`: what a compiled trial served from Inductor's cache cost (_State.warm_build_s); the best's
    build is at most that, since its trial left its graphs in the cache (the 8B decode on an H200: a cold
    reduce-overhead compile ~84 s, the same graph from the cache 20 s, results/s22-h200/)."""
    rounds = FINAL_ROUNDS * len(FINAL_ORDER) // 2
    needed = 0.0
    for trial in (baseline, best):
        timing = timed_s(trial)
        build = max(trial.cost_s - timing, 0.0)
        if trial is best and warm_build_s is not None:
            build = min(build, warm_build_s)
        if paired:  # rounds of split samples (round_settings)
            per_round = max(MIN_SPLIT_SAMPLES, math.ceil(len(trial.samples_s) / rounds))
            # a slow step: its calls (the warm-up, measure()'s block-sizing one, the samples); a fast one: the time
            # budget (ROUND_TIME_S), which its per-call samples understate
            calls_s = (ROUND_WARMUP_CALLS + 1 + per_round) * trial.median_s + ROUND_TIME_S
            round_s = min(max(timing, ROUND_TIME_S), calls_s) if timing else 0.0
            needed += build + rounds * round_s
        else:  # each run a fresh worker with a trial's whole timing
            needed += 2 * build + rounds * timing
    return max(FINAL_SHARE * budget_s, needed)


def round_settings(settings: dict, rounds: int) -> dict:
    """A paired final check's timing settings for each of its `rounds`: the trial's `settings` (measure()'s keyword
    arguments) with its sample counts split between the rounds (timing.split_settings), one warm-up call and no
    settling windows (the build warmed the side, and a slow step's settling costs whole calls); its time budgets
    stay whole, so a fast step keeps a trial's timing in every round."""
    return {**split_settings(settings, rounds, budgets=False, warmup_calls=ROUND_WARMUP_CALLS), "max_settle_s": 0.0}


def timed_s(trial: Trial) -> float:
    """About how long `trial`'s timing took: its samples and the warm-up calls before them (TIMED_WARMUP_CALLS),
    at most its cost; 0 for a trial without samples."""
    if not trial.samples_s:
        return 0.0
    return min(sum(trial.samples_s) + TIMED_WARMUP_CALLS * trial.median_s, trial.cost_s or math.inf)


def expected_cost_s(compile_knob, mode: Optional[str], factor: float, eager_costs: list, compile_costs: list) -> Optional[float]:
    """Seconds a trial is expected to take (module docstring, Cost): `factor` (the product of its values' cost
    factors, _State.cost_factor) times a trial's base cost. Compiled trials under `mode`: the base is the dearest
    of its trials (`compile_costs`: (mode, seconds, factor)) whose values add no factor of their own, else the
    dearest of theirs divided by their factor; a mode not measured yet takes the same over every compiled trial,
    each over its mode's cost factor in the compile knob's table, times that of `mode` (a cold compile of one
    mode stands for the next, not the warm first one); None before any compiled trial. Any other
    trial: the same over `eager_costs` ((seconds, factor)); None before any. A dear value's trial does not raise
    the base: weight-only quantization under CUDA graphs took more than 12x its compile mode's trial on the H200
    (results/s22-h200/A), while in eager mode it costs about what the trial it joins does (data/knobs.toml,
    weight_quant)."""

    def base(rows: list) -> float:  # rows: (seconds, factor)
        plain = [cost for cost, row_factor in rows if row_factor == 1.0]
        return max(plain) if plain else max(cost / row_factor for cost, row_factor in rows)

    if mode is None:
        return factor * base(eager_costs) if eager_costs else None
    same = [(cost, row_factor) for measured_mode, cost, row_factor in compile_costs if measured_mode == mode]
    if same:
        return factor * base(same)
    if not compile_costs:
        return None
    factors = compile_knob.cost if compile_knob is not None else {}
    scaled = [(cost / factors.get(measured_mode, 1.0), row_factor) for measured_mode, cost, row_factor in compile_costs]
    return factor * base(scaled) * factors.get(mode, 1.0)


def budget_needed_s(searched_s: float, expected: list, fallback_s: float, reserve_s: float) -> float:
    """About what budget would have measured the untried values too: the search as it ran (`searched_s`, set-up
    included), plus each one's expected cost, plus for those of unknown cost the dearest trial measured (at
    least MIN_TRIAL_TIMEOUT_S) with the room the share rule asks for it, plus the final check's reserve
    (FINAL_SHARE of the budget, or `reserve_s`)."""
    unknown = [max(fallback_s, MIN_TRIAL_TIMEOUT_S) for cost in expected if cost is None]
    search_s = searched_s + sum(cost for cost in expected if cost is not None) + sum(unknown)
    search_s += max(unknown + [0.0]) * (1 / TRIAL_SHARE - 1)
    return max(search_s / (1 - FINAL_SHARE), search_s + reserve_s)


def untried_line(untried: list, needed_s: float) -> str:
    """'Not measured, though the profile named them: precision=amp-bf16 (gemm_low_peak), ...; a budget of about
    9 min would have covered them.'"""
    import math

    names = ", ".join(f"{entry['knob']}={entry['value']} ({entry['verdict']})" for entry in untried)
    minutes = max(1, math.ceil(needed_s / 60.0))
    return (f"Not measured, though the profile named {'it' if len(untried) == 1 else 'them'}: {names}; a budget of about "
            f"{minutes} min (--budget {minutes}) would have covered {'it' if len(untried) == 1 else 'them'}.")  # fmt: skip


def _changed(knob_id: str, config: dict, before: Optional[dict]) -> str:
    """Which other knobs moved since `knob_id` was last judged: 'precision=amp-bf16, channels_last=on'."""
    moved = [f"{name}={value}" for name, value in config.items() if name != knob_id and (before or {}).get(name) != value]
    return ", ".join(moved) or "nothing"


def judge_final(search_baseline: Trial, before: Trial, after: Trial, failure: Optional[str]) -> tuple:
    """(verdict, reason, candidates row) of the final side-by-side check: "faster" only when the chosen
    configuration beats the baseline there beyond the noise bar and the baseline agrees with the search's."""
    speedup, bar = compare(after, before) if after.status == "ok" and after.samples_s and before.samples_s else (0.0, NOISE_FLOOR)
    drift = _drift(search_baseline, before)
    allowed = max(HOST_DRIFT_TOLERANCE, bar, search_baseline.relative_iqr if search_baseline.samples_s else 0.0)
    if drift is not None and drift > 1 + allowed and not failure and speedup > drift * (1 + bar):
        verdict = "faster"
        reason = (f"the final side-by-side check proved it {speedup:.2f}x the baseline, beyond the {100 * bar:.1f}% noise "
                  f"bar; the host moved the baseline from {_rate(search_baseline):.4g} samples/s in the search to "
                  f"{_rate(before):.4g} in the check ({drift:.2f}x), far less than the speedup, which the check "
                  "measured with both taking turns")  # fmt: skip
    elif drift is not None and drift > 1 + allowed:
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

    if result.untried_named and result.budget_needed_s is not None:  # what was left untried still comes first
        reason = untried_line(result.untried_named, result.budget_needed_s) + " " + reason
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
        if status == "accepted" and _rate(trial) > _rate(fastest):
            fastest = trial
    return fastest


def _final_check(measure, baseline: dict, chosen: dict, *, timeout_s: Optional[float] = None,
                 clock: Callable[[], float] = time.monotonic) -> tuple:  # fmt: skip
    """(baseline Trial, chosen Trial), each pooled over the final rounds, within `timeout_s` in all (the budget
    left plus FINAL_OVERRUN_S) where the measure takes a limit.

    A measure with `side_by_side` (tuner.WorkerMeasure) builds and compiles both once in one worker and
    times them in turns, 2 x FINAL_ROUNDS rounds; otherwise, or when that fails for another reason than its
    limit, each side is measured separately in FINAL_ORDER x FINAL_ROUNDS (ABBA), each run limited to what is
    left of the limit, and no run started once it is spent."""
    paired = getattr(measure, "side_by_side", None)
    if paired is not None:
        pair = {"baseline": baseline, "chosen": chosen}
        trials = paired(pair, rounds=2 * FINAL_ROUNDS, timeout_s=timeout_s) if takes_timeout(paired) else paired(pair, rounds=2 * FINAL_ROUNDS)
        if trials:
            return trials["baseline"], trials["chosen"]
        failure = str(getattr(measure, "side_by_side_failure", "") or "")
        if failure.startswith("timeout"):  # out of budget: separate runs would overrun it further
            reason = f"the final check outran the budget ({failure})"
            return Trial(dict(baseline), (), "failed", reason), Trial(dict(chosen), (), "failed", reason)
    limited = takes_timeout(measure)
    deadline = None if timeout_s is None else clock() + timeout_s
    pooled: dict = {"baseline": [], "chosen": []}
    last: dict = {}
    good: dict = {}  # side -> its last run that returned timings: its numerics stand for the side
    for side in FINAL_ORDER * FINAL_ROUNDS:
        left_s = None if deadline is None else deadline - clock()
        if left_s is not None and left_s <= 0 and all(side_name in last for side_name in pooled):
            break  # the limit is spent and both sides have run: judge what was measured
        config = dict(baseline if side == "baseline" else chosen)
        limit_s = None if left_s is None else max(left_s, 1.0)
        trial = measure(config, timeout_s=limit_s) if limited else measure(config)
        last[side] = trial
        if trial.status == "ok":
            pooled[side].extend(trial.samples_s)
            good[side] = trial
    merged = []
    for side in ("baseline", "chosen"):
        trial = last[side]
        if not pooled[side]:
            merged.append(trial)  # every run failed: its reason travels
        else:
            trial = good[side]  # not a later run cut off by the limit: it has no numerics
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


def _row(knob, value, trial: Trial, status: str, reason: str, speedup=None, bar=None, *, why: str = "",
         expected_s: Optional[float] = None, expected_is_bound: bool = False) -> Candidate:  # fmt: skip
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
        why=why,
        expected_s=round(expected_s, 1) if expected_s is not None else None,
        expected_is_bound=expected_is_bound,
    )

