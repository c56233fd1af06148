"""A `rand(nbytes)` over a fixed list of random words, for the MicroPython test drivers.

Production code draws from os.urandom; tests inject this through the mechanisms' one `rand`
parameter so the shared vectors are reproducible.
"""
import struct


class WordSource:
    """`rand(nbytes)` over a fixed word list, consumed in order."""

    def __init__(self, words):
        self.data = struct.pack("<%dI" % len(words), *words)
        self.pos = 0

    def __call__(self, n):
        if self.pos + n > len(self.data):
            raise ValueError("mechanism asked for more random words than were given")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out
