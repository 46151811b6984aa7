"""The LLM inference bench (`fade bench llm`, docs/llm.md): suite.py decides which prefill and decode cases a
request means and runs them; case.py is one case in the worker; generation.py builds the model and holds the
variants' generate loops (fade-loop among them)."""
