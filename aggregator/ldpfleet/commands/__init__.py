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
