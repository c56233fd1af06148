"""L-SUE, RAPPOR's chain (spec §3.2 id 18): SUE permanent response (T_flip(ε∞)), SUE
instantaneous."""
from .lue import Lue
from .thresholds import W, t_flip


class Lsue(Lue):
    name = "lsue"

    @staticmethod
    def permanent(eps_milli):
        t = t_flip(eps_milli)
        return W - t, t


MECHANISM = Lsue
