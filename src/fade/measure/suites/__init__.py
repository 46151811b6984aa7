"""The suites FADE measures with, each a list of cases run through fade.measure.runner: micro (GEMM, memory,
launch, conv, SDPA, norm), models (the zoo, per variant), ops (the OpInfo coverage sweep) and quick (the
doctor's few-second measurements)."""
