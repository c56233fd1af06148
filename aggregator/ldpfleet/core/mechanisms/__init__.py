"""Mechanism registry: one small module per mechanism (protocol_spec/v2 §3)."""
import importlib

MODULES = {
    "grr": "grr", "olh": "olh", "flh": "flh", "oue": "oue", "cms": "cms",
    "hcms": "hcms", "sh": "sh", "srappor": "srappor", "lcm": "lcm",
    "psgrr": "psfo", "psolh": "psfo", "shc": "shc",
    "duchi": "duchi", "pm": "pm", "hm": "hm", "sw": "sw",
}
MODULES.update({"losue": "lue", "lsue": "lue", "lgrr": "lgrr", "loloha": "loloha",
                "lbitmean": "lbitmean"})  # longitudinal (memoised) mechanisms, spec §3.2


def mechanism_class(name: str):
    if name not in MODULES:
        raise ValueError("unknown mechanism %r (known: %s)" % (name, ", ".join(sorted(MODULES))))
    module = importlib.import_module("." + MODULES[name], __name__)
    return getattr(module, "MECHANISMS", {}).get(name, module.MECHANISM)


def make_mechanism(name: str, eps_milli: int, domain_size: int, **kw):
    """Build a mechanism; parameters not given get the module's defaults."""
    return mechanism_class(name)(eps_milli, domain_size, **kw)


def mechanism_from_description(desc: dict):
    return make_mechanism(desc["mechanism"], desc["eps_milli"], desc["domain_size"],
                          salt=desc["salt"], campaign_id=desc["campaign_id"], phase=desc["phase"],
                          **desc["params"])
