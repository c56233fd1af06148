"""`ldpfleet plan --domain strings:max_len=L --epsilon E --users N [--alphabet A]`: what a PEM
campaign over strings nobody listed (spec §3.5) would use and how small a string's share can be
and still be found — the public parameters `campaign create` writes (PemPlan.for_fleet: Wang,
Li, Jha et al., "Locally differentially private heavy hitter identification", TDSC 2019 §4-§5)
and each level's noise from FLH's variance (Cormode, Maddock, Maple, VLDB 2021 §4.2)."""
import json
import math

from ..core import protocol
from ..core.mechanisms import make_mechanism
from ..core.mechanisms.olh import default_g
from ..core.protocols import pem as pem_protocol

Z_FOUND = 3.0
"""A string a level keeps reliably stands this many standard deviations above zero there (about
the 1/extensions noise quantile of a level's empty candidates, rounded up)."""


def plan_strings(eps: float, max_len: int, users: int, alphabet: str = None, top: int = 10,
                 phase1_share: float = None) -> dict:
    from ..service.campaigns.pem_campaign import DEFAULT_PHASE1_SHARE, default_k_max
    share = DEFAULT_PHASE1_SHARE if phase1_share is None else phase1_share
    eps_milli = protocol.eps_to_milli(eps)
    k_max = default_k_max(top)
    n1 = int(round(users * share))
    plan = pem_protocol.PemPlan.for_fleet(n1, eps_milli, max_len, alphabet=alphabet, top=k_max)
    g = plan.g or default_g(eps_milli)
    levels = plan.level_bits()
    per_group = n1 / len(levels)
    # FLH over one group: OLH's q(1-q)/(p-q)^2 per report (the public-seed collision term is
    # held below a quarter of it by for_fleet's k')
    p, q = protocol.t_grr(eps_milli, g) / protocol.WORD, 1.0 / g
    sd1 = math.sqrt(q * (1 - q) / (p - q) ** 2 / max(1.0, per_group))
    n2 = users - n1
    sd2 = math.sqrt(make_mechanism("grr", eps_milli, k_max + 1).variance(max(1, n2)))
    return {"eps": eps, "max_len": max_len, "users": users, "alphabet": alphabet,
            "levels_bits": levels, "levels_chars": [b // 8 for b in levels],
            "g": g, "kp": plan.kp, "keep": plan.keep, "k_max": k_max,
            "phase1_devices": n1, "devices_per_group": per_group,
            "level_sd": sd1, "findable_share": Z_FOUND * sd1,
            "phase2_devices": n2, "phase2_sd": sd2, "phase2_half_width_95": 1.959964 * sd2}


def run_strings(args, max_len: int) -> int:
    r = plan_strings(args.epsilon, max_len, args.users, alphabet=args.alphabet,
                     top=args.top or 10)
    if args.json:
        print(json.dumps(r, indent=1))
        return 0
    print("PEM over strings of up to %d bytes (spec §3.5), eps %g, %d devices%s"
          % (max_len, args.epsilon, args.users,
             "" if not args.alphabet else ", alphabet of %d characters" % len(set(args.alphabet))))
    print("  phase 1: %d devices in %d public groups (%.0f each), prefixes of %s characters; "
          "FLH g = %d, k' = %d; %d prefixes kept a level"
          % (r["phase1_devices"], len(r["levels_bits"]), r["devices_per_group"],
             "/".join(str(c) for c in r["levels_chars"]), r["g"], r["kp"], r["keep"]))
    print("  a level's noise: sd %.4f of a group; a string is found reliably from about %.3f of "
          "the fleet (%.0f sd)" % (r["level_sd"], r["findable_share"], Z_FOUND))
    print("  phase 2: %d devices validate the %d best candidates: each estimate +- %.4f (95 %%)"
          % (r["phase2_devices"], r["k_max"], r["phase2_half_width_95"]))
    return 0
