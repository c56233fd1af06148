"""Bit-vector perturbation shared by CMS, LDPLCM, OUE and sampling RAPPOR (spec §3).

Long bitmaps consume one random word per bit; words are drawn from `rand` in chunks of
CHUNK_WORDS so the buffer stays small (a 1024-bit CMS needs 4 KB of words in total, but
never more than 256 bytes at once). The words are consumed exactly in the spec's order.
"""
from .hash import flip_bits
from .report import CHUNK_WORDS


class Words:
    """Sequential reader of `total` random words drawn from `rand` chunk by chunk."""

    def __init__(self, rand, total):
        self.rand = rand
        self.left = total
        self.buf = b""
        self.pos = 0

    def _refill(self):
        count = min(self.left, CHUNK_WORDS)
        if count <= 0:
            raise ValueError("more random words consumed than the mechanism declares")
        self.buf = self.rand(4 * count)
        self.left -= count
        self.pos = 0

    def one(self):
        """(buffer, index) of the next word."""
        if self.pos >= len(self.buf) >> 2:
            self._refill()
        self.pos += 1
        return self.buf, self.pos - 1

    def flip(self, out, off, first, nbits, t):
        """Toggle bit first + b of the bitmap at out[off:] iff the next word < t, for
        b = 0..nbits-1."""
        bit = 0
        while bit < nbits:
            if self.pos >= len(self.buf) >> 2:
                self._refill()
            n = min((len(self.buf) >> 2) - self.pos, nbits - bit)
            flip_bits(out, off, first + bit, n, self.buf, self.pos, t)
            self.pos += n
            bit += n
