"""LDPLCM phase 2, the learned count-mean sketch (spec §3 id 9; Zhang, Lin, Yin,
"Local Differentially Private Frequency Estimation based on Learned Sketches", Alg. 2).

A low-frequent item is reported exactly as CMS; a high-frequent one (the model says
g(d) >= P) sends the all -1 vector; the same row draw and bit flips either way. `value` is
{"key": key, "high": bool}; the caller makes the high/low decision for now.
"""
from os import urandom

from .cms import Cms


class Lcm(Cms):
    name = "lcm"

    def report(self, value, nonce, rand=urandom):
        return self._sketch(value["key"], nonce, rand, not value["high"])


MECHANISM = Lcm
