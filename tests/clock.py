"""A fake clock for tests of timing logic: seconds pass only when the test says so, so what a test asserts
cannot depend on how loaded the machine is."""


class FakeClock:
    """A clock that moves only when the timed function (or the test) calls advance()."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
