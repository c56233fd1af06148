# Generated from protocol_spec/v2/registry.json by `python tools/gen_tables.py`: do not edit.
"""Mechanism tables of protocol_spec/v2/registry.json (ids, modules, families)."""

PROTOCOL_VERSION = 2

MECHANISM_IDS = {
    "grr": 1,
    "olh": 2,
    "flh": 3,
    "oue": 4,
    "cms": 5,
    "hcms": 6,
    "sh": 7,
    "srappor": 8,
    "lcm": 9,
    "psgrr": 10,
    "psolh": 11,
    "shc": 12,
    "duchi": 13,
    "pm": 14,
    "hm": 15,
    "sw": 16,
    "losue": 17,
    "lsue": 18,
    "lgrr": 19,
    "loloha": 20,
    "lbitmean": 21,
    "pem": 22,
}
"""Registry id of each mechanism (the report header's `mechanism` byte)."""
MECHANISM_NAMES = {i: n for n, i in MECHANISM_IDS.items()}

MODULES = {
    "grr": "grr",
    "olh": "olh",
    "flh": "flh",
    "oue": "oue",
    "cms": "cms",
    "hcms": "hcms",
    "sh": "sh",
    "srappor": "srappor",
    "lcm": "lcm",
    "psgrr": "psfo",
    "psolh": "psfo",
    "shc": "shc",
    "duchi": "duchi",
    "pm": "pm",
    "hm": "hm",
    "sw": "sw",
    "losue": "lue",
    "lsue": "lue",
    "lgrr": "lgrr",
    "loloha": "loloha",
    "lbitmean": "lbitmean",
    "pem": "pem",
}
"""The module of `ldpfleet.core.mechanisms` that implements each mechanism."""

ERRORS = ("size", "version", "mechanism", "phase", "flags", "campaign_id", "round", "y",
          "seed_index", "j", "l", "sign", "t", "padding", "kind", "attr")
"""ReportFormatError fields, the header's in its checking order (spec §3)."""

SET_VALUED = ("sh", "srappor", "psgrr", "psolh", "shc")
"""The value is a set of items."""

NUMERIC = ("duchi", "pm", "hm", "sw")
"""Numeric domains, spec §1.1 and §3.3."""

LONGITUDINAL = ("losue", "lsue", "lgrr", "loloha", "lbitmean")
"""Memoised, spec §3.2."""

BY_INDEX = ("grr", "oue", "losue", "lsue", "lgrr")
"""Takes the item's domain index, not its key."""

LISTED = ("srappor", "psgrr", "psolh")
"""Phase 2 takes the candidate list as its items."""
