"""PEM's phase 1 over a `strings` domain (protocol_spec/v2 §3.5, id 22): FLH over the key of a
prefix of the value's code, the prefix length set by the device's public group.

Wang, Li, Jha et al., "Locally differentially private heavy hitter identification" (IEEE TDSC
2019) §4 (prefix extending); the frequency oracle is FLH (Cormode, Maddock, Maple, "Frequency
estimation under local differential privacy", VLDB 2021, §4.2), so a report is exactly `flh`'s
body over `key_λ` and its privacy is `flh`'s channel whatever the key (tests enumerate it).

Device face (`report_for`, `reference_report`): the code of the value (strings_domain.code_of),
the group of the device id (strings_domain.group_of), λ = levels[group], key_λ
(strings_domain.prefix_key), then FLH with words w0 (seed index), w1, w2 (GRR over g). A
report vector's `value` is `{"device": id, "value": v}`: the report depends on both.

Aggregator face (`PemSketch`): one FLH table of kp x g counts per group (G x kp x g int64),
folded per group by the shipped FLH count kernel, merged by addition; `estimate(group, keys)`
is FLH's support estimator over any candidate keys (C `ldp_flh_support`, O(kp) hashes per key).
"""
import numpy as np

from .. import kernels, protocol, strings_domain
from ..errors import ConfigError, SketchMismatch
from .base import IntParam, Sketch, body_ptr, body_u16, body_u32, contiguous_bodies
from .domain import u32_keys
from .flh import TABLE_MAX, FlhMechanism
from .olh import G_PARAM, item_spans

KP_DEFAULT = 1024
"""Public seeds when a campaign does not say: the table of a group is kp x g counts, and FLH's
collision term (flh.py) is 1/((g-1) kp) of sum f^2, negligible next to PEM's noise."""


class LevelsParam:
    """`levels`: a list of prefix lengths in bits (strings_domain.check_levels); no default."""

    def value(self, name: str, given, eps_milli: int) -> list:
        if given is None:
            raise ConfigError("params.levels", "pem needs its levels (spec §3.5)")
        levels = [int(b) for b in given] if isinstance(given, (list, tuple)) else given
        if not isinstance(levels, list) or not levels or levels[-1] % 8 \
                or not 8 <= levels[-1] <= 8 * strings_domain.MAX_LEN:
            raise ConfigError("params.levels", "levels must end at 8 * max_len, got %r" % (given,))
        return strings_domain.check_levels(levels, levels[-1] // 8)


class PemMechanism(FlhMechanism):
    """PEM phase 1 (params: g, kp, levels); max_len = levels[-1] / 8."""

    name = "pem"
    PARAMS = {"g": G_PARAM, "kp": IntParam(KP_DEFAULT, 1, strings_domain.KP_MAX),
              "levels": LevelsParam()}
    estimate_dependence = "any"

    def __init__(self, eps_milli: int, domain_size: int, **kw):
        super().__init__(eps_milli, domain_size, **kw)
        self.max_len = self.levels[-1] // 8
        if self.groups * self.kp * self.g > TABLE_MAX:
            raise ConfigError("params.kp", "G x kp x g = %d cells exceeds the table limit %d"
                              % (self.groups * self.kp * self.g, TABLE_MAX))

    @property
    def groups(self) -> int:
        return len(self.levels)

    # --- device face ---------------------------------------------------------------------
    def group(self, device: str) -> int:
        return strings_domain.group_of(device, self.salt, self.groups)

    def groups_of(self, devices) -> np.ndarray:
        """`group` of many device ids (one C call, ldp_pem_groups)."""
        raw = [d.encode("utf-8") for d in devices]
        length = np.fromiter((len(b) for b in raw), np.int64, len(raw))
        off = np.zeros(len(raw), np.int64)
        if len(raw) > 1:
            off[1:] = np.cumsum(length)[:-1]
        data = np.frombuffer(b"".join(raw) or b"\0", np.uint8)
        return self.groups_of_spans(data, off, length)

    def groups_of_spans(self, data: np.ndarray, off, length) -> np.ndarray:
        """Groups of the device ids data[off[i]:off[i] + length[i]] (a batch's topics, spec
        §3.5), one C call."""
        off = np.ascontiguousarray(off, np.int64)
        length = np.ascontiguousarray(length, np.int64)
        out = np.zeros(off.size, np.int64)
        if off.size and kernels.lib.ldp_pem_groups(
                kernels.byte_ptr(np.ascontiguousarray(data, np.uint8)), kernels.ptr(off),
                kernels.ptr(length), off.size, (self.salt + 1) % protocol.WORD, self.groups,
                kernels.ptr(out)) != 0:
            raise ValueError("ldp_pem_groups rejected its spans")
        return out

    def prefix_key(self, device: str, value) -> int:
        """key_λ of the device's value at its group's level."""
        code = strings_domain.code_of(value, self.max_len)
        return strings_domain.prefix_key(code, self.levels[self.group(device)])

    @staticmethod
    def _split(value):
        if not isinstance(value, dict) or set(value) != {"device", "value"} \
                or not isinstance(value["device"], str):
            raise TypeError("a pem value is {\"device\": id, \"value\": v}")
        return value["device"], value["value"]

    def reference_report(self, value, words, seq: int = 0) -> bytes:
        """`value` = {"device", "value"}: FLH's reference report over key_λ."""
        device, v = self._split(value)
        return super().reference_report(self.prefix_key(device, v), words, seq)

    def c_report(self, value, words, seq: int = 0) -> bytes:
        """The same through C: ldp_pem_prefix_keys on the code, then ldp_flh_perturb."""
        device, v = self._split(value)
        code = np.frombuffer(strings_domain.code_of(v, self.max_len), np.uint8).reshape(1, -1)
        key = np.zeros(1, np.uint32)
        bits = self.levels[self.group(device)]
        if kernels.lib.ldp_pem_prefix_keys(kernels.byte_ptr(np.ascontiguousarray(code)), 1,
                                           self.max_len, bits, protocol.KEY_SEED, kernels.ptr(key)) != 0:
            raise ValueError("ldp_pem_prefix_keys rejected its input")
        return self.one_report(int(key[0]), words, seq, self._kernel)

    def report_for(self, device: str, value, words, nonce: int) -> bytes:
        return self.reference_report({"device": device, "value": value}, words, nonce)

    # --- aggregator face -----------------------------------------------------------------
    def variance(self, n: int, freqs=None) -> float:
        """FLH's (flh.py); without `freqs`, a prefix nobody holds (no collision term: a strings
        domain has no list to spread over)."""
        return float(np.mean(self.item_variances(n, [0.0] if freqs is None else freqs)))

    def new_sketch(self) -> "PemSketch":
        return PemSketch(self)


class PemSketch(Sketch):
    """counts[i, s, y]: reports of group i with seed index s and value y (G x kp x g int64);
    `sizes[i]` reports per group. `update(reports, groups)` takes each report's group (from its
    topic's device id, `groups_of`)."""

    def __init__(self, mechanism: PemMechanism):
        super().__init__(mechanism)
        m = mechanism
        self.counts = np.zeros((m.groups, m.kp, m.g), np.int64)
        self.sizes = np.zeros(m.groups, np.int64)

    def groups_of(self, devices) -> np.ndarray:
        """Group of each device id (public, spec §3.5)."""
        return self.mechanism.groups_of(devices)

    def groups_of_spans(self, data, off, length) -> np.ndarray:
        return self.mechanism.groups_of_spans(data, off, length)

    def update(self, reports, groups=None, devices=None) -> int:
        """Fold validated reports into their groups' FLH tables: one C call (ldp_pem_count)."""
        arr = contiguous_bodies(self.mechanism, reports)
        if groups is None:
            if devices is None:
                raise ValueError("pem reports need their groups or device ids")
            groups = self.groups_of(devices)
        groups = np.asarray(groups, np.int64)
        if groups.shape != (arr.shape[0],):
            raise ValueError("one group per report")
        m = self.mechanism
        if groups.size and (groups.min() < 0 or groups.max() >= m.groups):
            raise ValueError("a group outside 0..%d" % (m.groups - 1))
        if arr.shape[0]:
            groups = np.ascontiguousarray(groups)
            if kernels.lib.ldp_pem_count(body_ptr(arr), arr.shape[0], arr.shape[1],
                                         kernels.ptr(groups), m.groups, m.kp, m.g,
                                         kernels.ptr(self.counts)) != 0:
                raise ValueError("pem reports outside their fields (not validated?)")
            self.sizes += np.bincount(groups, minlength=m.groups)
        self.n += arr.shape[0]
        return arr.shape[0]

    def _state(self) -> dict:
        return {"counts": self.counts, "sizes": self.sizes}

    def _set_state(self, state: dict):
        for name in ("counts", "sizes"):
            arr = np.asarray(state.get(name))
            if arr.shape != getattr(self, name).shape:
                raise SketchMismatch(name, "state shape %s, expected %s"
                                     % (arr.shape, getattr(self, name).shape))
            setattr(self, name, np.array(arr, dtype=np.int64))

    def merge(self, other: "PemSketch") -> "PemSketch":
        self.compatible(other)
        self.counts += other.counts
        self.sizes += other.sizes
        self.n += other.n
        return self

    def support(self, group: int, keys) -> np.ndarray:
        """Reports of `group` supporting each key: sum_s counts[group, s, bucket(Hs(key,
        salt + s), g)] (C ldp_flh_support, threaded over keys)."""
        m = self.mechanism
        keys = np.ascontiguousarray(u32_keys(keys))
        out = np.zeros(keys.size, np.int64)
        table = np.ascontiguousarray(self.counts[group])

        def run(part):
            a, b = part
            kernels.lib.ldp_flh_support(kernels.ptr(table), m.kp, m.g, m.salt,
                                        kernels.ptr(keys, 4 * a), b - a, kernels.ptr(out, 8 * a))

        kernels.parallel_map(run, item_spans(keys.size, m.kp * keys.size))
        return out

    def estimate(self, group: int, keys) -> np.ndarray:
        """Estimated counts of holders of each key among group's reports:
        (support - n_i/g) / (p* - 1/g) (FLH, VLDB 2021 §4.2)."""
        p, q = (float(v) for v in self.mechanism.support_pq())
        n = float(self.sizes[group])
        return (self.support(group, keys) - n * q) / (p - q)

    def frequencies(self, group: int, keys) -> np.ndarray:
        """Estimated fractions of group's reports holding each key."""
        return self.estimate(group, keys) / max(int(self.sizes[group]), 1)

    def group_estimate(self):
        """`pem.identify`'s oracle: callable(i, keys) -> frequencies, with `.sizes`."""
        def group_estimate(i, keys):
            return self.frequencies(i, keys)
        group_estimate.sizes = [int(s) for s in self.sizes]
        return group_estimate


MECHANISM = PemMechanism
