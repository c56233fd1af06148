"""Typed errors of the device client; each carries the offending field."""


class LdpError(Exception):
    def __init__(self, field, message):
        super().__init__("%s: %s" % (field, message))
        self.field = field
        self.message = message


class ConfigError(LdpError):
    """A config or phase-2 message is refused (unsigned, bad signature, malformed ...)."""


class BudgetExceeded(LdpError):
    """A report would exceed the device's per-report ε cap or its lifetime budget."""


class LedgerCorrupt(LdpError):
    """No valid ledger generation can be read back: the device stops rather than reset its
    budget."""


class LedgerMissing(LdpError):
    """No ledger at all on a provisioned device: it stops rather than start from zero."""
