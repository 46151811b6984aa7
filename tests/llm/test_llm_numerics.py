"""fade.analyze.llm_numerics, the judgement of the decode-path numerics check (issue 28, and issue 29's gate),
on hand-made per-step numbers: agreement, near-ties against the dtype's and the floor's tolerance, the KL bound,
the verdict and what failed, and the table cell."""

import math

import pytest

from fade.analyze import llm_numerics as numerics
from fade.analyze.compare import tokens_cell


def _judge(agree, gap, kl, *, dtype="bf16", logit_std=1.0, floor_std=None, floor_kl=None, **options):
    n = len(agree)
    return numerics.judge(dtype, agree=agree, gap=gap, kl=kl, logit_std=[logit_std] * n,
                          floor_std=None if floor_std is None else [floor_std] * n, floor_kl=floor_kl, **options)


def test_the_near_tie_tolerance_is_the_dtype_bound_or_the_floor_whichever_is_larger():
    assert numerics.near_tie_tolerance("bf16", 2.0) == pytest.approx(5 * 2.0 / 256)
    assert numerics.near_tie_tolerance("fp32", 1.0) == pytest.approx(5 * 2.0**-24)
    assert numerics.near_tie_tolerance("fp16", 1.0, floor_std=1e-6) == pytest.approx(5 * 2.0**-11)
    assert numerics.near_tie_tolerance("bf16", 1.0, floor_std=0.3) == pytest.approx(1.5)
    assert numerics.near_tie_tolerance("bf16", 1.0, floor_std=math.nan) == pytest.approx(5 / 256)


def test_the_kl_bound_scales_the_floor_and_never_goes_below_the_minimum():
    assert numerics.kl_bound(0.1) == pytest.approx(0.13)
    assert numerics.kl_bound(0.0) == numerics.kl_bound(None) == numerics.KL_MIN_NATS


def test_all_agree_and_small_kl_is_ok_100():
    judged = _judge([1] * 100, [0.0] * 100, [1e-6] * 100)
    assert judged["verdict"] == "ok" and judged["failed"] == []
    assert judged["top1_agreement"] == judged["top1_agreement_with_near_ties"] == 1.0
    assert (judged["checked"], judged["disagreements"], judged["near_ties"]) == (100, 0, 0)
    assert judged["worst_disagreement"] is None and numerics.verdict_text(judged) == "ok 100%"


def test_disagreements_inside_the_tolerance_are_near_ties_and_pass():
    # bf16, logit std 1: tolerance 5/256 = 0.0195; ten flips at gap 0.01 are near-ties
    agree = [0] * 10 + [1] * 90
    judged = _judge(agree, [0.01] * 10 + [0.0] * 90, [1e-6] * 100)
    assert judged["verdict"] == "ok" and judged["top1_agreement"] == 0.9
    assert judged["near_ties"] == judged["disagreements"] == 10 and judged["top1_agreement_with_near_ties"] == 1.0
    assert numerics.verdict_text(judged) == "ok 100%"


def test_a_flip_past_the_tolerance_counts_and_two_in_a_hundred_fail():
    agree = [0, 0] + [1] * 98
    judged = _judge(agree, [0.5, 0.01] + [0.0] * 98, [1e-6] * 100)
    assert judged["verdict"] == "ok" and judged["top1_agreement_with_near_ties"] == 0.99  # one far flip: the bar
    assert judged["worst_disagreement"] == {"index": 0, "gap": 0.5, "tolerance": pytest.approx(5 / 256)}
    judged = _judge(agree, [0.5, 0.4] + [0.0] * 98, [1e-6] * 100)
    assert judged["verdict"] == "differ" and judged["failed"] == ["top-1 agreement 98.0% (near-ties counted) < 99%"]
    assert numerics.verdict_text(judged) == "differ 98%"


def test_the_floor_widens_the_tolerance_and_sets_the_kl_bound():
    # a random-weight model: the dtype alone moves logits by 0.3, so a flip at gap 1.0 is a near-tie (5 x 0.3)
    agree, gap = [0] * 50 + [1] * 50, [1.0] * 50 + [0.0] * 50
    judged = _judge(agree, gap, [0.05] * 100, floor_std=0.3, floor_kl=[0.04] * 100)
    assert judged["verdict"] == "ok" and judged["near_ties"] == 50 and judged["kl_bound"] == pytest.approx(0.052)
    assert judged["near_tie_tolerance_mean"] == pytest.approx(1.5)
    worse = _judge(agree, gap, [0.05] * 99 + [0.06], floor_std=0.3, floor_kl=[0.04] * 100)
    assert worse["verdict"] == "differ" and worse["failed"] == ["max KL 0.06 nats > bound 0.052"]
    both = _judge(agree, [2.0] * 50 + [0.0] * 50, [0.1] * 100, floor_std=0.3, floor_kl=[0.04] * 100)
    assert len(both["failed"]) == 2 and numerics.verdict_text(both) == "differ 50%"


def test_a_stated_bound_replaces_the_floors_and_a_nan_fails():
    judged = _judge([1] * 4, [0.0] * 4, [0.01] * 4, floor_kl=[1.0] * 4, max_kl=0.005, min_agreement=0.9)
    assert judged["verdict"] == "differ" and judged["kl_bound"] == 0.005 and judged["min_agreement"] == 0.9
    assert _judge([1] * 4, [0.0] * 4, [math.nan] * 4)["verdict"] == "differ"


def test_nested_steps_by_sequences_are_flattened_and_mismatched_lengths_refused():
    judged = numerics.judge("fp32", agree=[[1, 1], [1, 0]], gap=[[0, 0], [0, 1e-9]], kl=[[0, 0], [0, 1e-7]],
                            logit_std=[[1, 1], [1, 1]], floor_std=[[1e-8, 1e-8], [1e-8, 1e-8]], floor_kl=[[0, 0], [0, 0]])
    assert judged["checked"] == 4 and judged["near_ties"] == 1 and judged["verdict"] == "ok"
    with pytest.raises(ValueError, match="one value per checked step"):
        numerics.judge("bf16", agree=[1, 1], gap=[0], kl=[0, 0], logit_std=[1, 1])
    with pytest.raises(ValueError, match="no step"):
        numerics.judge("bf16", agree=[], gap=[], kl=[], logit_std=[])
    assert numerics.summarize([[1, 0]], [[0.1, 0.3]]) == {"checked": 2, "top1_agreement": 0.5, "kl_mean": 0.2,
                                                         "kl_max": 0.3}  # fmt: skip


def test_the_table_cell_reads_the_verdict_or_an_older_records_match():
    assert tokens_cell({"numerics": {"verdict": "ok", "top1_agreement_with_near_ties": 0.996}}) == "ok 99%"
    assert tokens_cell({"numerics": {"verdict": "differ", "top1_agreement_with_near_ties": 0.93}}) == "differ 93%"
    assert tokens_cell({"tokens": {"match": False}}) == "differ"  # a record from before the numerics check
    assert tokens_cell({"tokens": {"match": True}, "numerics": "odd"}) == "match"
    assert tokens_cell({"numerics": {"verdict": "maybe", "top1_agreement_with_near_ties": 1.0}}) is None
    assert tokens_cell({}) is None
