"""The test-only "OS randomness" of MicroPython driver scripts: xorshift32 words as little-endian
bytes, the C client's LDPC_TEST_RANDOM_SEED stream. `STREAM_SOURCE` is MicroPython source that
driver scripts paste in (each runs as one file on the interpreter)."""

STREAM_SOURCE = r'''
class Stream:
    """xorshift32 words, little-endian bytes (the C client's LDPC_TEST_RANDOM_SEED stream)."""
    def __init__(self, seed):
        self.s = seed | 1

    def __call__(self, n):
        out = bytearray(n)
        for i in range(0, n, 4):
            s = self.s
            s ^= (s << 13) & 0xFFFFFFFF
            s ^= s >> 17
            s ^= (s << 5) & 0xFFFFFFFF
            self.s = s
            for j in range(min(4, n - i)):
                out[i + j] = (s >> (8 * j)) & 0xFF
        return bytes(out)
'''
