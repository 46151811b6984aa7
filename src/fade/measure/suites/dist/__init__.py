"""`fade bench dist`: collectives and data-parallel scaling through torch.distributed, on the ranks of the
user's launcher or of torchrun started here (suite.py plans, launch.py starts and watches, rank.py runs,
collectives.py and scaling.py measure)."""
