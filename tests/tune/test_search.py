"""The knob search against a deterministic fake timer: noise handling, numerics rejection, budget, resume."""

import pytest

from fade.act.tune.cache import open_cache
from fade.act.tune.search import NOISE_FLOOR, SearchError, Trial, search
from tests.tune.fakes import KNOBS, REFERENCE, FakeTimer, knob, mobilenet_v2_step_ms

FINGERPRINT = {"backend": "cpu", "name": "test", "arch": "x86_64", "torch": "2.13.0"}


def statuses(result):
    return {(row.knob, row.value): row.status for row in result.candidates}


def test_clear_gains_are_accepted_in_group_order():
    timer = FakeTimer({("precision", "amp-bf16"): 0.5, ("channels_last", "on"): 0.8})
    result = search(KNOBS, timer, reference=REFERENCE, budget_s=1000, clock=timer.clock)
    assert result.chosen == {"precision": "amp-bf16", "channels_last": "on", "compile": "off", "optimizer_impl": "default"}
    assert statuses(result)[("precision", "amp-bf16")] == "accepted"
    assert statuses(result)[("channels_last", "on")] == "accepted"
    assert result.verdict == "faster"
    assert result.after["samples_per_s"] / result.before["samples_per_s"] == pytest.approx(1 / 0.4)


def test_a_gain_inside_the_noise_floor_is_not_accepted():
    """1% faster with tight samples: below NOISE_FLOOR (2%), so the baseline stays."""
    timer = FakeTimer({("compile", "default"): 0.99})
    result = search(KNOBS, timer, reference=REFERENCE, budget_s=1000, clock=timer.clock)
    assert statuses(result)[("compile", "default")] == "within-noise"
    assert result.chosen["compile"] == "off"
    assert result.verdict == "baseline-kept"


def test_a_gain_inside_a_wide_spread_is_not_accepted():
    """10% faster, but samples spread +-15% (IQR/median 15%): within noise, beyond the floor."""
    timer = FakeTimer({("channels_last", "on"): 0.9}, spread=0.3)
    result = search(KNOBS, timer, reference=REFERENCE, budget_s=1000, clock=timer.clock)
    row = next(row for row in result.candidates if row.knob == "channels_last")
    assert row.status == "within-noise"
    assert row.noise_bar > NOISE_FLOOR
    assert result.chosen["channels_last"] == "off"


def test_a_faster_candidate_with_a_drifting_loss_is_rejected_with_the_reason():
    timer = FakeTimer({("precision", "amp-fp16"): 0.3, ("precision", "amp-bf16"): 0.5}, losses={("precision", "amp-fp16"): 6.5})
    result = search(KNOBS, timer, reference=REFERENCE, budget_s=1000, clock=timer.clock)
    row = next(row for row in result.candidates if row.value == "amp-fp16")
    assert row.status == "rejected"
    assert "fp32 from the same seed" in row.reason
    assert result.chosen["precision"] == "amp-bf16"


def test_a_non_finite_loss_and_a_crash_are_rejected():
    timer = FakeTimer(
        {("precision", "tf32"): 0.5, ("compile", "default"): 0.5},
        losses={("precision", "tf32"): float("nan")},
        failures={("compile", "default"): "worker died: SIGKILL (out of memory?)"},
    )
    result = search(KNOBS, timer, reference=REFERENCE, budget_s=1000, clock=timer.clock)
    rows = {(row.knob, row.value): row for row in result.candidates}
    assert "not finite" in rows[("precision", "tf32")].reason
    assert rows[("compile", "default")].status == "rejected"
    assert "SIGKILL" in rows[("compile", "default")].reason
    assert result.chosen == result.baseline


def test_a_failing_baseline_stops_the_search():
    timer = FakeTimer({}, failures={("precision", "default"): "out of memory"})
    with pytest.raises(SearchError, match="baseline"):
        search(KNOBS, timer, reference=REFERENCE, budget_s=1000, clock=timer.clock)


def test_the_budget_stops_the_search_and_marks_what_was_not_tried():
    """Each trial costs 10 s, 0.7 s of it timing (five 0.1 s samples and two warm-up calls; 0.35 s once amp-bf16
    halves the step); of an 83 s budget ~42 s stay for the final check (each side's build twice and its timing
    four times: this measure has no side_by_side). The knobs that need no compile go first: tf32, amp-bf16 and
    amp-fp16 run (the last fits the ~11 s left), then the budget is spent: channels_last, the optimizer and the
    compile mode are not tried. With 115 s every knob that needs no compile runs and 15 s are left: the compile mode, whose
    cost nothing has shown yet, is not started on half of that."""
    timer = FakeTimer({("precision", "amp-bf16"): 0.5})
    result = search(KNOBS, timer, reference=REFERENCE, budget_s=83, clock=timer.clock)
    rows = statuses(result)
    assert rows[("precision", "tf32")] == "within-noise"
    assert rows[("precision", "amp-bf16")] == "accepted"
    assert rows[("precision", "amp-fp16")] == "within-noise"
    assert rows[("channels_last", "on")] == rows[("optimizer_impl", "fused")] == rows[("compile", "default")] == "not-tried"
    assert {"precision": "amp-bf16", "channels_last": "on", "compile": "off", "optimizer_impl": "default"} not in timer.calls

    timer = FakeTimer({("precision", "amp-bf16"): 0.5})
    result = search(KNOBS, timer, reference=REFERENCE, budget_s=115, clock=timer.clock)
    rows = statuses(result)
    assert rows[("channels_last", "on")] != "not-tried" and rows[("optimizer_impl", "fused")] != "not-tried"
    compile_row = next(row for row in result.candidates if row.knob == "compile")
    assert compile_row.status == "not-tried" and "no compiled trial has shown its cost yet" in compile_row.reason


def test_the_final_check_reverts_a_choice_that_is_slower_when_interleaved():
    """A fluke: amp-bf16 looked 2x faster once, but is 10% slower in every later measurement."""
    timer = FakeTimer({("precision", "amp-bf16"): 1.1})
    real_call = FakeTimer.__call__
    seen = []

    def fluky(config):
        trial = real_call(timer, config)
        if config["precision"] == "amp-bf16" and not seen:
            seen.append(1)
            return type(trial)(trial.config, tuple(s / 2.2 for s in trial.samples_s), "ok", None, trial.numerics, 64)
        return trial

    result = search(KNOBS, fluky, reference=REFERENCE, budget_s=1000, clock=timer.clock)
    assert result.verdict == "reverted"
    assert result.chosen == result.baseline


def test_exhaustive_measures_every_combination():
    timer = FakeTimer({("precision", "amp-bf16"): 0.5, ("compile", "default"): 0.9})
    result = search(KNOBS, timer, reference=REFERENCE, budget_s=1e9, exhaustive=True, clock=timer.clock)
    search_calls = 4 * 2 * 2 * 2  # the final check adds 8 more
    assert len(timer.calls) == search_calls + 8
    assert result.chosen == {"precision": "amp-bf16", "channels_last": "off", "compile": "default", "optimizer_impl": "default"}


def test_greedy_finds_what_exhaustive_finds_when_knobs_are_independent():
    speedups = {("precision", "amp-bf16"): 0.5, ("channels_last", "on"): 0.8, ("optimizer_impl", "fused"): 0.9}
    greedy = search(KNOBS, FakeTimer(speedups), reference=REFERENCE, budget_s=1e9, clock=FakeTimer({}).clock)
    full = search(KNOBS, FakeTimer(speedups), reference=REFERENCE, budget_s=1e9, exhaustive=True, clock=FakeTimer({}).clock)
    assert greedy.chosen == full.chosen


def test_an_interrupted_search_resumes_from_its_journal(tmp_path):
    speedups = {("precision", "amp-bf16"): 0.5, ("channels_last", "on"): 0.8}
    cache = open_cache(FINGERPRINT, base=tmp_path)
    journal = cache.journal("resnet50-train-b64")
    first = FakeTimer(speedups, interrupt_after=3)
    with pytest.raises(KeyboardInterrupt):
        search(KNOBS, first, reference=REFERENCE, budget_s=1000, journal=journal, clock=first.clock)
    assert len(journal.load()) == 3
    second = FakeTimer(speedups)
    resumed = search(KNOBS, second, reference=REFERENCE, budget_s=1000, journal=journal, clock=second.clock)
    uninterrupted = search(KNOBS, FakeTimer(speedups), reference=REFERENCE, budget_s=1000, clock=FakeTimer({}).clock)
    assert resumed.trials_resumed == 3
    assert resumed.chosen == uninterrupted.chosen
    measured_again = [call for call in second.calls[: resumed.trials_measured] if call in first.calls]
    assert measured_again == []  # no finished trial was measured twice


def test_a_torn_journal_line_is_skipped(tmp_path):
    cache = open_cache(FINGERPRINT, base=tmp_path)
    journal = cache.journal("x")
    timer = FakeTimer({})
    journal.append(timer(dict.fromkeys(["precision"], "default")).to_dict())
    with open(journal.path, "a") as handle:
        handle.write('{"config": {"precis')  # killed mid-write
    assert len(journal.load()) == 1
    assert journal.torn_lines == 1


def test_a_candidate_expected_to_outrun_the_budget_left_is_not_started():
    """compile=default, the first compile, costs 10 s; max-autotune is expected at 8x that (knob table `cost`):
    80 s. 250 s are spent, and should it win, its final check would need 2 x (10 + 80) s of the 400 s budget
    (this measure has no side_by_side): it never starts, and its row says what it was expected to cost."""
    from dataclasses import replace

    knobs = [KNOBS[0], replace(KNOBS[2], values=("off", "default", "max-autotune"), cost={"default": 1.0, "max-autotune": 8.0})]
    timer = FakeTimer({})

    def measure(config, timeout_s=None):
        timer.now += 200 if config == {"precision": "tf32", "compile": "off"} else 0  # a slow eager trial: 210 s
        return timer(config)

    result = search(knobs, measure, reference=REFERENCE, budget_s=400, clock=timer.clock)
    row = next(row for row in result.candidates if row.value == "max-autotune")
    assert row.status == "not-tried" and row.expected_s == pytest.approx(80)
    assert "expected to take ~80 s, more than the 0 s of search budget left (the final check's room included" in row.reason
    assert {"precision": "default", "compile": "max-autotune"} not in timer.calls
    assert {"precision": "default", "compile": "default"} in timer.calls


def test_a_trial_that_outruns_the_budget_left_is_stopped_and_marked_not_tried():
    """The first compile, cost unknown, may take half of the search budget left; it outruns that and is
    stopped, and the knobs after it still run."""
    from fade.act.tune.search import MIN_TRIAL_TIMEOUT_S, TRIAL_SHARE, Trial

    timer = FakeTimer({("optimizer_impl", "fused"): 0.8})
    timeouts = {}
    knobs = [KNOBS[0], KNOBS[2], KNOBS[3]]  # compile visited before the optimizer here: a plan can put it there

    def measure(config, timeout_s=None):
        timeouts[tuple(sorted(config.items()))] = timeout_s
        if config["compile"] == "default":  # a compile that would take 500 s
            timer.now += timeout_s
            return Trial(config, (), "failed", f"timeout: no result after {timeout_s:g} s")
        return timer(config)

    from fade.analyze.tuneplan import Plan, Visit

    plan = Plan(visits=[Visit("precision", ("tf32", "amp-bf16", "amp-fp16"), "x"), Visit("compile", ("default",), "y"),
                        Visit("optimizer_impl", ("fused",), "z")])  # fmt: skip
    result = search(knobs, measure, reference=REFERENCE, budget_s=400, clock=timer.clock, plan=plan)
    row = next(row for row in result.candidates if row.knob == "compile")
    assert row.status == "not-tried" and "outran" in row.reason
    assert all(timeout is None or timeout >= MIN_TRIAL_TIMEOUT_S for timeout in timeouts.values())
    compile_timeout = timeouts[(("compile", "default"), ("optimizer_impl", "default"), ("precision", "default"))]
    assert compile_timeout == pytest.approx(TRIAL_SHARE * (400 - 100 - 40))  # after baseline and 3 precisions
    assert statuses(result)[("optimizer_impl", "fused")] == "accepted"  # the overrun starved nothing after it


def test_the_final_check_times_both_sides_in_one_worker_when_the_measure_can():
    timer = FakeTimer({("precision", "amp-bf16"): 0.5})
    asked = []

    class PairedTimer:
        def __call__(self, config):
            return timer(config)

        def side_by_side(self, configs, *, rounds):
            asked.append((dict(configs), rounds))
            return {name: timer(config) for name, config in configs.items()}

    result = search(KNOBS, PairedTimer(), reference=REFERENCE, budget_s=1000, clock=timer.clock)
    assert len(asked) == 1 and set(asked[0][0]) == {"baseline", "chosen"}
    assert asked[0][0]["chosen"]["precision"] == "amp-bf16"
    assert result.verdict == "faster"


def test_time_spent_before_the_search_counts_against_the_budget():
    """A 60 s fp32 reference leaves 80 - 40 (final reserve) - 60 = -20 s: only the baseline runs."""
    timer = FakeTimer({("precision", "amp-bf16"): 0.5})
    result = search(KNOBS, timer, reference=REFERENCE, budget_s=80, clock=timer.clock, spent_s=60)
    assert len(timer.calls) == 1
    assert all(row.status in ("baseline", "not-tried", "skipped") for row in result.candidates)


MOBILENET_KNOBS = [
    KNOBS[0],
    KNOBS[1],
    knob("compile", "compile", ["off", "reduce-overhead"]),
]


def test_the_precision_that_pays_only_under_cuda_graphs_is_found_after_the_eager_knobs():
    """mobilenet_v2 inference on an H100 (issue 14): amp-bf16 is 21% slower in eager mode but the fastest under
    reduce-overhead. Eager knobs first keep fp32, reduce-overhead is accepted on it, and the second pass judges
    precision and layout again under CUDA graphs: amp-bf16 + channels_last + reduce-overhead, 1.47x more."""
    timer = FakeTimer({}, step_ms=mobilenet_v2_step_ms)
    found = search(MOBILENET_KNOBS, timer, reference=REFERENCE, budget_s=1000, clock=timer.clock)
    assert found.chosen == {"precision": "amp-bf16", "channels_last": "on", "compile": "reduce-overhead"}
    assert found.verdict == "faster"
    assert found.after["samples_per_s"] / found.before["samples_per_s"] == pytest.approx(33700 / 11470)
    first_compiled = next(index for index, call in enumerate(timer.calls) if call["compile"] != "off")
    assert first_compiled == 5  # the baseline, three precisions and channels_last ran in eager mode first
    rows = [row for row in found.candidates if row.knob == "precision" and row.value == "amp-bf16"]
    assert [row.status for row in rows] == ["slower", "accepted"]
    assert all(row.reason for row in found.candidates)  # every row says why it was kept or dropped
    assert found.elapsed_s <= 1000  # within the same budget


def test_a_speedup_that_vanishes_in_the_final_check_recommends_nothing():
    """channels_last looked 30% faster in the search; side by side with the baseline it is the same speed:
    the result carries the baseline's knobs, verdict not-proven, and says why."""
    timer = FakeTimer({})
    searching = []

    def measure(config):
        trial = timer(config)
        if config["channels_last"] == "on" and not searching:
            searching.append(1)
            return type(trial)(trial.config, tuple(s * 0.7 for s in trial.samples_s), "ok", None, trial.numerics, 64)
        return trial

    result = search(KNOBS, measure, reference=REFERENCE, budget_s=1000, clock=timer.clock)
    assert result.candidate["channels_last"] == "on"  # what the search chose
    assert result.chosen == result.baseline
    assert result.verdict == "not-proven" and not result.recommends
    assert "not proven faster" in result.verdict_reason
    assert result.candidates[-1].status == "rejected"


def baseline_slower_at_first(timer, factor: float):
    """`timer` as a measure whose first baseline trial (the search's) ran `factor` times slower than the later
    ones (the final check's): a host that changed under the run."""
    first = []

    def measure(config):
        trial = timer(config)
        if config == {"precision": "default", "channels_last": "off", "compile": "off", "optimizer_impl": "default"} and not first:
            first.append(1)
            return type(trial)(trial.config, tuple(s * factor for s in trial.samples_s), "ok", None, trial.numerics, 64)
        return trial

    return measure


def test_a_baseline_that_moved_between_search_and_final_check_means_a_noisy_host():
    """The search's baseline ran 8x slower than the final check's (a busy host, issue 14): nothing recommended."""
    timer = FakeTimer({("channels_last", "on"): 0.5})
    result = search(KNOBS, baseline_slower_at_first(timer, 8), reference=REFERENCE, budget_s=1000, clock=timer.clock)
    assert result.verdict == "noisy-host"
    assert result.chosen == result.baseline
    assert "noisy" in result.verdict_reason


def test_a_speedup_far_beyond_the_hosts_drift_is_still_proven():
    """A decode's eager baseline moved 1.32x between search and final check (llama-3.2-1b on an H200 beside three
    other jobs) while CUDA graphs made it 8x faster in the interleaved check: the drift cannot explain the
    speedup, so it is recommended, and the reason says the host moved."""
    timer = FakeTimer({("channels_last", "on"): 0.1})
    result = search(KNOBS, baseline_slower_at_first(timer, 1.32), reference=REFERENCE, budget_s=1000, clock=timer.clock)
    assert result.verdict == "faster" and result.chosen["channels_last"] == "on"
    assert "1.32x" in result.verdict_reason and "far less than the speedup" in result.verdict_reason


def test_a_steady_faster_value_is_not_lost_to_a_wandering_one():
    """Two values of one knob both beat its start beyond the bar: the fastest median is kept, not the first
    accepted, so a steady value is not lost to a wandering one whose spread would hide the difference (H100,
    mobilenet_v2 infer: compile default 22159 samples/s with a 28% spread, reduce-overhead 23419 with 0.04%;
    here as two precisions, since compile modes after a winning one wait for the next pass)."""

    class Spread(FakeTimer):
        def __call__(self, config):
            self.spread = 0.56 if config["precision"] == "tf32" else 0.005  # IQR/median 28%
            return super().__call__(config)

    timer = Spread({("precision", "tf32"): 11570 / 22159, ("precision", "amp-bf16"): 11570 / 23419})
    result = search([KNOBS[0]], timer, reference=REFERENCE, budget_s=1000, clock=timer.clock)
    assert result.chosen == {"precision": "amp-bf16"}
    rows = {row.value: row for row in result.candidates}
    assert rows["amp-bf16"].status == "accepted"
    assert rows["tf32"].status == "slower" and "amp-bf16 was faster still" in rows["tf32"].reason


def test_once_a_compile_mode_wins_the_knobs_are_judged_under_it_before_another_mode():
    """EfficientNet-B0 training on an H200 (results/tune-h200-s11/): reduce-overhead won 2.34x, then compile=default
    (no CUDA graphs, 17% slower) took the 63 s that amp-bf16 under reduce-overhead (1.29x more) needed. Now the
    other modes wait for the next pass: bf16 under CUDA graphs is judged first, default after it (and loses)."""
    from dataclasses import replace

    compile_knob = knob("compile", "compile", ["off", "default", "reduce-overhead"], order=("reduce-overhead", "default"))
    precision = replace(KNOBS[0], compiled_order={"train": ("amp-bf16", "amp-fp16", "tf32")})
    rates = {("default", "off"): 1940, ("amp-bf16", "off"): 1823, ("amp-fp16", "off"): 1613, ("tf32", "off"): 1941,
             ("default", "reduce-overhead"): 4531, ("default", "default"): 1603, ("amp-bf16", "reduce-overhead"): 5791,
             ("amp-fp16", "reduce-overhead"): 4633, ("amp-bf16", "default"): 2500}  # fmt: skip
    timer = FakeTimer({}, step_ms=lambda config: 64e3 / rates.get((config["precision"], config["compile"]), 1900))
    from fade.analyze.tuneplan import plan_search

    plan = plan_search([precision, compile_knob], mode="train")
    found = search([precision, compile_knob], timer, reference=REFERENCE, budget_s=10_000, clock=timer.clock, plan=plan)
    compiled = [(call["precision"], call["compile"]) for call in timer.calls[: found.trials_measured] if call["compile"] != "off"]
    assert compiled[:3] == [("default", "reduce-overhead"), ("amp-bf16", "reduce-overhead"), ("amp-fp16", "reduce-overhead")]
    assert ("amp-bf16", "default") in compiled[3:]  # the deferred mode, judged later on the new best
    assert found.chosen == {"precision": "amp-bf16", "compile": "reduce-overhead"}


# gpt2-small inference, batch 64, H100 (results/tune-shakedown-h100/): samples/s by (precision, compile)
GPT2_INFER_H100 = {("default", "off"): 347, ("default", "reduce-overhead"): 352, ("amp-bf16", "off"): 1446,
                   ("amp-bf16", "reduce-overhead"): 3348, ("tf32", "off"): 1124}


def test_cuda_graphs_are_judged_on_the_precision_that_makes_the_step_launch_bound():
    """gpt2-small inference on an H100: reduce-overhead gains 1% in fp32 (GEMM-bound), amp-bf16 wins 4x and makes
    the step launch-bound, where reduce-overhead gives 2.3x. Eager knobs first: amp-bf16, then CUDA graphs on it."""
    knobs = [KNOBS[0], knob("compile", "compile", ["off", "reduce-overhead"])]

    def step_ms(config):
        return 64e3 / GPT2_INFER_H100.get((config["precision"], config["compile"]), 347)

    timer = FakeTimer({}, step_ms=step_ms, spread=0.02)
    found = search(knobs, timer, reference=REFERENCE, budget_s=1000, clock=timer.clock)
    assert found.chosen == {"precision": "amp-bf16", "compile": "reduce-overhead"}
    assert statuses(found)[("compile", "reduce-overhead")] == "accepted"
    searched = timer.calls[:found.trials_measured]  # the final check's re-measurements come after
    assert len({tuple(sorted(call.items())) for call in searched}) == len(searched)  # no configuration twice


def test_a_precision_that_wins_only_with_a_compile_mode_inside_the_noise_is_found_by_the_probe():
    """compile=reduce-overhead alone is within the noise on fp32 (1%) and amp-bf16 loses in eager mode (launch-
    bound), but the two together are 3x faster: the interaction probe judges the precisions under the fastest
    sound compile mode once."""
    knobs = [KNOBS[0], knob("compile", "compile", ["off", "reduce-overhead"])]
    rates = {("default", "off"): 1000, ("default", "reduce-overhead"): 1010, ("amp-bf16", "off"): 800,
             ("amp-bf16", "reduce-overhead"): 3000}  # fmt: skip

    def step_ms(config):
        return 64e3 / rates.get((config["precision"], config["compile"]), 900)

    timer = FakeTimer({}, step_ms=step_ms)
    found = search(knobs, timer, reference=REFERENCE, budget_s=1000, clock=timer.clock)
    assert found.chosen == {"precision": "amp-bf16", "compile": "reduce-overhead"}
    probe = next(row for row in found.candidates if row.why.startswith("interaction") and row.value == "amp-bf16")
    assert probe.status == "accepted" and probe.config == found.chosen




ISSUE_26_KNOBS = [
    knob("precision", "precision", ["default", "tf32", "amp-bf16", "amp-fp16"]),
    knob("channels_last", "layout", ["off", "on"]),
    knob("cudnn_benchmark", "backend", ["off", "on"]),
    knob("compile", "compile", ["off", "default", "reduce-overhead", "max-autotune"],
         cost={"default": 1.0, "reduce-overhead": 1.0, "max-autotune": 8.0}),
    knob("optimizer_impl", "optimizer", ["default", "foreach", "fused"]),
]


class SlowCompiles(FakeTimer):
    """Eager trials take `eager_s`; a compiled trial takes `compile_s[mode]` of wall time, and is stopped (its
    timeout charged to the clock) when that exceeds the limit the search gives it."""

    def __init__(self, speedups, *, eager_s, compile_s, **fields):
        super().__init__(speedups, cost_s=eager_s, **fields)
        self.compile_s = compile_s
        self.timeouts = []

    def measure(self, config, timeout_s=None):
        from fade.act.tune.search import Trial

        self.timeouts.append((dict(config), timeout_s))
        mode = config.get("compile", "off")
        if mode == "off":
            return self(config)
        wall_s = self.compile_s[mode]
        if timeout_s is not None and wall_s > timeout_s:
            self.calls.append(dict(config))
            self.now += timeout_s
            return Trial(config, (), "failed", f"timeout: no result after {timeout_s:g} s", cost_s=timeout_s)
        trial = self(config)
        self.now += wall_s - self.cost_s
        return Trial(trial.config, trial.samples_s, "ok", None, trial.numerics, 64, cost_s=wall_s)

    def paired(self):
        """The measure with side_by_side, as tuner.WorkerMeasure has: the final check builds and compiles each
        side once in one worker (its wall time: each side's trial cost once)."""
        timer = self

        class Paired:
            side_by_side_failure = ""

            def __call__(self, config, timeout_s=None):
                return timer.measure(config, timeout_s=timeout_s)

            def side_by_side(self, configs, *, rounds, timeout_s=None):
                wall_s = sum(timer.cost_s if config.get("compile", "off") == "off" else timer.compile_s[config["compile"]]
                             for config in configs.values())  # fmt: skip
                if timeout_s is not None and wall_s > timeout_s:
                    timer.now += timeout_s
                    self.side_by_side_failure = f"timeout: no result after {timeout_s:g} s"
                    return None
                trials = {name: timer(config) for name, config in configs.items()}
                timer.now += wall_s - len(configs) * timer.cost_s
                return trials

        return Paired()


def test_slow_compiles_cannot_starve_the_cheap_knobs_and_an_overrunning_compile_is_stopped():
    """Issue 26's H200 case on a fake clock: compiles of 200 s (max-autotune 1500 s) and a 300 s budget. The knobs
    that need no compile run first, 5 s each, and find amp-bf16 + channels_last (5x); the first compile is given
    half of what is left, overruns and is stopped; the other compile modes are not started, each saying why."""
    timer = SlowCompiles({("precision", "amp-bf16"): 0.25, ("channels_last", "on"): 0.8}, eager_s=5.0,
                         compile_s={"default": 200.0, "reduce-overhead": 200.0, "max-autotune": 1500.0})  # fmt: skip
    result = search(ISSUE_26_KNOBS, timer.measure, reference=REFERENCE, budget_s=300, clock=timer.clock)
    rows = statuses(result)
    for value in ("tf32", "amp-bf16", "amp-fp16"):
        assert rows[("precision", value)] != "not-tried"
    assert rows[("channels_last", "on")] == "accepted"
    assert result.chosen["precision"] == "amp-bf16" and result.chosen["channels_last"] == "on"
    assert result.verdict == "faster"
    compile_rows = [row for row in result.candidates if row.knob == "compile"]
    assert compile_rows[0].status == "not-tried" and "outran" in compile_rows[0].reason
    assert all(row.status == "not-tried" for row in compile_rows)
    assert any("expected to take" in row.reason for row in compile_rows[1:])
    assert result.elapsed_s <= 300 + 60


def test_a_compile_that_fits_is_measured_and_max_autotune_is_left_with_its_expected_cost():
    """Compiles of 40 s: default and reduce-overhead (the cheapest factor) are measured on the best eager
    configuration; max-autotune, expected at 8x the first compile (320 s), is not started in a 300 s budget."""
    timer = SlowCompiles({("precision", "amp-bf16"): 0.25, ("compile", "reduce-overhead"): 0.7}, eager_s=5.0,
                         compile_s={"default": 40.0, "reduce-overhead": 40.0, "max-autotune": 400.0})  # fmt: skip
    result = search(ISSUE_26_KNOBS, timer.paired(), reference=REFERENCE, budget_s=300, clock=timer.clock)
    assert result.chosen["precision"] == "amp-bf16" and result.chosen["compile"] == "reduce-overhead"
    autotune = next(row for row in result.candidates if row.value == "max-autotune")
    assert autotune.status == "not-tried" and autotune.expected_s == pytest.approx(320)
    assert {**result.chosen, "compile": "max-autotune"} not in timer.calls
    assert result.elapsed_s <= 300 + 60


def test_a_named_value_the_budget_did_not_reach_is_said_first_with_the_budget_that_covers_it():
    """The profile named amp-bf16 (GEMM at a low share of peak); a 60 s budget of 10 s trials ends before it.
    The verdict starts by saying so, with a budget that would have measured it."""
    from fade.analyze.tuneplan import Plan, Visit

    plan = Plan(visits=[Visit("channels_last", ("on",), "x"), Visit("precision", ("tf32", "amp-bf16", "amp-fp16"), "y")],
                named={"precision=amp-bf16": "gemm_low_peak"})  # fmt: skip
    timer = FakeTimer({("channels_last", "on"): 0.8})
    result = search(KNOBS, timer, reference=REFERENCE, budget_s=60, clock=timer.clock, plan=plan)
    assert [entry["value"] for entry in result.untried_named] == ["amp-bf16"]
    assert result.verdict_reason.startswith("Not measured, though the profile named it: precision=amp-bf16 (gemm_low_peak)")
    assert result.budget_needed_s > 60
    assert f"--budget {int(-(-result.budget_needed_s // 60))}" in result.verdict_reason


def test_a_later_pass_tries_the_runner_up_first():
    """The Llama-shaped LM on the H200: amp-fp16 and amp-bf16 tie in eager mode (fp16 kept by a hair), under
    reduce-overhead bf16 is 8% faster. The second pass judges precision again fastest-first, so its first
    compiled trial is bf16, not tf32."""
    knobs = [KNOBS[0], knob("compile", "compile", ["off", "reduce-overhead"])]
    rates = {("default", "off"): 96, ("tf32", "off"): 168, ("amp-bf16", "off"): 217, ("amp-fp16", "off"): 219,
             ("amp-fp16", "reduce-overhead"): 612, ("amp-bf16", "reduce-overhead"): 662, ("tf32", "reduce-overhead"): 300,
             ("default", "reduce-overhead"): 114}  # fmt: skip
    timer = FakeTimer({}, step_ms=lambda config: 8e3 / rates[(config["precision"], config["compile"])])
    found = search(knobs, timer, reference=REFERENCE, budget_s=1000, clock=timer.clock)
    second_pass = [row for row in found.candidates if row.reason.startswith("pass 2")]
    assert second_pass[0].value == "amp-bf16" and second_pass[0].status == "accepted"
    assert found.chosen == {"precision": "amp-bf16", "compile": "reduce-overhead"}


def test_the_probe_runs_after_a_launch_bound_plan_moved_the_eager_knobs():
    """A launch-bound plan compiles with CUDA graphs first (after the knobs that need no compile); reduce-overhead
    alone is within the noise, channels_last wins in eager mode, and bf16 wins only under CUDA graphs. The probe
    runs after the pass on the configuration as it then is, and finds bf16 + channels_last + reduce-overhead (the
    review's case: 1.06x without it)."""
    from fade.analyze.tuneplan import plan_search

    knobs = [KNOBS[0], KNOBS[1], knob("compile", "compile", ["off", "reduce-overhead"], answers={"reduce-overhead": ("launch_bound",)})]
    plan = plan_search(knobs, [{"rule": "launch_bound", "share": 0.6, "title": "launch-bound", "fix": "graphs"}])
    assert plan.visits[-1].knob == "compile" and plan.visits[-1].values == ("reduce-overhead",)

    def step_ms(config):
        ms = 100.0 / (1.06 if config["channels_last"] == "on" else 1.0)
        if config["compile"] == "reduce-overhead":
            ms /= 3.0 if config["precision"] == "amp-bf16" else 1.01
        elif config["precision"] == "amp-bf16":
            ms *= 1.25
        return ms

    timer = FakeTimer({}, step_ms=step_ms)
    found = search(knobs, timer, reference=REFERENCE, budget_s=10_000, clock=timer.clock, plan=plan)
    assert found.chosen == {"precision": "amp-bf16", "channels_last": "on", "compile": "reduce-overhead"}


def test_a_named_compile_mode_compiles_first_alone_after_the_knobs_that_need_no_compile():
    from fade.analyze.tuneplan import plan_search

    knobs = [KNOBS[0], knob("compile", "compile", ["off", "default", "reduce-overhead", "max-autotune"],
                            cost={"max-autotune": 8.0}, answers={"reduce-overhead": ("launch_bound",)})]  # fmt: skip
    plan = plan_search(knobs, [{"rule": "launch_bound", "share": 0.6, "title": "launch-bound", "fix": "graphs"}])
    assert [(visit.knob, visit.values) for visit in plan.visits] == [
        ("precision", ("tf32", "amp-bf16", "amp-fp16")), ("compile", ("reduce-overhead",)), ("compile", ("default", "max-autotune"))]
    assert "launch_bound" in plan.why("compile", "reduce-overhead")
    assert "launch_bound" not in plan.why("compile", "default")


def test_a_named_value_stopped_at_its_limit_is_listed_as_untried():
    from fade.act.tune.search import Trial
    from fade.analyze.tuneplan import Plan, Visit

    plan = Plan(visits=[Visit("compile", ("default",), "x")], named={"compile=default": "memory_bound_elementwise"})
    timer = FakeTimer({})

    def measure(config, timeout_s=None):
        if config["compile"] == "default":
            timer.now += timeout_s
            return Trial(config, (), "failed", f"timeout: no result after {timeout_s:g} s", cost_s=timeout_s)
        return timer(config)

    result = search([KNOBS[2]], measure, reference=REFERENCE, budget_s=400, clock=timer.clock, plan=plan)
    assert [entry["value"] for entry in result.untried_named] == ["default"]
    assert "outran" in result.untried_named[0]["reason"]


def test_a_later_pass_does_not_judge_a_rejected_value_again():
    """amp-fp16 fails the numerics check in eager mode (fastest, but its loss drifts): once compile moves, the second
    pass judges the other precisions again, not amp-fp16."""
    knobs = [KNOBS[0], knob("compile", "compile", ["off", "reduce-overhead"])]
    timer = FakeTimer({("precision", "amp-fp16"): 0.3, ("compile", "reduce-overhead"): 0.5},
                      losses={("precision", "amp-fp16"): 6.5})  # fmt: skip
    found = search(knobs, timer, reference=REFERENCE, budget_s=10_000, clock=timer.clock)
    fp16_rows = [row for row in found.candidates if row.value == "amp-fp16"]
    assert [row.status for row in fp16_rows] == ["rejected"]


def test_a_resumed_journal_counts_even_when_the_budget_is_spent(tmp_path):
    """A search interrupted after four trials resumes under a budget that leaves nothing for new trials: the four
    recorded trials are used (they cost nothing), and only the rest is not tried."""
    speedups = {("precision", "amp-bf16"): 0.5}
    journal = open_cache(FINGERPRINT, base=tmp_path).journal("resume")
    first = FakeTimer(speedups, interrupt_after=4)
    with pytest.raises(KeyboardInterrupt):
        search(KNOBS, first, reference=REFERENCE, budget_s=1000, journal=journal, clock=first.clock)
    again = FakeTimer(speedups)
    resumed = search(KNOBS, again, reference=REFERENCE, budget_s=41, journal=journal, clock=again.clock)
    assert resumed.trials_resumed == 4
    assert statuses(resumed)[("precision", "amp-bf16")] == "accepted"


# -- a review of the session-11 search changes (results/tune-h200-s11/): each test below failed before its fix
def test_a_known_compile_that_would_win_starts_only_with_room_for_its_final_check():
    """max-autotune expected (and taking) 320 s with 390 s of search budget left once looked affordable; it won,
    and its final check ran the run to 705 s of a 600 s budget. The start rule now counts the final check the
    trial would need should it win."""
    precision = knob("precision", "precision", ["default", "tf32", "amp-bf16", "amp-fp16"])
    compile_knob = knob("compile", "compile", ["off", "reduce-overhead", "max-autotune"], cost={"reduce-overhead": 1.0, "max-autotune": 8.0})
    timer = SlowCompiles({("compile", "max-autotune"): 0.5}, eager_s=5.0, compile_s={"reduce-overhead": 40.0, "max-autotune": 320.0})
    result = search([precision, compile_knob], timer.paired(), reference=REFERENCE, budget_s=600, clock=timer.clock)
    assert result.elapsed_s <= 600 + 60
    row = next(row for row in result.candidates if row.value == "max-autotune")
    assert row.status == "not-tried" and "final check's room included" in row.reason


def test_a_final_check_cut_off_keeps_the_numerics_of_the_runs_that_finished():
    """Each side ran, then the last run of the chosen side was stopped by the limit: the side's pooled samples are
    judged with the numerics of its last good run, not reverted for 'no numerics'."""
    from fade.act.tune.search import _final_check

    timer = FakeTimer({("precision", "amp-bf16"): 0.5})
    runs = []

    def measure(config, timeout_s=None):
        runs.append(config["precision"])
        if config["precision"] == "amp-bf16" and runs.count("amp-bf16") == 4:  # its last run
            return Trial(config, (), "failed", "timeout: no result after 5 s")
        return timer(config)

    baseline, chosen = _final_check(measure, {"precision": "default"}, {"precision": "amp-bf16"}, timeout_s=1000, clock=timer.clock)
    assert chosen.status == "ok" and chosen.numerics is not None and chosen.samples_s


def test_compile_modes_deferred_by_a_winner_are_not_lost_in_the_last_pass():
    """reduce-overhead wins in pass 1, default in pass 2, reduce-overhead again in pass 3: what a winner defers in
    the last pass would never be measured, and max-autotune (the fastest) had no row at all."""
    from fade.analyze.tuneplan import plan_search

    precision = knob("precision", "precision", ["default", "tf32", "amp-bf16", "amp-fp16"])
    layout = knob("channels_last", "layout", ["off", "on"])
    compile_knob = knob("compile", "compile", ["off", "reduce-overhead", "default", "max-autotune"])
    rates = {("default", "off", "reduce-overhead"): 2000, ("amp-bf16", "off", "reduce-overhead"): 2600,
             ("amp-bf16", "off", "default"): 3000, ("amp-fp16", "off", "default"): 3500, ("amp-fp16", "on", "default"): 4000,
             ("amp-fp16", "on", "reduce-overhead"): 5000, ("amp-fp16", "on", "max-autotune"): 9000}  # fmt: skip
    timer = FakeTimer({}, step_ms=lambda config: 64e3 / rates.get((config["precision"], config["channels_last"], config["compile"]), 1000))
    knobs = [precision, layout, compile_knob]
    result = search(knobs, timer, reference=REFERENCE, budget_s=100_000, clock=timer.clock, plan=plan_search(knobs, mode="train"))
    assert any(call["compile"] == "max-autotune" for call in timer.calls)
    assert result.chosen["compile"] == "max-autotune"


def test_a_crashed_compile_does_not_prove_what_a_compile_costs():
    """reduce-overhead crashed after 3 s (a CUDA graph capture error): compile=default was then 'known' at 3 s and
    stopped at 30 s with 437 s of budget left. A crash's cost is no estimate: default keeps the unproven-cost rule."""
    precision = knob("precision", "precision", ["default", "tf32"])
    compile_knob = knob("compile", "compile", ["off", "reduce-overhead", "default"])
    timer = SlowCompiles({("compile", "default"): 0.5}, eager_s=5.0, compile_s={"reduce-overhead": 56.0, "default": 56.0})

    def measure(config, timeout_s=None):
        if config["compile"] == "reduce-overhead":
            timer.now += 3
            return Trial(config, (), "failed", "crashed: cudaErrorStreamCaptureUnsupported", cost_s=3.0)
        return timer.measure(config, timeout_s)

    result = search([precision, compile_knob], measure, reference=REFERENCE, budget_s=600, clock=timer.clock)
    assert statuses(result)[("compile", "default")] == "accepted"


def test_the_final_check_fits_the_budget_when_a_slow_sides_timing_dominates():
    """Session 21's 8B decode on an H200 (results/s21-h200/): an eager baseline trial of 48 s, 18.5 s of it ten
    1.85 s calls, and a reduce-overhead compile of 84 s, named first by the profile. The paired check timed each
    side with a trial's whole sample count in each of its four rounds (~180 s) against a reserve of the two
    trials' costs (132 s); it was killed at its limit and nothing was recommended. Its rounds now split a trial's
    samples (round_settings) and the reserve counts each round: the check fits, and proves the compile."""
    from fade.act.tune.search import FINAL_OVERRUN_S, round_settings
    from fade.analyze.tuneplan import Plan, Visit

    precision = knob("precision", "precision", ["default", "amp-bf16"])
    compile_knob = knob("compile", "compile", ["off", "reduce-overhead"])
    plan = Plan(visits=[Visit("compile", ("reduce-overhead",), "launch_bound"), Visit("precision", ("amp-bf16",), "x")],
                named={"compile=reduce-overhead": "launch_bound"})  # fmt: skip
    clock = {"now": 0.0}
    settings = {"min_samples": 8, "min_warmup_calls": 2}
    per_round = round_settings(settings, 4)
    assert per_round["min_samples"] == 2 and per_round["min_warmup_calls"] == 1

    def step_and_build(config):
        if config["compile"] == "off":
            return 1.85, 48.0 - 10 * 1.85
        return 0.375, 84.0 - 10 * 0.375

    def trial(config, cost_s, samples):
        step, _ = step_and_build(config)
        numerics = {"mode": "train", "losses": [7.0, 6.5, REFERENCE["losses"][-1]], "grads_finite": True}
        return Trial(dict(config), tuple(step * (1 + 0.002 * (i % 3 - 1)) for i in range(samples)), "ok", None,
                     numerics, 64, cost_s=cost_s)  # fmt: skip

    class Decode:
        side_by_side_failure = ""

        def __call__(self, config, timeout_s=None):
            step, build = step_and_build(config)
            cost = build + (settings["min_warmup_calls"] + settings["min_samples"]) * step
            if timeout_s is not None and cost > timeout_s:
                clock["now"] += timeout_s
                return Trial(dict(config), (), "failed", f"timeout: no result after {timeout_s:g} s", cost_s=timeout_s)
            clock["now"] += cost
            return trial(config, cost, settings["min_samples"])

        def side_by_side(self, configs, *, rounds, timeout_s=None):
            split = round_settings(settings, rounds)
            assert split["max_settle_s"] == 0.0
            # each round: the warm-up call, measure()'s block-sizing call, the samples
            wall = sum(step_and_build(c)[1] + rounds * (split["min_warmup_calls"] + 1 + split["min_samples"]) * step_and_build(c)[0]
                       for c in configs.values())  # fmt: skip
            if timeout_s is not None and wall > timeout_s:
                clock["now"] += timeout_s
                self.side_by_side_failure = f"timeout: no result after {timeout_s:g} s (the case timeout)"
                return None
            clock["now"] += wall
            return {name: trial(config, 0.0, rounds * split["min_samples"]) for name, config in configs.items()}

    result = search([precision, compile_knob], Decode(), reference=REFERENCE, budget_s=420, spent_s=50,
                    clock=lambda: clock["now"], plan=plan)  # fmt: skip
    assert result.verdict == "faster", result.verdict_reason
    assert result.chosen["compile"] == "reduce-overhead"
    assert result.elapsed_s <= 420 + FINAL_OVERRUN_S


def test_a_knobs_cost_factor_counts_under_a_compile_mode_too():
    """weight_quant=int8 under reduce-overhead outran 3x its mode's trial on the H200 every time (1B: 87 s against
    29 s), because the expected cost of a knob judged under a compile mode ignored the knob's own factor. It now
    multiplies by the row's compiled_cost, and a 1.0 factor leaves the mode's cost as it was."""
    from fade.act.tune.search import expected_cost_s
    from fade.analyze.knobs import load_knobs

    knobs = {knob.id: knob for knob in load_knobs()}
    decode_compile, quant = knobs["decode_compile"], knobs["weight_quant"]
    costs = [("reduce-overhead", 29.0, 1.0)]
    assert quant.compiled_cost["int8"] > 12.0 and "int8" not in quant.cost  # eager: about its trial
    assert expected_cost_s(decode_compile, "reduce-overhead", quant.compiled_cost["int8"], [(40.0, 1.0)], costs) == \
        29.0 * quant.compiled_cost["int8"]
    assert expected_cost_s(decode_compile, "reduce-overhead", 1.0, [(40.0, 1.0)], costs) == 29.0
    # a mode not measured yet: the first compiled trial scaled by the modes' factors, then by the knob's
    assert expected_cost_s(decode_compile, "max-autotune", 2.0, [(40.0, 1.0)], costs) == 29.0 * 8.0 * 2.0
    assert expected_cost_s(decode_compile, None, 2.0, [(40.0, 1.0)], costs) == 80.0


def test_a_dear_values_trial_does_not_raise_what_the_next_trial_is_expected_to_cost():
    """Session 22's 8B decode on an H200 (results/s22-h200/A): reduce-overhead's trial took 20 s, then int8 under
    it was stopped at 243 s, and every SDPA value after it was expected at 243 s (the dearest trial of the mode)
    and left untried with 273 s of budget left. A trial's cost is now divided by its values' factor before it
    stands for another: the SDPA values are expected at ~20 s and measured."""
    from fade.act.tune.search import expected_cost_s

    decode_compile = knob("decode_compile", "compile", ["off", "reduce-overhead"])
    costs = [("reduce-overhead", 20.2, 1.0), ("reduce-overhead", 243.0, 15.0)]
    assert expected_cost_s(decode_compile, "reduce-overhead", 1.0, [(47.0, 1.0)], costs) == 20.2
    assert expected_cost_s(decode_compile, "reduce-overhead", 15.0, [(47.0, 1.0)], costs) == pytest.approx(303.0)
    # only dear trials measured: their cost over their factor is the base
    assert expected_cost_s(decode_compile, "reduce-overhead", 1.0, [], [("reduce-overhead", 300.0, 15.0)]) == 20.0

    from fade.analyze.tuneplan import Plan, Visit

    quant = knob("weight_quant", "precision", ["none", "int8"], compiled_cost={"int8": 15.0})
    sdpa = knob("sdpa_backend", "backend", ["default", "efficient"])
    plan = Plan(visits=[Visit("decode_compile", ("reduce-overhead",), "launch_bound"), Visit("weight_quant", ("int8",), "x"),
                        Visit("sdpa_backend", ("efficient",), "")], named={})  # fmt: skip
    clock = {"now": 0.0}
    seconds = {"off": 40.0, "reduce-overhead": 20.0}

    def measure(config, timeout_s=None):
        cost = seconds[config["decode_compile"]] * (13.0 if config["weight_quant"] == "int8" else 1.0)
        if timeout_s is not None and cost > timeout_s:
            clock["now"] += timeout_s
            return Trial(dict(config), (), "failed", f"timeout: no result after {timeout_s:g} s", cost_s=timeout_s)
        clock["now"] += cost
        step = {"off": 1.3, "reduce-overhead": 0.38}[config["decode_compile"]] * (0.9 if config["sdpa_backend"] == "efficient" else 1.0)
        return Trial(dict(config), tuple(step * (1 + 0.001 * (i % 3 - 1)) for i in range(8)), "ok", None,
                     {"mode": "train", "losses": list(REFERENCE["losses"]), "grads_finite": True}, 64, cost_s=cost)

    result = search([quant, sdpa, decode_compile], measure, reference=REFERENCE, budget_s=540, spent_s=60,
                    clock=lambda: clock["now"], plan=plan)  # fmt: skip
    rows = statuses(result)
    assert rows[("decode_compile", "reduce-overhead")] == "accepted"
    assert rows[("sdpa_backend", "efficient")] == "accepted", [row.reason for row in result.candidates]
    int8 = next(row for row in result.candidates if row.value == "int8")
    assert int8.expected_s == pytest.approx(300.0)




def test_a_compile_served_from_the_cache_does_not_prove_what_a_new_graph_costs():
    """The 8B decode on an H200: reduce-overhead's trial took 20 s on a warm Inductor cache (results/s22-h200/A),
    a cold compile of the same model ~84 s (results/s21-h200/). Taken as the known cost, it would stop the next
    compile (a new graph: another SDPA backend) at 3x 20 s. A trial whose graphs all came from the cache bounds
    the cost from below only: the next compile keeps the share rule and runs to the end, and then stands for the
    mode's cost."""
    from fade.analyze.tuneplan import Plan, Visit

    sdpa = knob("sdpa_backend", "backend", ["default", "efficient"])
    decode_compile = knob("decode_compile", "compile", ["off", "reduce-overhead", "reduce-overhead+coordinate-descent"],
                          cost={"reduce-overhead": 1.0, "reduce-overhead+coordinate-descent": 2.0})
    plan = Plan(visits=[Visit("decode_compile", ("reduce-overhead",), "launch_bound"), Visit("sdpa_backend", ("efficient",), ""),
                        Visit("decode_compile", ("reduce-overhead+coordinate-descent",), "")], named={})  # fmt: skip
    clock = {"now": 0.0}

    def measure(config, timeout_s=None):
        warm = config == {"sdpa_backend": "default", "decode_compile": "reduce-overhead"}
        cost = 47.0 if config["decode_compile"] == "off" else (20.0 if warm else 84.0)
        if timeout_s is not None and cost > timeout_s:
            clock["now"] += timeout_s
            return Trial(dict(config), (), "failed", f"timeout: no result after {timeout_s:g} s", cost_s=timeout_s)
        clock["now"] += cost
        step = 1.3 if config["decode_compile"] == "off" else 0.38 * (0.95 if config["sdpa_backend"] == "efficient" else 1.0)
        cache = {} if config["decode_compile"] == "off" else {"hits": 3, "misses": 0} if warm else {"hits": 0, "misses": 3}
        return Trial(dict(config), tuple(step * (1 + 0.001 * (i % 3 - 1)) for i in range(8)), "ok", None,
                     {"mode": "train", "losses": list(REFERENCE["losses"]), "grads_finite": True}, 64, cost_s=cost,
                     extra={"compile_cache": cache})  # fmt: skip

    result = search([sdpa, decode_compile], measure, reference=REFERENCE, budget_s=540, spent_s=60,
                    clock=lambda: clock["now"], plan=plan)  # fmt: skip
    rows = statuses(result)
    assert rows[("sdpa_backend", "efficient")] == "accepted", [row.reason for row in result.candidates]
    efficient = next(row for row in result.candidates if row.value == "efficient")
    assert efficient.expected_is_bound and efficient.expected_s == 20.0
    # the cold compile now stands for the mode: coordinate descent is expected at 2x 84 s
    descent = next(row for row in result.candidates if row.value == "reduce-overhead+coordinate-descent")
    assert descent.expected_s == pytest.approx(168.0) and not descent.expected_is_bound


def test_a_journals_odd_compile_cache_record_proves_nothing_and_crashes_nothing():
    """A resumed journal's trial carries the compile_cache record its worker wrote; one written elsewhere may hold
    anything. Only integer counts with hits and no miss say a compile came from the cache."""
    from fade.measure.compile_cache import served_from_cache

    assert served_from_cache({"hits": 3, "misses": 0}) and served_from_cache({"hits": 2})
    for odd in ({"hits": "3", "misses": 0}, {"hits": 3, "misses": None}, {"hits": True, "misses": 0}, {"hits": 0},
                {"hits": 3, "misses": 1}, {}, None, [3, 0], "hits"):
        assert served_from_cache(odd) is False, odd
