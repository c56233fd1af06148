"""The tuning of a two-phase protocol: one object, one set of defaults and one set of CLI
flags for `campaign create --protocol` and `simulate --protocol`.

LDPMiner (Qin et al., "Heavy Hitter Estimation over Set-Valued Data with Local Differential
Privacy", CCS 2016): `set_size` l, `top` k, `k_max` candidates (default 2k, §4.1),
`budget_split` phase 1's share of ε (default 0.5, §5.1.2), `sketch_m` the SH projection rows
m (default `ldpminer.DEFAULT_M`). LDPLCM (Zhang, Lin, Yin): `sample_rate` r, `theta`,
`sketch_k`/`sketch_m` the CMS (k, m); defaults are its §5 Zipf setting.
"""
import math
from dataclasses import dataclass, fields

from ..errors import ConfigError
from .ldplcm import DEFAULT_SAMPLE_RATE, DEFAULT_SKETCH_K, DEFAULT_SKETCH_M, DEFAULT_THETA
from .ldpminer import DEFAULT_M, DEFAULT_SHARE

def check_share(value, field: str) -> float:
    """A number in (0, 1), or ConfigError naming `field`."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(field, "%s must be a number in (0, 1), got %r"
                          % (field.replace("_", " "), value)) from None
    if not (math.isfinite(v) and 0.0 < v < 1.0):
        raise ConfigError(field, "%s must be in (0, 1), got %r" % (field.replace("_", " "), value))
    return v


def check_positive(value, field: str) -> int:
    """A positive integer, or ConfigError naming `field`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(field, "must be a positive integer, got %r" % (value,))
    return value


@dataclass
class ProtocolOptions:
    """What a user may set for a protocol; None means the protocol's default."""

    set_size: int = None
    top: int = None
    k_max: int = None
    budget_split: float = None
    sample_rate: float = None
    theta: float = None
    sketch_k: int = None
    sketch_m: int = None
    fleet_size: int = None
    alphabet: str = None

    LDPLCM_ONLY = ("sample_rate", "theta", "sketch_k")
    LDPMINER_ONLY = ("set_size", "top", "k_max", "budget_split")

    @classmethod
    def from_args(cls, args) -> "ProtocolOptions":
        return cls(**{f.name: getattr(args, f.name, None) for f in fields(cls)})

    def given(self) -> list:
        """Names of the options that were set."""
        return [f.name for f in fields(self) if getattr(self, f.name) is not None]

    def refuse(self, names, protocol: str, why: str = ""):
        """ConfigError for the first of `names` that was set (not a parameter of `protocol`)."""
        for name in names:
            if getattr(self, name) is not None:
                raise ConfigError(name, "not a parameter of %s%s" % (protocol, why))

    def ldplcm(self) -> tuple:
        """(sample_rate, theta, sketch_k, sketch_m), checked, defaults filled in."""
        rate = DEFAULT_SAMPLE_RATE if self.sample_rate is None else check_share(self.sample_rate,
                                                                                "sample_rate")
        theta = DEFAULT_THETA if self.theta is None else check_share(self.theta, "theta")
        k = DEFAULT_SKETCH_K if self.sketch_k is None else check_positive(self.sketch_k, "sketch_k")
        m = DEFAULT_SKETCH_M if self.sketch_m is None else check_positive(self.sketch_m, "sketch_m")
        return rate, theta, k, m

    def ldpminer_share(self) -> float:
        return DEFAULT_SHARE if self.budget_split is None else check_share(self.budget_split,
                                                                            "budget_split")

    def ldpminer_m(self) -> int:
        return DEFAULT_M if self.sketch_m is None else check_positive(self.sketch_m, "sketch_m")


def add_protocol_arguments(parser, int_type=int, who: str = "devices"):
    """The protocol flags (all but --set-size, whose meaning differs between commands)."""
    parser.add_argument("--top", type=int_type, default=None, metavar="K",
                        help="LDPMiner: k heavy hitters")
    parser.add_argument("--k-max", type=int_type, default=None,
                        help="LDPMiner: phase-2 candidates (default 2k, at most the domain size)")
    parser.add_argument("--budget-split", type=float, default=None,
                        help="LDPMiner: phase 1's share of epsilon (default %g)" % DEFAULT_SHARE)
    parser.add_argument("--sample-rate", type=float, default=None, metavar="R",
                        help="LDPLCM: share of %s in phase 1 (default %g)" % (who, DEFAULT_SAMPLE_RATE))
    parser.add_argument("--theta", type=float, default=None, metavar="T",
                        help="LDPLCM: mass share of the high-frequent items (default %g)"
                             % DEFAULT_THETA)
    parser.add_argument("--sketch-k", type=int_type, default=None,
                        help="LDPLCM (and cms/hcms in simulate): sketch rows k (default %d)"
                             % DEFAULT_SKETCH_K)
    parser.add_argument("--alphabet", default=None, metavar="CHARS",
                        help="PEM (strings domains): the characters the strings are made of, "
                             "public; the aggregator then extends prefixes with only these "
                             "(devices are unchanged; default: any byte)")
    parser.add_argument("--sketch-m", type=int_type, default=None,
                        help="LDPLCM: sketch width m (default %d); LDPMiner: SH rows m (default "
                             "%d)" % (DEFAULT_SKETCH_M, DEFAULT_M))
