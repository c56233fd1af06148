"""Mechanism factory: one small module per mechanism, imported on first use."""
from .errors import ConfigError

# --- generated: python tools/gen_tables.py ---
NAMES = ("grr", "olh", "flh", "oue", "cms", "hcms", "sh", "srappor", "lcm", "psgrr", "psolh",
         "shc", "duchi", "pm", "hm", "sw", "losue", "lsue", "lgrr", "loloha", "lbitmean", "pem")
SET_VALUED = ("sh", "srappor", "psgrr", "psolh", "shc")  # the value is a set of items
NUMERIC = ("duchi", "pm", "hm", "sw")  # numeric domains, spec §1.1 and §3.3
LONGITUDINAL = ("losue", "lsue", "lgrr", "loloha", "lbitmean")  # memoised, spec §3.2
BY_INDEX = ("grr", "oue", "losue", "lsue", "lgrr")  # takes the item's domain index, not its key
LISTED = ("srappor", "psgrr", "psolh")  # phase 2 takes the candidate list as its items
# --- end generated ---


def make(name, eps_milli, domain_size, salt, campaign_id, phase, params):
    """The device-side mechanism object a config phase prescribes (ConfigError if the
    mechanism is unknown or its parameters are invalid)."""
    if name not in NAMES:
        raise ConfigError("phases.mechanism", "unknown mechanism %r" % (name,))
    module = __import__("ldp." + name, None, None, ("MECHANISM",))
    return module.MECHANISM(eps_milli, domain_size, salt, campaign_id, phase, params)
