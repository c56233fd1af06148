"""Mechanism factory: one small module per mechanism, imported on first use."""
from .errors import ConfigError

NAMES = ("grr", "olh", "flh", "oue", "cms", "hcms", "sh", "srappor", "lcm", "psgrr", "psolh",
         "shc", "duchi", "pm", "hm", "sw", "losue", "lsue", "lgrr", "loloha", "lbitmean")
SET_VALUED = ("sh", "srappor", "psgrr", "psolh", "shc")
LISTED = ("srappor", "psgrr", "psolh")  # phase 2 takes the candidate list as its items
BY_INDEX = ("grr", "oue", "losue", "lsue", "lgrr")  # these take the item's domain index, the others its key
LONGITUDINAL = ("losue", "lsue", "lgrr", "loloha", "lbitmean")  # memoised, spec §3.2


def make(name, eps_milli, domain_size, salt, campaign_id, phase, params):
    """The device-side mechanism object a config phase prescribes (ConfigError if the
    mechanism is unknown or its parameters are invalid)."""
    if name not in NAMES:
        raise ConfigError("phases.mechanism", "unknown mechanism %r" % (name,))
    module = __import__("ldp." + name, None, None, ("MECHANISM",))
    return module.MECHANISM(eps_milli, domain_size, salt, campaign_id, phase, params)
