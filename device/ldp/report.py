"""The 12-byte report header (spec §3) and the buffer every mechanism fills in place."""
import struct
from micropython import const

from .errors import ConfigError

VERSION = const(2)
# Registry ids (spec §3): the k-th name has id k (one string: a dict or tuple of the names
# interns each of them and costs a 16k-heap board up to ~900 bytes; split at construction only).
# --- generated: python tools/gen_tables.py ---
MECHANISMS = ("grr olh flh oue cms hcms sh srappor lcm psgrr psolh shc duchi pm hm sw "
              "losue lsue lgrr loloha lbitmean pem")
# --- end generated ---


def mechanism_id(name):
    """The registry id of a mechanism name (ValueError if unknown)."""
    return MECHANISMS.split().index(name) + 1


HEADER_SIZE = const(12)
CHUNK_WORDS = const(64)  # random words drawn per os.urandom call by the long-bitmap mechanisms


ACK_SIZE = const(12)
ACK_KIND = const(0x41)


def ack_matches(ack, report):
    """Spec §6: `ack` (received on the device's own ack topic) names `report`: 12 bytes,
    version 2, kind "A", the report's phase, campaign_id and nonce."""
    return (len(ack) == ACK_SIZE and len(report) >= HEADER_SIZE and ack[0] == VERSION
            and ack[1] == ACK_KIND and ack[2] == report[2] and ack[4:12] == report[4:12])


def param(params, name, lo, hi):
    """Integer parameter `name` of a phase entry, lo <= value <= hi, else ConfigError."""
    v = params.get(name)
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise ConfigError("phases.params", "%s must be an integer in [%d, %d]" % (name, lo, hi))
    return v


class Report:
    """A mechanism of one campaign phase: owns the report buffer (header + body).

    Subclasses set `name`, `words` (random words R per report) and implement
    `report(value, nonce, rand)`, which fills `self.buf` and returns a bytes copy; `nonce` is
    the header's dedupe field (spec §3: drawn from the OS RNG once per campaign phase).
    """

    name = ""
    words = 0

    def __init__(self, eps_milli, domain_size, salt, campaign_id, phase, body_size):
        self.eps_milli = eps_milli
        self.domain_size = domain_size
        self.salt = salt
        self.campaign_id = campaign_id
        self.phase = phase
        self.buf = bytearray(HEADER_SIZE + body_size)
        struct.pack_into("<BBBBI", self.buf, 0, VERSION, mechanism_id(self.name), phase, 0,
                         campaign_id)

    @property
    def report_size(self):
        return len(self.buf)

    def _finish(self, nonce):
        struct.pack_into("<I", self.buf, 8, nonce)
        return bytes(self.buf)
