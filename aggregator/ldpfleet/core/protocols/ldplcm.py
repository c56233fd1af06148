"""LDPLCM: frequency estimation with a learned count-mean sketch, aggregator side (Zhang, Lin,
Yin, "Local Differentially Private Frequency Estimation based on Learned Sketches").

Flow (Alg. 1): devices with H(utf8(device_id), salt) % 10^6 < sample_rate_ppm (spec §5) report
in phase 1 with Apple CMS; the aggregator builds the sketch, estimates t sampled domain items
(Alg. 3 lines 3-6), trains the frequency model g (scikit-learn GradientBoostingRegressor, §5.1;
the feature is the item's domain index) and the boundary P (lines 8-10), and publishes the model
(`phase2_message`). Every other device evaluates g on its item and encodes a high-frequent item
(g >= P) as the all -1 vector (`lcm`, Alg. 2); the estimator is Alg. 4: g for high items, the
lcm sketch corrected by (1 - theta) n / m for low ones (Theorem 2).

Estimates here are fractions of users: the phase-1 estimate of an item, A_server-CMS(d)/r in
Alg. 3 line 5 (a count over the whole population), divided by n, is the sampled devices'
estimated count over their number.

Integer model (the "model" object of the phase-2 message; both sides run `evaluate_int`):

    {"format": "ldplcm-gbr", "version": 1, "scale_bits": s, "init": I, "boundary": P,
     "roots": [r_0, ...], "split": [...], "right": [...]}

All trees' nodes are flattened in preorder, tree t starting at roots[t] (roots[0] = 0, rising)
and ending where the next begins. Node i is a leaf iff right[i] = -1, and then split[i] is its
value; otherwise split[i] is an integer threshold, the left child is i + 1 and the right child
right[i]. g(x) = I + sum over trees of the leaf reached from the root by "x <= split[i] ? left :
right", and x is high-frequent iff g(x) >= P. Values are fixed point with s fractional bits of a
frequency fraction; the learning rate and the initial prediction are folded in:
leaf = round(lr * v * 2^s), I = round(init * 2^s). Because x is an integer item index,
sklearn's `x <= t` (x exact in float32 for x < 2^24) equals `x <= floor(t)`; thresholds are then
clamped to [-1, d - 1], which keeps every decision inside the domain. The exported integer model
IS g from then on (for d >= 2^24 sklearn's float32 rounding of x may disagree with it; the
protocol follows the integer model).

Validity (`check_model`, the device's ldp/lcm_model.py applies the same rules): format and
version; 0 <= s <= 30; 1 <= nodes <= 65536, 1 <= trees <= 4096, roots rising from 0 below the
node count; every right[i] is -1 or i + 1 < right[i] < end of its tree (and then i + 1 < end):
walks move forward inside their tree and end at a leaf; |split| < 2^31 (int32 storage);
|I| + sum over trees of the largest |leaf| <= 2^30 - 2 and -2^30 <= P < 2^30, so no partial sum
leaves the small-int range of 31-bit MicroPython boards (the exporter picks s <= 24 to fit).
"""
import math
from dataclasses import dataclass, field, replace

import numpy as np

from .. import config, protocol
from ..errors import ConfigError
from ..mechanisms.cms import as_keys

FORMAT = "ldplcm-gbr"
FORMAT_VERSION = 1
SMALL_INT = 1 << 30
"""Every partial sum and P stay in [-2^30, 2^30): small ints on 31-bit MicroPython boards."""
INT32 = 1 << 31
MAX_NODES = 65536
MAX_TREES = 4096
MAX_SCALE_BITS = 30
DEFAULT_SCALE_BITS = 24
PPM = 1000000
DEFAULT_SAMPLE_RATE = 0.1
DEFAULT_THETA = 0.5
DEFAULT_SKETCH_K = 64
DEFAULT_SKETCH_M = 1024
"""LDPLCM §5's setting for its Zipf data: r = 0.1, theta = 0.5, (k, m) = (64, 1024); the one
place of these defaults (`options.ProtocolOptions` fills them in)."""
DEFAULT_GBR = {"n_estimators": 100, "max_depth": 3, "learning_rate": 0.1}
"""The paper's WESAD setting (§5.1); its Zipf setting is 350 trees of depth 5, lr 0.05, which
makes a ~10x larger phase-2 message. Both are accepted through `gbr_params`."""


# --- device sampling (spec §5) -----------------------------------------------------------------

def rate_ppm(sample_rate: float) -> int:
    """The phase-1 sampling rate r as the config's integer parts per million."""
    ppm = int(round(float(sample_rate) * PPM))
    if not 0 <= ppm <= PPM:
        raise ConfigError("sample_rate_ppm", "sampling rate must be in [0, 1], got %r"
                          % (sample_rate,))
    return ppm


def in_phase1(device_id: str, salt: int, sample_rate_ppm: int) -> bool:
    """Spec §5: the device reports in phase 1 iff H(utf8(device_id), salt) % 10^6 < ppm
    (and in phase 2 otherwise)."""
    h = protocol.murmur3_32(device_id.encode("utf-8"), int(salt) % protocol.WORD)
    return h % PPM < int(sample_rate_ppm)


def phase1_mask(device_ids, salt: int, sample_rate_ppm: int) -> np.ndarray:
    """in_phase1 for many device ids (the C kernel's MurmurHash3)."""
    from ..kernels import lib
    seed = int(salt) % protocol.WORD
    h = np.fromiter((lib.ldp_murmur3_32(b, len(b), seed)
                     for b in (i.encode("utf-8") for i in device_ids)), np.uint64)
    return (h % PPM) < int(sample_rate_ppm)


def sample_rate_ppm(doc: dict):
    """The config's `sample_rate_ppm` (every phase of an LDPLCM campaign carries the same,
    `config.check_config`), or None: then every device reports in every phase."""
    for ph in doc["phases"]:
        if "sample_rate_ppm" in ph:
            return int(ph["sample_rate_ppm"])
    return None


def reports_in_phase(device_ids, doc: dict, phase: int) -> np.ndarray:
    """THE public split (spec §5), for many devices: which of `device_ids` report in `phase`
    of the campaign `doc` (phase 1: in_phase1; phase 2: the others; all without a rate)."""
    ids = list(device_ids)
    ppm = sample_rate_ppm(doc)
    if ppm is None or len(doc["phases"]) < 2:
        return np.ones(len(ids), bool)
    first = phase1_mask(ids, doc["salt"], ppm)
    return first if phase == 1 else ~first


# --- campaign set-up ---------------------------------------------------------------------------

def campaign_phases(eps_milli: int, k: int, m: int, sample_rate_ppm: int) -> list:
    """The `phases` list of an LDPLCM campaign config: phase 1 `cms` for the sampled devices,
    phase 2 `lcm` for the others, each with the full eps (every device reports once)."""
    if isinstance(sample_rate_ppm, bool) or not isinstance(sample_rate_ppm, int) \
            or not 0 < sample_rate_ppm < PPM:
        raise ConfigError("sample_rate_ppm", "must be an integer in (0, 10^6), got %r"
                          % (sample_rate_ppm,))
    return [{"phase": phase, "mechanism": name, "eps_milli": eps_milli,
             "sample_rate_ppm": sample_rate_ppm, "params": {"k": k, "m": m}}
            for phase, name in ((1, "cms"), (2, "lcm"))]


def phase1_mechanism(cfg: dict):
    mech = config.mechanism_for_phase(cfg, 1)
    if mech.name != "cms":
        raise ConfigError("phases.mechanism", "LDPLCM phase 1 is cms, not %r" % mech.name)
    return mech


def phase2_mechanism(cfg: dict):
    if len(cfg["phases"]) != 2:
        raise ConfigError("phases", "the campaign has no phase 2")
    mech = config.mechanism_for_phase(cfg, 2)
    if mech.name != "lcm":
        raise ConfigError("phases.mechanism", "LDPLCM phase 2 is lcm, not %r" % mech.name)
    return mech


# --- the integer model -------------------------------------------------------------------------

@dataclass(frozen=True)
class IntModel:
    """The exported frequency model (module docstring): fixed point with `scale_bits`."""

    scale_bits: int
    init: int
    boundary: int
    roots: tuple
    split: tuple
    right: tuple

    @property
    def scale(self) -> int:
        return 1 << self.scale_bits


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int_list(doc, name, limit):
    v = doc.get(name)
    if not isinstance(v, list) or not 1 <= len(v) <= limit or not all(_is_int(x) for x in v):
        raise ConfigError("model", "%s must be a list of 1..%d integers" % (name, limit))
    return v


def check_model(doc) -> IntModel:
    """Validate a model document (rules in the module docstring); ConfigError('model')."""
    if not isinstance(doc, dict):
        raise ConfigError("model", "must be an object")
    if doc.get("format") != FORMAT or doc.get("version") != FORMAT_VERSION \
            or not _is_int(doc.get("version")):
        raise ConfigError("model", "format must be %r version %d" % (FORMAT, FORMAT_VERSION))
    s, init, boundary = doc.get("scale_bits"), doc.get("init"), doc.get("boundary")
    if not _is_int(s) or not 0 <= s <= MAX_SCALE_BITS:
        raise ConfigError("model", "scale_bits must be an integer in [0, %d]" % MAX_SCALE_BITS)
    if not _is_int(init) or not _is_int(boundary) or not -SMALL_INT <= boundary < SMALL_INT:
        raise ConfigError("model", "init and boundary must be integers, boundary in [-2^30, 2^30)")
    roots = _int_list(doc, "roots", MAX_TREES)
    split = _int_list(doc, "split", MAX_NODES)
    right = _int_list(doc, "right", MAX_NODES)
    n = len(split)
    if len(right) != n:
        raise ConfigError("model", "split and right must have the same length")
    if roots[0] != 0 or any(b <= a for a, b in zip(roots, roots[1:])) or roots[-1] >= n:
        raise ConfigError("model", "roots must rise from 0 and stay below the node count")
    bound = abs(init)
    ends = list(roots[1:]) + [n]
    for start, end in zip(roots, ends):
        largest = None
        for i in range(start, end):
            v, r = split[i], right[i]
            if not -INT32 <= v < INT32:
                raise ConfigError("model", "split[%d] does not fit int32" % i)
            if r == -1:
                largest = abs(v) if largest is None else max(largest, abs(v))
            elif not (i + 1 < r < end):
                raise ConfigError("model", "right[%d] = %d is not inside tree (%d, %d)"
                                  % (i, r, i + 1, end))
        if largest is None:
            raise ConfigError("model", "tree at %d has no leaf" % start)
        bound += largest
    if bound > SMALL_INT - 2:
        raise ConfigError("model", "|init| + sum of the largest leaves exceeds 2^30 - 2")
    return IntModel(s, init, boundary, tuple(roots), tuple(split), tuple(right))


def model_to_doc(model: IntModel) -> dict:
    """The JSON-able "model" object of the phase-2 message."""
    return {"format": FORMAT, "version": FORMAT_VERSION, "scale_bits": int(model.scale_bits),
            "init": int(model.init), "boundary": int(model.boundary),
            "roots": [int(v) for v in model.roots], "split": [int(v) for v in model.split],
            "right": [int(v) for v in model.right]}


def model_to_json(model: IntModel) -> str:
    """Canonical JSON text of the model (sorted keys, no spaces; config.canonical)."""
    return config.canonical(model_to_doc(model))


def model_from_json(text_or_doc) -> IntModel:
    """Parse and validate a model from JSON text, bytes or an already-parsed document."""
    import json
    doc = text_or_doc
    if isinstance(doc, (bytes, bytearray)):
        doc = doc.decode("utf-8")
    if isinstance(doc, str):
        try:
            doc = json.loads(doc)
        except ValueError as exc:
            raise ConfigError("model", "not JSON: %s" % exc) from None
    return check_model(doc)


def evaluate_int(model: IntModel, x: int) -> int:
    """g(x) in fixed point: integer arithmetic only (the device runs the same loop)."""
    split, right = model.split, model.right
    total = model.init
    for i in model.roots:
        while right[i] >= 0:
            i = i + 1 if x <= split[i] else right[i]
        total += split[i]
    return total


def is_high(model: IntModel, x: int) -> bool:
    """Alg. 2 line 4: the item with domain index x is high-frequent iff g(x) >= P."""
    return evaluate_int(model, x) >= model.boundary


def evaluate_int_array(model: IntModel, xs) -> np.ndarray:
    """evaluate_int for many indices at once (int64, exact: the same integers)."""
    xs = np.asarray(xs, np.int64)
    split = np.asarray(model.split, np.int64)
    right = np.asarray(model.right, np.int64)
    total = np.full(xs.shape, model.init, np.int64)
    for root in model.roots:
        i = np.full(xs.shape, root, np.int64)
        while True:
            r = right[i]
            inner = r >= 0
            if not inner.any():
                break
            i = np.where(inner, np.where(xs <= split[i], i + 1, r), i)
        total += split[i]
    return total


def high_mask(model: IntModel, xs) -> np.ndarray:
    return evaluate_int_array(model, xs) >= model.boundary


# --- export and training (Alg. 3) ---------------------------------------------------------------

def _flatten(tree, rate: float, scale: int, d: int, split: list, right: list):
    """Append one sklearn tree in preorder (left child = next node)."""
    left_of, right_of = tree.children_left, tree.children_right
    threshold, value = tree.threshold, tree.value[:, 0, 0]

    def visit(node):
        pos = len(split)
        split.append(0)
        right.append(-1)
        if left_of[node] == -1:
            split[pos] = int(round(rate * float(value[node]) * scale))
            return
        split[pos] = min(max(int(math.floor(threshold[node])), -1), d - 1)
        visit(left_of[node])
        right[pos] = len(split)
        visit(right_of[node])

    visit(0)


def export_gbr(regressor, domain_size: int, max_scale_bits: int = DEFAULT_SCALE_BITS,
               boundary: int = SMALL_INT - 1) -> IntModel:
    """The integer model of a fitted squared-error GradientBoostingRegressor over the item
    index (boundary placeholder: nothing high until `boundary_from_predictions` sets P)."""
    if getattr(regressor, "loss", "squared_error") != "squared_error":
        raise ConfigError("model", "only squared-error boosting exports (mean init)")
    init = float(np.ravel(regressor.init_.constant_)[0])
    rate = float(regressor.learning_rate)
    trees = [est[0].tree_ for est in regressor.estimators_]
    if not 1 <= len(trees) <= MAX_TREES:
        raise ConfigError("model", "need 1..%d trees, got %d" % (MAX_TREES, len(trees)))
    worst = abs(init) + sum(rate * float(np.max(np.abs(t.value[:, 0, 0][t.children_left == -1])))
                            for t in trees)
    room = (SMALL_INT - 2 - len(trees) - 1) / max(worst, 1e-300)
    bits = min(int(max_scale_bits), int(math.floor(math.log2(room))) if room >= 1 else -1)
    while bits >= 0:
        split, right, roots = [], [], []
        for tree in trees:
            roots.append(len(split))
            _flatten(tree, rate, 1 << bits, int(domain_size), split, right)
        doc = {"format": FORMAT, "version": FORMAT_VERSION, "scale_bits": bits,
               "init": int(round(init * (1 << bits))), "boundary": int(boundary), "roots": roots,
               "split": split, "right": right}
        try:
            return check_model(doc)
        except ConfigError:
            bits -= 1
    raise ConfigError("model", "predictions too large for the fixed-point format")


def boundary_from_predictions(predictions, theta: float, total: int = None):
    """Alg. 3 lines 8-10 on integer predictions: sort descending, id = the largest p whose
    prefix sum is <= theta * total, P = SortedFre[id]. `total` defaults to the sum of the
    predictions (line 9 literally). Noisy estimates can be negative, which makes the prefix sums
    fall again at the tail; the prefix is therefore cut at its first crossing of theta * total
    and never extends to a non-positive prediction (the same id whenever predictions are
    positive). High means g >= P (spec §3, Alg. 2 line 4), so when the cut falls inside a run
    of equal predictions (a leaf region of the trees) the whole run stays low and P moves up to
    the next larger prediction: the high set's predicted mass never exceeds theta * total.
    Returns (P, theta_measured), the latter sum_{g >= P} g / total (<= theta). With no such
    prefix (the top item alone exceeds theta * total, or nothing is positive), P is above every
    prediction: nothing is high."""
    if not 0.0 < float(theta) < 1.0:
        raise ConfigError("theta", "must be in (0, 1), got %r" % (theta,))
    ordered = np.sort(np.asarray(predictions, np.int64))[::-1]
    total = int(ordered.sum()) if total is None else int(total)
    nothing = (int(ordered[0]) + 1, 0.0)
    if total <= 0:
        return nothing
    crossing = np.flatnonzero(np.cumsum(ordered) > float(theta) * total)
    count = int(crossing[0]) if crossing.size else ordered.size
    count = min(count, int(np.count_nonzero(ordered > 0)))
    if count == 0:
        return nothing
    boundary = int(ordered[count - 1])
    if count < ordered.size and ordered[count] == boundary:
        above = ordered[:count][ordered[:count] > boundary]
        if above.size == 0:
            return nothing
        boundary = int(above[-1])
    return boundary, float(ordered[ordered >= boundary].sum()) / total


@dataclass
class Training:
    """Alg. 3's phase-1 outcome: the exported model (with P) and what it was trained on."""

    model: IntModel
    regressor: object
    train_index: np.ndarray
    train_freq: np.ndarray
    theta: float
    theta_measured: float
    gbr_params: dict = field(default_factory=dict)


def train_model(phase1_sketch, domain_keys, theta: float = DEFAULT_THETA, train_items: int = None,
                seed: int = 0, gbr_params: dict = None, total_mass: str = "known",
                max_scale_bits: int = DEFAULT_SCALE_BITS) -> Training:
    """Alg. 3 phase 1: estimate t domain items from the CMS sketch (t = train_items sampled
    uniformly without replacement, default the whole domain), fit g: index -> frequency,
    export it and set P from theta.

    total_mass: the "sum of all the data" theta is a share of (line 9). "known" (default):
    every device holds exactly one item, so the domain's frequencies add up to 1 and t uniformly
    sampled items to t/d in expectation. "predicted": the sum of the t predictions, as line 9
    is written; that sum adds every item's estimation noise (hash collisions put d/m items on
    each sketch column, so its error is of the order of the largest frequencies) and at the
    simulated sizes it came out near 0, leaving nothing high."""
    try:
        from sklearn.ensemble import GradientBoostingRegressor
    except ImportError:
        raise ConfigError("ldplcm", "training the LDPLCM frequency model needs scikit-learn: "
                          "pip install 'ldpfleet[ldplcm]'") from None
    keys = as_keys(domain_keys)
    d = keys.size
    if phase1_sketch.n < 1:
        raise ConfigError("phase1", "no phase-1 reports to train on")
    rng = np.random.default_rng(seed)
    t = d if train_items is None else min(int(train_items), d)
    index = np.arange(d) if t == d else np.sort(rng.choice(d, size=t, replace=False))
    freq = np.asarray(phase1_sketch.estimate(keys[index]), np.float64) / phase1_sketch.n
    params = dict(DEFAULT_GBR, **(gbr_params or {}))
    regressor = GradientBoostingRegressor(random_state=seed, **params)
    regressor.fit(index.reshape(-1, 1).astype(np.float64), freq)
    model = export_gbr(regressor, d, max_scale_bits)
    if total_mass == "known":
        total = int(round(model.scale * index.size / d))
    elif total_mass == "predicted":
        total = None
    else:
        raise ConfigError("total_mass", "must be 'known' or 'predicted', got %r" % (total_mass,))
    boundary, measured = boundary_from_predictions(evaluate_int_array(model, index), theta, total)
    return Training(replace(model, boundary=boundary), regressor, index, freq, float(theta),
                    measured, params)


def phase2_message(cfg: dict, model: IntModel) -> dict:
    """The phase-2 body (spec §5) carrying the model; sign it with config.sign."""
    return config.make_phase2(cfg, model=model_to_doc(model))


# --- Alg. 4 -----------------------------------------------------------------------------------

def estimate_frequencies(phase2_sketch, model: IntModel, domain_keys, theta=None):
    """Alg. 4 over the domain: (fractions, high mask). High items (g >= P): g / 2^s; low items:
    the lcm sketch with the (1 - theta) n / m correction (theta: share of phase-2 users whose
    item is high, e.g. Training.theta_measured), or with theta=None the sketch's own unbiased
    estimate of the low users (LcmSketch.estimate)."""
    keys = as_keys(domain_keys)
    g = evaluate_int_array(model, np.arange(keys.size))
    high = g >= model.boundary
    est = np.asarray(phase2_sketch.estimate(keys, theta=theta), np.float64) / max(phase2_sketch.n, 1)
    est[high] = g[high] / float(model.scale)
    return est, high
