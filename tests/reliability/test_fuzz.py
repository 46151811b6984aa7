"""Fuzz over the four files a user feeds FADE: each mutated file is accepted and runs through analysis,
compare, report and apply, or is rejected in one line; nothing raises. ~250 mutations per reader."""

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .mutations import feed, mutated_text

EXAMPLES = {"results": 120, "snapshot": 120, "profile": 150, "rules": 150}


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_mutated_inputs_are_used_or_rejected_in_one_line(kind, tmp_path_factory):
    seen = {"accepted": 0, "rejected": 0}

    @settings(max_examples=EXAMPLES[kind], deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # fmt: skip
    @given(seed=st.integers(0, 2**32 - 1))
    def run(seed):
        directory = tmp_path_factory.mktemp(kind)
        path = directory / f"input.{kind}"
        path.write_text(mutated_text(kind, random.Random(seed)), encoding="utf-8", errors="surrogatepass")
        outcome = feed(kind, path)  # any exception other than a FadeUsageError fails the test with its traceback
        assert outcome and "\n" not in outcome
        seen["accepted" if outcome == "accepted" else "rejected"] += 1

    run()
    assert seen["rejected"] and seen["accepted"], seen  # the mutations reach both outcomes
