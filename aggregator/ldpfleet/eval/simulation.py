"""In-process simulation rounds: true values -> C perturbation -> sketch -> estimates -> metrics.

One round draws every user's true value (or set, for set-valued mechanisms) from a
`datasets` distribution, perturbs all users through the mechanism's C batch kernel
(`perturb_batch`), folds the reports into a sketch chunk by chunk (bounded memory), estimates
every domain key and compares with the true frequencies. Client time (perturbation, random
words included) and aggregation time (`update` + `estimate` over the whole domain) are measured
separately. `fast=True` (GRR and OUE only) instead draws the aggregate support counts from
their exact distribution (`fastsim`), which has no per-user work.

Accuracy is the full-domain MSE of frequencies as fractions ([NH] §4.1,
Wang, Lopuhaä-Zwakenberg, Li, Škorić, Li, "Consistent and Accurate Frequency Oracles under Local Differential Privacy" (NDSS 2020)), compared with the mechanism's theoretical variance
averaged over the domain's true frequencies: for an unbiased oracle E[MSE] equals that mean.
"""
import math
import time
from collections import namedtuple
from dataclasses import dataclass, field, replace

import numpy as np

from . import datasets, fastsim, accuracy as metrics
from ..core import post, protocol
from ..core.errors import ConfigError
from ..core.mechanisms import make_mechanism
from ..core.protocols.options import ProtocolOptions

CHUNK_BYTES = 1 << 26
CHUNK_USERS = 1 << 18
"""Reports are produced and folded in chunks of at most this many bytes and users (which
also paces the progress bar); the chunking never depends on whether a bar is shown."""


@dataclass
class SimulationConfig:
    mechanism: str
    eps_milli: int
    users: int
    domain: int
    dist: str = "zipf:1.1"
    repeat: int = 1
    seed: int = 0
    post: list = field(default_factory=list)
    fast: bool = False
    params: dict = field(default_factory=dict)
    set_size: int = 1
    data: str = None
    """A `device,item` CSV (ldpfleet.eval.datafile) whose values replace the drawn ones (one item
    per device; `users` None: the file's devices, else resampled with replacement); `domain`
    then comes from the file."""


def check_population(cfg):
    """The settings every simulation shares (users, domain, seed, dist): ConfigError naming the
    first bad one."""
    if cfg.users is None:
        raise ConfigError("users", "needed without a data file (--users N)")
    if cfg.users < 1:
        raise ConfigError("users", "must be >= 1, got %d" % cfg.users)
    if cfg.domain < 2:
        raise ConfigError("domain", "must be >= 2, got %d" % cfg.domain)
    if cfg.seed < 0:
        raise ConfigError("seed", "must be >= 0, got %d" % cfg.seed)
    if getattr(cfg, "data", None) is None:
        datasets.parse_dist(cfg.dist)


def check_config(cfg: SimulationConfig):
    """Raise ConfigError naming the first bad setting (before any work is done)."""
    check_population(cfg)
    if cfg.repeat < 1:
        raise ConfigError("repeat", "must be >= 1, got %d" % cfg.repeat)
    for method in cfg.post:
        if method not in post.METHODS:
            raise ConfigError("post", "unknown post-processing method %r (known: %s)"
                              % (method, ", ".join(post.METHODS)))
        if method == "mle-apx" and cfg.mechanism not in ("grr", "oue"):
            raise ConfigError("post", "mle-apx needs a pure protocol's p and q: grr or oue only")
    if cfg.fast and cfg.mechanism not in fastsim.FAST_MECHANISMS:
        raise ConfigError("fast", "--fast draws exact aggregates for %s only, not %r"
                          % (" and ".join(sorted(fastsim.FAST_MECHANISMS)), cfg.mechanism))
    if not 1 <= cfg.set_size <= cfg.domain:
        raise ConfigError("set_size", "must be in [1, domain], got %d" % cfg.set_size)
    if cfg.data is not None and cfg.set_size != 1:
        raise ConfigError("set_size", "a data file gives one item per device (set size 1), got %d"
                          % cfg.set_size)


def build_mechanism(cfg: SimulationConfig):
    """The mechanism under test (ValueError/TypeError for bad parameters)."""
    return make_mechanism(cfg.mechanism, cfg.eps_milli, cfg.domain, salt=0x5EED5A17,
                          campaign_id=1, phase=1, **cfg.params)


def _mean_variance(mech, n, freqs):
    """Mechanism variance averaged over the items' true fractions, or None if it has none."""
    try:
        value = mech.variance(n, freqs)
    except NotImplementedError:
        return None
    value = float(np.mean(value))
    return value if math.isfinite(value) else None


def _file_values(cfg: SimulationConfig):
    """(cfg with users and domain from cfg.data, (values, resample) or None): a data file's
    one item per device (DataFileError for a device with 0 or 2+ items)."""
    if cfg.data is None:
        return cfg, None
    from .datafile import load_item_csv
    data = load_item_csv(cfg.data)
    values = data.single_values()
    resample = cfg.users is not None
    return replace(cfg, users=cfg.users if resample else data.users, domain=data.domain), \
        (values, resample)


def _draw_truth(cfg, mech, rng, source=None):
    """(values, true counts): drawn from cfg.dist, or a data file's values (`_file_values`),
    resampled with `rng` to cfg.users when asked."""
    set_valued = getattr(mech, "set_valued", False)
    if source is not None:
        values, resample = source
        if resample:
            values = values[rng.integers(0, values.size, cfg.users)]
        if set_valued:
            values = values.reshape(-1, 1)
    elif set_valued:
        values = datasets.draw_sets(cfg.users, cfg.set_size, cfg.domain, cfg.dist, rng)
    else:
        values = datasets.draw_values(cfg.users, cfg.domain, cfg.dist, rng)
    return values, datasets.true_counts(values, cfg.domain)


def _round_reports(cfg, mech, values, rng, tick):
    """Perturb and aggregate all users; (estimated counts, client s, aggregate s)."""
    sketch = mech.new_sketch()
    chunk = max(1, min(cfg.users, CHUNK_USERS, CHUNK_BYTES // mech.report_size))
    client = aggregate = 0.0
    for start in range(0, cfg.users, chunk):
        keys = np.ascontiguousarray(values[start:start + chunk])
        t0 = time.perf_counter()
        reports = mech.perturb_batch(keys, rng)
        t1 = time.perf_counter()
        sketch.update(reports)
        t2 = time.perf_counter()
        client += t1 - t0
        aggregate += t2 - t1
        tick(keys.shape[0])
    t0 = time.perf_counter()
    est = np.asarray(sketch.estimate(np.arange(cfg.domain, dtype=np.uint32)), dtype=np.float64)
    aggregate += time.perf_counter() - t0
    return est, client, aggregate


def _round_fast(cfg, counts, rng, tick):
    """Exact-distribution aggregate (fastsim); (estimated counts, 0, seconds, variance)."""
    t0 = time.perf_counter()
    est, _ = fastsim.FAST_MECHANISMS[cfg.mechanism](counts, cfg.eps_milli / 1000.0, rng)
    seconds = time.perf_counter() - t0
    tick(cfg.users)
    return est * cfg.users, seconds


def _fast_variance(cfg, freqs):
    eps = cfg.eps_milli / 1000.0
    if cfg.mechanism == "grr":
        return float(np.mean(fastsim.grr_variance(eps, cfg.domain, cfg.users, freqs)))
    return float(np.mean(fastsim.oue_variance(eps, cfg.users, freqs)))


def _post_var(cfg, mech):
    """The per-item variance the aggregator knows (f-free), for post-processing."""
    if cfg.fast:
        p, q = fastsim.mechanism_pq(cfg.mechanism, cfg.eps_milli / 1000.0, cfg.domain)
        return float(fastsim.pure_variance(p, q, cfg.users))
    return float(np.mean(mech.variance(cfg.users)))


def _post_opts(cfg, mech, method):
    """Method options: MLE-Apx needs p and q ([NH] Eq. 13): the realised ones of the shipped
    mechanism, or the ideal ones that --fast simulates."""
    if method != "mle-apx":
        return {}
    if cfg.fast or not hasattr(mech, "support_pq"):
        p, q = fastsim.mechanism_pq(cfg.mechanism, cfg.eps_milli / 1000.0, cfg.domain)
    else:
        p, q = (float(v) for v in mech.support_pq())
    return {"p": p, "q": q}


def simulate(cfg: SimulationConfig, progress=None) -> dict:
    """Run `cfg.repeat` rounds; returns the result dict (see commands/simulate.py)."""
    cfg, source = _file_values(cfg)
    check_config(cfg)
    mech = build_mechanism(cfg)
    methods = ["base"] + [m for m in cfg.post if m != "base"]
    tick = progress.update if progress is not None else (lambda k: None)
    sq_err = {m: [] for m in methods}
    post_seconds = {m: 0.0 for m in methods if m != "base"}
    variances, client, aggregate = [], 0.0, 0.0
    for child in np.random.SeedSequence(cfg.seed).spawn(cfg.repeat):
        data_seq, noise_seq = child.spawn(2)
        values, counts = _draw_truth(cfg, mech, np.random.default_rng(data_seq), source)
        freqs = counts / cfg.users
        noise_rng = np.random.default_rng(noise_seq)
        if cfg.fast:
            est, secs = _round_fast(cfg, counts, noise_rng, tick)
            variances.append(_fast_variance(cfg, freqs))
            aggregate += secs
        else:
            est, c_secs, a_secs = _round_reports(cfg, mech, values, noise_rng, tick)
            variances.append(_mean_variance(mech, cfg.users, freqs))
            client += c_secs
            aggregate += a_secs
        est_freq = est / cfg.users
        sq_err["base"].append(metrics.mse(freqs, est_freq))
        if len(methods) > 1:
            var = _post_var(cfg, mech)
            for method in methods[1:]:
                t0 = time.perf_counter()
                out = post.postprocess(method, est_freq, var, cfg.users, **_post_opts(cfg, mech, method))
                post_seconds[method] += time.perf_counter() - t0
                sq_err[method].append(metrics.mse(freqs, out))
    return _result(cfg, mech, methods, sq_err, variances, client, aggregate, post_seconds)


def _result(cfg, mech, methods, sq_err, variances, client, aggregate, post_seconds):
    r = cfg.repeat
    theory = None if any(v is None for v in variances) else float(np.mean(variances))
    mse = {m: float(np.mean(sq_err[m])) for m in methods}
    ratio = {m: (mse[m] / theory if theory else None) for m in methods}
    out = {
        "mechanism": cfg.mechanism,
        "epsilon": cfg.eps_milli / 1000.0,
        "eps_milli": cfg.eps_milli,
        "users": cfg.users,
        "domain": cfg.domain,
        "dist": None if cfg.data is not None else str(datasets.parse_dist(cfg.dist)),
        "data": cfg.data,
        "repeat": r,
        "seed": cfg.seed,
        "params": mech.config_params(),
        "fast": cfg.fast,
        "report_bytes": mech.report_size,
        "mse": mse if cfg.post else mse["base"],
        "mse_per_repeat": [float(x) for x in sq_err["base"]],
        "theory_variance": theory,
        "mse_ratio": ratio if cfg.post else ratio["base"],
        "client_seconds": None if cfg.fast else client / r,
        "aggregate_seconds": aggregate / r,
        "client_reports_per_second": (None if cfg.fast or client == 0
                                      else cfg.users * r / client),
    }
    if getattr(mech, "set_valued", False):
        out["set_size"] = cfg.set_size
    if cfg.post:
        out["post_seconds"] = {"base": 0.0, **{m: s / r for m, s in post_seconds.items()}}
    return out


def eps_milli_from(epsilon: float) -> int:
    """Epsilon as the protocol's integer milli-nats (spec §2)."""
    return protocol.eps_to_milli(epsilon)


# --- two-phase protocols and their baselines (`ldpfleet simulate --protocol`) ------------------

LDPMINER_PROTOCOLS = {"ldpminer-rappor": "lm-rp", "ldpminer-sh": "lm-sh",
                      "ldpminer-sh-opt": "lm-sho",
                      "sampling-rappor": "rp", "sampling-sh": "sh",
                      "svim": "svim", "psfo": "psfo", "auto": "auto"}
"""CLI names -> `ldpminer.PROTOCOLS` (LDPMiner §5.1.3's LDPMiner-RAPPOR, LDPMiner-SH, LDPMiner-SH
with §4.4's correlated phases (`shc`, spec §3.1) and the
single-phase sampling RAPPOR / sampling SH), svim_sim.PROTOCOLS (SVIM-style two phases with
padding-and-sampling oracles, and one-phase PSFO) and auto (protocols.auto's choice)."""
LDPLCM_PROTOCOLS = ("ldplcm", "cms", "hcms", "flh")
"""LDPLCM and the baselines of its §5 (Apple-CMS, Apple-HCMS, FLH) on the same data."""
PROTOCOLS = tuple(LDPMINER_PROTOCOLS) + LDPLCM_PROTOCOLS


@dataclass
class ProtocolConfig:
    """One simulated campaign of a protocol over `users` users and an int domain of `domain`
    items drawn from `dist`; `options` as for a real campaign (`ProtocolOptions`: LDPMiner's
    set size l, top k, k_max, budget split, SH rows m; LDPLCM's sample rate, theta and CMS
    (k, m), which cms/hcms use too; flh uses k' = 128 public seeds)."""

    protocol: str
    eps_milli: int
    users: int
    domain: int
    dist: str = "zipf:1.1"
    seed: int = 0
    options: ProtocolOptions = field(default_factory=ProtocolOptions)
    data: str = None
    """LDPMiner family: a `device,item` CSV (ldpfleet.eval.datafile) instead of drawn sets; `users`
    None: its devices as they are, else resampled with replacement; `domain` from the file."""
    set_size_dist: str = None
    """Synthetic sets' sizes (datasets.parse_sizes); None: fixed:set_size (set_size then
    fixes l too), else `options.set_size` only overrides l (default: 90th percentile)."""
    repeat: int = 1
    """LDPMiner family: runs on fresh noise (and fresh data or resample); means reported."""


def check_protocol_config(cfg: ProtocolConfig):
    """Raise ConfigError naming the first bad setting (before any work is done)."""
    if cfg.protocol not in PROTOCOLS:
        raise ConfigError("protocol", "unknown protocol %r (known: %s)"
                          % (cfg.protocol, ", ".join(PROTOCOLS)))
    if cfg.protocol not in LDPMINER_PROTOCOLS:
        for what, bad in (("--repeat", cfg.repeat != 1), ("--data", cfg.data is not None),
                          ("--set-size-dist", cfg.set_size_dist is not None)):
            if bad:
                raise ConfigError(what.lstrip("-").replace("-", "_"),
                                  "%s with --protocol is for the set-valued (LDPMiner) family, "
                                  "not %s" % (what, cfg.protocol))
    check_population(cfg)
    opts = cfg.options
    if cfg.repeat < 1:
        raise ConfigError("repeat", "must be >= 1, got %d" % cfg.repeat)
    if cfg.protocol in LDPMINER_PROTOCOLS:
        if cfg.protocol in ("svim", "psfo", "auto") and opts.budget_split is not None:
            raise ConfigError("budget_split", "%s splits devices, not epsilon (no --budget-split)"
                              % cfg.protocol)
        if opts.top is None:
            raise ConfigError("top", "%s needs --top K" % cfg.protocol)
        if not 1 <= opts.top <= cfg.domain:
            raise ConfigError("top", "must be in [1, domain], got %d" % opts.top)
        if cfg.data is not None and cfg.set_size_dist is not None:
            raise ConfigError("set_size_dist", "the data file fixes the set sizes")
        if cfg.set_size_dist is not None:
            datasets.parse_sizes(cfg.set_size_dist)
        if cfg.data is None and cfg.set_size_dist is None and \
                not 1 <= set_size(cfg) <= cfg.domain:
            raise ConfigError("set_size", "must be in [1, domain], got %d" % set_size(cfg))
        if opts.k_max is not None and not opts.top <= opts.k_max <= cfg.domain:
            raise ConfigError("k_max", "must be in [top, domain], got %d" % opts.k_max)
        opts.ldpminer_share()
    elif cfg.protocol == "ldplcm":
        opts.ldplcm()


def set_size(cfg: ProtocolConfig) -> int:
    return 1 if cfg.options.set_size is None else cfg.options.set_size


FileSource = namedtuple("FileSource", "data resample")
FileSource.__doc__ = "A loaded data file (datafile.ItemData) and whether users are resampled."


def _data_file(cfg: ProtocolConfig):
    """(cfg with domain (and users, without --users) from cfg.data, FileSource or None)."""
    if cfg.data is None or cfg.protocol not in LDPMINER_PROTOCOLS:
        return cfg, None
    from .datafile import load_item_csv
    data = load_item_csv(cfg.data)
    source = FileSource(data, cfg.users is not None)
    return replace(cfg, domain=data.domain, dist=None,
                   users=cfg.users if source.resample else data.users), source


def sizes_spec(cfg: ProtocolConfig) -> str:
    """The synthetic set-size spec: --set-size-dist, else fixed:set_size; None with data."""
    if cfg.data is not None:
        return None
    if cfg.set_size_dist is None:
        return "fixed:%d" % set_size(cfg)
    return str(datasets.parse_sizes(cfg.set_size_dist))


def protocol_set_data(cfg: ProtocolConfig, source=None, repeat: int = 0):
    """The SetData of one repeat, from the seed's data stream (`Population.generators`): a
    data file's devices (`source`, resampled to cfg.users if asked) or synthetic sets."""
    from . import ldpminer_sim
    pop = datasets.Population(cfg.eps_milli / 1000.0, cfg.users, cfg.domain, cfg.dist, cfg.seed)
    data_rng = pop.generators(repeat)[0]
    if source is not None:
        return ldpminer_sim.set_data_from_file(source.data,
                                               cfg.users if source.resample else None, data_rng)
    return ldpminer_sim.set_data_synthetic(cfg.users, sizes_spec(cfg), cfg.domain, cfg.dist,
                                           data_rng)


def _miner_runs(cfg: ProtocolConfig, source) -> dict:
    """cfg.repeat runs of an LDPMiner-family protocol; metrics averaged (module doc of
    commands/simulate.py), per-repeat lists kept; data keys of the first repeat."""
    from . import ldpminer_sim
    opts = cfg.options
    fixed_l = cfg.data is None and cfg.set_size_dist is None
    tuning = ldpminer_sim.MinerTuning(l=None if fixed_l else opts.set_size, k_max=opts.k_max,
                                      phase1_share=opts.ldpminer_share(), m=opts.ldpminer_m())
    pop = datasets.Population(cfg.eps_milli / 1000.0, cfg.users, cfg.domain, cfg.dist, cfg.seed)
    runs, data = [], None
    for r in range(cfg.repeat):
        if data is None or source is None or source.resample:
            data = protocol_set_data(cfg, source, r)
        runs.append(ldpminer_sim.simulate_ldpminer(LDPMINER_PROTOCOLS[cfg.protocol], pop, data,
                                                   opts.top, tuning, repeat=r))
    out = dict(runs[0])
    for key in ("re", "re_list", "ndcg", "recall"):
        out[key + "_per_repeat"] = [float(run[key]) for run in runs]
        out[key] = float(np.mean(out[key + "_per_repeat"]))
    out["l_per_repeat"] = [int(run["l"]) for run in runs]
    out["set_size_mean"] = float(np.mean([run["set_size_mean"] for run in runs]))
    out.update({"m": tuning.m, "repeat": cfg.repeat, "data": cfg.data,
                "set_size_dist": sizes_spec(cfg)})
    return out


def simulate_protocol(cfg: ProtocolConfig) -> dict:
    """One simulated campaign (`ldpminer_sim.simulate_ldpminer` / `ldplcm_sim.simulate_ldplcm` /
    `ldplcm_sim.simulate_baseline`); the same seed gives the same dataset to every protocol of a
    family. Returns the core's result with `protocol` the CLI name (`core_protocol` the
    core's); LDPMiner family: `re`, `re_list`, `ndcg`, `recall`, ... (means over cfg.repeat
    runs); LDPLCM family: `sse`, `mse`, ..."""
    from . import ldplcm_sim
    cfg, source = _data_file(cfg)
    check_protocol_config(cfg)
    pop = datasets.Population(cfg.eps_milli / 1000.0, cfg.users, cfg.domain, cfg.dist, cfg.seed)
    opts = cfg.options
    if cfg.protocol in LDPMINER_PROTOCOLS:
        out = _miner_runs(cfg, source)
    else:
        rate, theta, k, m = opts.ldplcm()
        if cfg.protocol == "ldplcm":
            out = ldplcm_sim.simulate_ldplcm(pop, ldplcm_sim.LcmTuning(k, m, rate, theta))
        elif cfg.protocol == "flh":
            out = ldplcm_sim.simulate_baseline("flh", pop)
        else:
            out = ldplcm_sim.simulate_baseline(cfg.protocol, pop, {"k": k, "m": m})
    out["core_protocol"] = out["protocol"]
    out.update({"protocol": cfg.protocol, "eps_milli": cfg.eps_milli,
                "dist": None if cfg.dist is None else str(datasets.parse_dist(cfg.dist))})
    return out
