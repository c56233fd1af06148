"""index(v) of spec §1 with the same work for every value (spec §7.1).

Out-of-domain values report the reserved item ⊥ (index d) instead of being refused: a refusal
would tell whoever can publish a config the device's value. The value's key is computed once,
when the device starts (`DeviceValue`), never in answer to a message; a config's string domain
is sorted once per config (`DomainIndex`, public work) and searched with a fixed number of
steps, so how long a lookup takes does not depend on where (or whether) the value is found.
"""
from array import array

import micropython

from .hash import KEY_SEED, item_key, murmur3
from .sets import KeySet, first_occurrences

EMPTY_KEY = murmur3(b"", 0, KEY_SEED)  # key(⊥) of a string domain: H(b"", KEY_SEED)
SET_CAPACITY = 64  # spec §7.1 default: sets are processed over a fixed capacity


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _key_of(v):
    """(int value or -1, string key or -1) of one item; -1 where `v` is not such an item."""
    if _is_int(v) and 0 <= v <= 0xFFFFFFFF:
        return v, -1
    if isinstance(v, str) and v:
        return -1, item_key(v)
    return -1, -1


class DeviceValue:
    """The device's value prepared at start: for a one-item campaign its int / string key;
    for a set campaign its first `capacity` elements (slots, as the C client reads them):
    each slot's int value, string key and kind (1 int, 2 string, 0 none: no element, not an
    item, or a repeat of an earlier slot), and the KeySet the set-valued work fills in place.
    A longer set is truncated, never refused: a device that refused (or went silent) would
    show that its set is long; truncation is a function of the value that the mechanism then
    perturbs, so the report stays exactly ε-LDP (spec §7.1)."""

    def __init__(self, value, capacity=SET_CAPACITY):
        self.capacity = capacity
        self.slot_ints = array("I", bytes(4 * capacity))
        self.slot_strs = array("I", bytes(4 * capacity))
        self.slot_kinds = bytearray(capacity)
        self.keyset = KeySet(capacity)
        self.load(value)

    def load(self, value):
        """Prepare `value` in place (the same steps for every value): at start, and for a
        live metric (ldp/agent.py) at each fresh report."""
        capacity = self.capacity
        self.int_value, self.str_key = _key_of(value)
        items = (value if isinstance(value, list) else [value])[:capacity]  # the C client's slots
        n = len(items)
        for j in range(capacity):
            iv, sk = _key_of(items[j] if j < n else None)
            self.slot_ints[j] = max(iv, 0)
            self.slot_strs[j] = max(sk, 0)
            self.slot_kinds[j] = (iv >= 0) + 2 * (sk >= 0)
        first_occurrences(self.slot_ints, self.slot_strs, self.slot_kinds, capacity)
        self.single = not isinstance(value, list)


@micropython.viper
def _map_ints(ints: ptr32, kinds: ptr8, d: uint, keys: ptr32, live: ptr8, n: int):
    """Integer domain: keys[j] = the slot's int, live[j] = 1 iff it is an int item < d."""
    j = 0
    while j < n:
        v = uint(ints[j])
        keys[j] = v
        live[j] = int(kinds[j] == 1) & int(v < d)
        j += 1


@micropython.viper
def _map_strs(strs: ptr32, kinds: ptr8, sorted_keys: ptr32, d: int, steps: int, keys: ptr32,
              live: ptr8, n: int):
    """String domain: keys[j] = the slot's string key, live[j] = 1 iff it is one of the d
    item keys (ascending in sorted_keys): `steps` halvings for every slot."""
    j = 0
    while j < n:
        key = uint(strs[j])
        base = 0
        size = d
        k = 0
        while k < steps:
            half = size >> 1
            base += half * int(uint(sorted_keys[base + half]) <= key)
            size -= half
            k += 1
        keys[j] = key
        live[j] = int(kinds[j] == 2) & int(uint(sorted_keys[base]) == key)
        j += 1


class DomainIndex:
    """A config domain's lookup structure: d, key(⊥), and for a string domain its keys sorted
    with their positions. Built once per accepted config."""

    def __init__(self, domain):
        if domain["type"] == "int":
            self.d = domain["size"]
            self.is_str = False
            self.other = self.d
            return
        items = domain["items"]
        self.d = len(items)
        self.is_str = True
        self.other = EMPTY_KEY
        pairs = sorted((item_key(s), i) for i, s in enumerate(items))
        self.keys = array("I", [k for k, _ in pairs])
        self.pos = array("I", [i for _, i in pairs])
        steps = 0
        while (1 << steps) < self.d:
            steps += 1
        self.steps = steps + 1

    def _search(self, key):
        """Position of `key` in the domain, or d: exactly `steps` halvings for every key."""
        keys = self.keys
        base = 0
        size = self.d
        for _ in range(self.steps):
            half = size >> 1
            base += half * (keys[base + half] <= key)
            size -= half
        hit = keys[base] == key
        return self.pos[base] * hit + self.d * (1 - hit)

    def index(self, int_value, str_key):
        """index(v) of spec §1 (⊥ = d), from a DeviceValue's int value / string key."""
        if self.is_str:
            return self._search(str_key)  # -1 matches no key: d
        return int_value if 0 <= int_value < self.d else self.d

    def key(self, index, str_key):
        """The mechanism key of the item at `index`: its key, or key(⊥) for index d."""
        if self.is_str:
            return str_key if index < self.d else self.other
        return index

    def single(self, value):
        """(index, key) of a one-item value (a list given to a one-item campaign is ⊥)."""
        if not value.single:
            return self.d, self.other
        i = self.index(value.int_value, value.str_key)
        return i, self.key(i, value.str_key)

    def set_keys(self, value):
        """The keys of the set's elements that are domain items, in the set's own order
        (spec §1: other elements dropped, repeats count once): `value.keyset` refilled over
        every slot with the same work whatever the set holds (spec §7.1)."""
        ks = value.keyset
        if self.is_str:
            _map_strs(value.slot_strs, value.slot_kinds, self.keys, self.d, self.steps, ks.keys,
                      ks.live, ks.n)
        else:
            _map_ints(value.slot_ints, value.slot_kinds, self.d, ks.keys, ks.live, ks.n)
        return ks
