"""Pure analysis of an OpInfo sweep (no torch): outcome classes, op families, the curated list, the rows of a
results file, and the gap between two sweeps."""
