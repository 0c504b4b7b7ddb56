"""spanpoint's version: the one copy (the face, instrumentation scopes, the CLI)."""

__version__ = "0.1.0"
