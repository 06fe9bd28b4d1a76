"""prioccl's exception, in a module of its own so that every part of the package can raise it."""


class PriocclError(RuntimeError):
    """A prioccl call failed; the message is the library's (priocclGetLastError)."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code


class ArgumentError(PriocclError, ValueError):
    """A bad argument, caught before the library is called: a ValueError, as Horovod raises for
    one, and a PriocclError, as prioccl's other argument checks."""


PriocclError.__module__ = "prioccl"  # as users import it
ArgumentError.__module__ = "prioccl"
