"""The ops and dtypes the seeds name as weak on ROCm: always swept, and highlighted in every summary.

Each row says what is matched (globs on the op id, or a dtype), why it is on the list and where that
claim comes from. Rows are checked when this module loads (CuratedRow.__post_init__).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

SEED_000 = (
    "seeds/000 (the FADE v1.1 article): 'torch.nn.functional.grid_sample, torch.sparse, bfloat16 support and "
    "flash-attention are missing or poorly implemented on ROCm'"
)
SEED_003 = "seeds/003 (CUDA vs ROCm ecosystem study, 2024-01-17): the gap is above all operator-library richness"
PITFALL_I15 = "research/amd-pitfalls.md I-15: SDPA falls back to the math path where AOTriton has no kernels"
PITFALL_I16 = "research/amd-pitfalls.md I-16: is_bf16_supported() is True on every ROCm build; bf16 is slow or emulated on RDNA2"


@dataclass(frozen=True)
class CuratedRow:
    name: str  # short label for the summary
    why: str
    source: str
    ops: tuple = ()  # globs on op ids
    dtype: str = ""  # or: every op in this dtype

    def __post_init__(self):
        if bool(self.ops) == bool(self.dtype):
            raise ValueError(f"curated row {self.name!r}: give ops or a dtype, not both or neither")
        if not self.source or not self.why:
            raise ValueError(f"curated row {self.name!r} needs a why and a source")


CURATED = (
    CuratedRow(
        "grid_sample",
        "missing or slow on ROCm",
        SEED_000,
        ops=("nn.functional.grid_sample", "grid_sampler_*", "fade.grid_sample*"),
    ),
    CuratedRow("sparse", "torch.sparse missing or slow on ROCm", SEED_000, ops=("*sparse*",)),
    CuratedRow(
        "attention",
        "flash / memory-efficient SDPA kernels missing, so SDPA runs the O(N^2) math path",
        f"{SEED_000}; {PITFALL_I15}",
        ops=("*attention*", "fade.sdpa_*"),
    ),
    CuratedRow("bf16", "bfloat16 paths missing, emulated or slow on some archs", f"{SEED_000}; {PITFALL_I16}", dtype="bfloat16"),
)

# The op globs that are always swept, whatever --only selects.
ALWAYS_SWEPT = tuple(pattern for row in CURATED for pattern in row.ops)


def curated_rows_for(op_id: str, dtype: str) -> list:
    """The names of the curated rows that cover this op × dtype ([] for most)."""
    return [
        row.name
        for row in CURATED
        if (row.dtype and row.dtype == dtype) or any(fnmatch.fnmatchcase(op_id, pattern) for pattern in row.ops)
    ]


def is_always_swept(op_id: str) -> bool:
    return any(fnmatch.fnmatchcase(op_id, pattern) for pattern in ALWAYS_SWEPT)
