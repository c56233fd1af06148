"""How items are written for a terminal (estimate, campaign status): one rule."""


def shown(item, width: int = None) -> str:
    """An item as text: characters that do not print (a newline inside a string nobody
    listed, spec §3.5) escaped as Python writes them, cut to `width`."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(item))
    return text if width is None else text[:width]
