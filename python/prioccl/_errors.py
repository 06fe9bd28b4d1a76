"""prioccl's exception, in a module of its own so that every part of the package can raise it."""


class PriocclError(RuntimeError):
    """A prioccl call failed; the message is the library's (priocclGetLastError)."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code


PriocclError.__module__ = "prioccl"  # as users import it
