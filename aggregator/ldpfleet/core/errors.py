"""Typed errors. Each carries the offending field so callers can count rejections by reason;
`ldpfleet.cli.EXIT_CODES` maps them to exit codes (one table)."""


class LdpError(Exception):
    """Base class of ldpfleet's own errors: `field` names what is wrong."""

    def __init__(self, field, message):
        super().__init__("%s: %s" % (field, message))
        self.field = field


class ReportFormatError(LdpError, ValueError):
    """A report does not match the protocol (wrong size, version, range ...)."""


class SketchMismatch(LdpError, ValueError):
    """Two sketches cannot be merged (different mechanism, parameters or seeds)."""


class ConfigError(LdpError, ValueError):
    """A campaign config or phase-2 message is malformed, unsigned or badly signed."""


class UsageError(LdpError, ValueError):
    """A command-line argument, or a combination of them, is wrong: `field` names the option."""


class StateError(LdpError, ValueError):
    """The state file or database cannot be used (missing, corrupt, newer schema, unreachable):
    the operator's environment, not the input of one command."""


class BudgetExceeded(LdpError):
    """A report would exceed the per-report epsilon cap or the lifetime budget."""


class LoginTakenOver(LdpError, ConnectionError):
    """The broker closed our connection for another one with the same login (or client id):
    two processes share one login where the broker allows one connection per login."""


class DataFileError(LdpError, ValueError):
    """A user-supplied data file (`simulate --data`) is malformed: `field` is what is wrong
    ("header", "row", "device", "item", "duplicate"), the message names the file and line."""

    def __init__(self, field, message, path=None, line=None):
        where = "" if path is None else ("%s line %d: " % (path, line) if line else "%s: " % path)
        super().__init__(field, where + message)
        self.path, self.line = path, line
