"""PEM phase 1 over a `strings` domain (spec §3.5, id 22): FLH (spec §3 id 3) over key_λ, the
key of the prefix of λ = levels[group] bits of the value's code, the group the device id's
public bucket.

Wang, Li, Jha et al., "Locally differentially private heavy hitter identification", IEEE TDSC
2019, §4; the oracle is FLH (Cormode, Maddock, Maple, "Frequency estimation under local
differential privacy", VLDB 2021, §4.2): seed_index = bucket(w0, k'), seed = (salt +
seed_index) mod 2^32, v = bucket(Hs(key_λ, seed), g), GRR over g with w1, w2.

`report(value, nonce, rand)` takes {"device": id, "value": v}: the group (public, cached per
id), the code (strings.Code: max_len slots whatever v is), key_λ into an array slot and its
bucket read from the slot (never boxed), then FLH's steps.
"""
import struct
from os import urandom

from .errors import ConfigError
from .hash import below, word_bucket
from .report import Report, param
from .pemcode import Code, check_levels, group_of
from .thresholds import t_grr


class Pem(Report):
    name = "pem"
    words = 3

    def __init__(self, eps_milli, domain_size, salt, campaign_id, phase, params):
        super().__init__(eps_milli, domain_size, salt, campaign_id, phase, 6)
        self.g = param(params, "g", 2, 65536)
        self.kp = param(params, "kp", 1, 65536)
        levels = params.get("levels")
        if not isinstance(levels, list) or not levels or not isinstance(levels[-1], int) \
                or levels[-1] % 8 or not 8 <= levels[-1] <= 512:
            raise ConfigError("params.levels", "levels must end at 8 * max_len")
        self.levels = check_levels(levels, levels[-1] // 8)
        self.max_len = levels[-1] // 8
        self.t_keep = t_grr(eps_milli, self.g)
        self.code = Code(self.max_len)
        self._group_of = None  # (device id, group): the id is public, its group too

    def group(self, device):
        held = self._group_of
        if held is None or held[0] != device:
            held = self._group_of = (device, group_of(device, self.salt, len(self.levels)))
        return held[1]

    def report(self, value, nonce, rand=urandom):
        bits = self.levels[self.group(value["device"])]
        w = rand(12)
        g = self.g
        idx = word_bucket(w, 0, self.kp)
        y = self.code.fill(value["value"]).prefix_key(bits, self.salt, idx, g)
        if not below(w, 1, self.t_keep):
            r = word_bucket(w, 2, g - 1)
            y = r + (r >= y)
        struct.pack_into("<IH", self.buf, 12, idx, y)
        return self._finish(nonce)


MECHANISM = Pem
