"""CLI subcommand families, and argument types they share."""
import argparse


def tcp_port(text: str) -> int:
    """argparse type: a TCP port number, 1..65535."""
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError("a port number in 1..65535, got %r" % text)
    return port


def non_negative(text: str) -> int:
    """argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError("an integer >= 0, got %r" % text)
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError("an integer >= 1, got %r" % text)
    return value


def duration(text: str) -> float:
    """argparse type: a finite duration >= 0 (in the option's unit)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError("a finite number >= 0, got %r" % text)
    return value


def host_address(text: str) -> str:
    """argparse type: a host name or address (no spaces or control characters)."""
    if not text or any(c.isspace() or ord(c) < 32 for c in text):
        raise argparse.ArgumentTypeError("a host name or address, got %r" % text)
    return text
