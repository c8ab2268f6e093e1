"""Typed errors of the library (placeholder until the errors branch lands)."""


class PacsError(Exception):
    """Base of the package's errors."""


class InputError(PacsError, ValueError):
    """Bad user input."""


class UnsupportedOptionError(InputError, TypeError):
    """A metric was asked for a score option it does not declare."""


class UnknownModelError(InputError):
    """A model name that is no alias, path or Hub id."""
