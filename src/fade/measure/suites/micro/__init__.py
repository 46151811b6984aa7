"""The micro suite: suite.py decides which cases exist and runs them; gemm, memory, conv, attention and norm
hold the case functions a worker imports."""

from fade.measure.suites.micro.suite import run_micro

__all__ = ["run_micro"]
