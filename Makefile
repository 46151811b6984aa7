# make run   install, then `fade doctor` and a quick benchmark on whatever device is here
# make test  install the test dependencies, then run the test suite
# make clean remove what install and test made (.venv, *.egg-info, build/, caches); never results/
PYTHON ?= python3
VENV ?= .venv
# Used only when no torch is importable. A ROCm or CUDA torch that is already installed is kept:
# the venv sees the system site-packages, and torch>=2.4 is satisfied by any variant.
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python

.PHONY: run test install clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[test]"
	touch $@

install: $(VENV)/.installed

run: install
	$(VENV)/bin/fade doctor
	$(VENV)/bin/fade bench micro --quick -o results/micro-quick.jsonl

test: install
	$(PY) -m pytest

# Only what install and test made. Never results/: it holds tracked evidence (docs/results.md).
clean:
	rm -rf $(VENV) build .pytest_cache .hypothesis
	find . -name '*.egg-info' -prune -not -path './.git/*' -exec rm -rf {} +
	find . -name __pycache__ -type d -prune -not -path './.git/*' -exec rm -rf {} +
