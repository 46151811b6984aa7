"""FADE's version, in the one module every library module reads it from (the facade re-exports it)."""

__version__ = "0.1.0"
