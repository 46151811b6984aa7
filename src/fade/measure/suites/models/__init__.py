"""The model bench: suite.py decides which (network, mode, variant) cases a request means and runs them;
case.py is one case in the worker."""
