"""CSV cells a spreadsheet shows as text, never runs (OWASP "CSV Injection"): a text cell that
starts with `=`, `+`, `-`, `@`, a tab or a carriage return gets a leading `'`. Numbers are left
alone (a float such as -12.5 is data to a spreadsheet, not a formula). Every CSV the CLI and
the HTTP API write goes through `cell`; `uncell` reads back a file of ours whose values never
start with `'` otherwise (broker-config's credentials.csv)."""

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def cell(value):
    """`value` as a CSV cell: text that a spreadsheet would take for a formula, quoted."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def uncell(text: str) -> str:
    """The value `cell` wrote."""
    if text[:1] == "'" and text[1:2] and text[1:2] in FORMULA_START:
        return text[1:]
    return text
