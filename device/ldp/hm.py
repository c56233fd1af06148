"""Hybrid Mechanism with metric sampling (spec §3.3 id 15; Wang et al., ICDE 2019, §IV-C/D).

k = max(1, min(d, eps_milli // 2500)) of the d metrics per report, each at eps_milli // k: the
metrics by a partial Fisher-Yates shuffle from k words, then per entry (w_c, w0, w1): PM's
window cell if w_c < T_hm, else Duchi's bit (both computed). `value`: the list of the device's
d grid points (an int when d == 1). Nothing chosen depends on the values.
"""
from os import urandom

from .hash import word_bucket
from .numeric import (HM_SAMPLE, check_grid, duchi_bit, duchi_slope, hm_choice_threshold,
                      pm_shape, put_u32, window_cell, window_threshold)
from .errors import ConfigError
from .hash import below
from .report import Report


class Hm(Report):
    name = "hm"

    def __init__(self, eps_milli, domain_size, salt, campaign_id, phase, params):
        check_grid(domain_size)
        d = params.get("metrics", 1)
        if not isinstance(d, int) or isinstance(d, bool) or not 1 <= d <= 64:
            raise ConfigError("phases.params", "metrics must be an integer in [1, 64]")
        k = max(1, min(d, eps_milli // HM_SAMPLE))
        super().__init__(eps_milli, domain_size, salt, campaign_id, phase, 6 * k)
        self.metrics, self.sampled, self.words = d, k, 4 * k
        e = eps_milli // k
        self.slope, self.base = duchi_slope(e, domain_size)
        self.t_choice = hm_choice_threshold(e)
        self.u, self.span, self.width = pm_shape(e, domain_size)
        self.t_in = window_threshold(e, self.width, self.span)
        self.perm = bytearray(d)

    def report(self, value, nonce, rand=urandom):
        xs = [value] if isinstance(value, int) else value
        if len(xs) != self.metrics:
            raise ValueError("hm needs %d grid points" % self.metrics)
        for x in xs:
            if not 0 <= x < self.domain_size:
                raise ValueError("grid point out of the domain")
        k, d, perm, buf = self.sampled, self.metrics, self.perm, self.buf
        w = rand(16 * k)
        for i in range(d):
            perm[i] = i
        for i in range(k):
            r = i + word_bucket(w, i, d - i)
            perm[i], perm[r] = perm[r], perm[i]
        for i in range(k):
            a = perm[i]
            x = xs[a]
            at = k + 3 * i
            kind = below(w, at, self.t_choice)
            bit = duchi_bit(w, at + 1, self.base, self.slope, x)
            cell = window_cell(w, at + 1, self.u * x, self.t_in, self.width, self.span)
            o = 12 + 6 * i
            buf[o] = a
            buf[o + 1] = kind
            put_u32(buf, o + 2, bit + kind * (cell - bit))
        return self._finish(nonce)


MECHANISM = Hm
