"""Mechanism registry: one small module per mechanism (protocol_spec/v2 §3)."""
import importlib

from ..errors import ConfigError
from ..mechanism_table import MODULES  # generated from registry.json (tools/gen_tables.py)


def mechanism_class(name: str):
    if name not in MODULES:
        raise ConfigError("mechanism", "unknown mechanism %r (known: %s)"
                          % (name, ", ".join(sorted(MODULES))))
    module = importlib.import_module("." + MODULES[name], __name__)
    return getattr(module, "MECHANISMS", {}).get(name, module.MECHANISM)


def make_mechanism(name: str, eps_milli: int, domain_size: int, **kw):
    """Build a mechanism; parameters not given get the module's defaults."""
    return mechanism_class(name)(eps_milli, domain_size, **kw)


def mechanism_from_description(desc: dict):
    return make_mechanism(desc["mechanism"], desc["eps_milli"], desc["domain_size"],
                          salt=desc["salt"], campaign_id=desc["campaign_id"], phase=desc["phase"],
                          **desc["params"])
