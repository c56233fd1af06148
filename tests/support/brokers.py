"""A private Mosquitto on a free loopback port, stopped by its PID (never the shared one): the
product's `EmbeddedBroker` (sized queues, persistence in its own directory)."""
from ldpfleet.broker.embedded import EmbeddedBroker, free_port  # noqa: F401  (free_port: for the tests)


class PrivateMosquitto(EmbeddedBroker):
    """Start with `start()` (or `with`); `stop(sig=...)` signals by PID; `restart()` keeps the
    port (and, with persistence on, the broker's queued messages); leaving `with` removes its
    directory."""

    def __init__(self, extra_conf: str = "", port: int = None, persistence: bool = True,
                 stock: bool = False):
        """`stock`: Mosquitto's default queue limits (max_queued_messages 1000, ...), as a
        packaged broker runs, instead of the sized queues."""
        super().__init__(port=port, persistence=persistence, extra_conf=extra_conf,
                         queue_limits=not stock)

    def stop(self, sig=None, timeout: float = 10.0):
        return super().stop(timeout) if sig is None else super().stop(timeout, sig)
