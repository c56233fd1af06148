"""L-OSUE (spec §3.2 id 17): OUE permanent response (T_oue_p, T_oue_q(ε∞)), SUE instantaneous."""
from .lue import Lue
from .thresholds import T_OUE_P, t_oue_q


class Losue(Lue):
    name = "losue"

    @staticmethod
    def permanent(eps_milli):
        return T_OUE_P, t_oue_q(eps_milli)


MECHANISM = Losue
