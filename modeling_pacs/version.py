"""The version of pacs-pp, in a module of its own: the package root and the signatures (`signatures.py`) read it
without importing each other."""

__version__ = "0.1.0"
