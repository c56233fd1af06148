"""What `ldpfleet estimate` and the HTTP API answer: a two-phase protocol campaign's answer in
phase 2 (answers.py) or one phase's estimate table (estimates.py). Kept apart from both so that
neither imports the other back (answers.py uses the estimates' sketch loading and CSV)."""
from ...core.errors import ConfigError
from ..state.store import Store
from .answers import compute_answer
from .estimates import (NO_POST, EstimateQuery, compute_estimates, parse_items,
                        parse_threshold)
from .numeric import is_numeric


def estimate(store: Store, name: str, query: EstimateQuery, now: float = None):
    """What `ldpfleet estimate` (and the HTTP API) answers: a two-phase protocol campaign in
    phase 2 without an explicit phase gives the protocol's answer (`compute_answer`, with the
    same false-discovery rate and threshold), anything else the estimate table
    (`compute_estimates`). `query.items`/`subset` are item strings. `post` "none" (or "") is
    no post-processing; a protocol's answer ignores a post-processing method with a warning
    (the config file's `[estimate] post` is meant for one phase's estimates). A recurring
    campaign answers one round (`query.round`, default the latest with reports: rounds.py);
    `round` on any other campaign is refused (field `round`)."""
    from . import rounds
    camp = store.require_campaign(name)
    if rounds.is_recurring(camp):
        if camp.mechanism_name(1) in rounds.MEAN_MECHANISMS:
            return rounds.round_estimate(store, camp, query, now=now)
        return rounds.round_estimate(store, camp, _item_query(camp, query, query.phase), now=now)
    if query.round is not None:
        rounds.require_recurring(camp, "round")
    if is_numeric(camp.config):
        return _numeric(store, name, query)
    if camp.protocol and camp.protocol.get("protocol") == "pem" \
            and (query.phase == 1 or (query.phase is None and camp.phase == 1)):
        from .estimates import load_sketch
        from .pem_campaign import phase1_answer
        for flag in ("items", "subset"):  # never silently dropped
            if getattr(query, flag):
                raise ConfigError(flag, "a PEM campaign's phase 1 shows the candidates PEM "
                                        "found, not estimates of given items (spec §3.5)")
        return phase1_answer(camp, load_sketch(store, name, 1), top=query.top)
    if camp.protocol and camp.protocol.get("protocol") == "pem" and query.phase == 2:
        if camp.phase < 2:  # as compute_estimates refuses any campaign's unopened phase
            raise ConfigError("phase", "campaign %s has not opened phase 2 yet (`campaign "
                                       "advance`)" % name)
        import dataclasses  # a PEM phase 2 is its answer: the candidates' estimates (§3.5)
        query = dataclasses.replace(query, phase=None)
    if camp.protocol and camp.phase == 2 and query.phase is None:
        post = None if query.post in (None, "", NO_POST) else query.post
        for flag in ("items", "subset"):
            if getattr(query, flag):
                raise ConfigError(flag, "%s applies to one phase's estimates; ask for --phase 1 "
                                        "or 2" % flag)
        answer = compute_answer(store, name, top=query.top, fdr=query.fdr,
                                threshold=parse_threshold(query.threshold))
        if post:
            answer.warnings.append("post-processing %s applies to one phase's estimates "
                                   "(--phase 1 or 2): the protocol's answer is not post-processed"
                                   " (--post none, or LDPFLEET_POST= empty, says so quietly)"
                                   % post)
        return answer
    return compute_estimates(store, name, _item_query(camp, query, query.phase))


def _item_query(camp, query: EstimateQuery, phase) -> EstimateQuery:
    """The query of one phase's (or round's) item estimates: items parsed to the domain's
    type, "none" post-processing dropped with its options, the threshold checked."""
    post = None if query.post in (None, "", NO_POST) else query.post
    kind = camp.config["domain"]["type"]
    return EstimateQuery(
        phase=phase, post=post, post_opts=query.post_opts if post else None,
        top=query.top, threshold=parse_threshold(query.threshold), confidence=query.confidence,
        items=parse_items(query.items, kind), subset=parse_items(query.subset, kind),
        fdr=query.fdr, round=query.round)


def _numeric(store: Store, name: str, query: EstimateQuery):
    """A numeric campaign's means or histogram (numeric.py); the options of item lists do
    not apply."""
    from .numeric import compute_numeric
    for flag in ("items", "subset", "top", "threshold"):
        if getattr(query, flag) not in (None, []):
            raise ConfigError(flag, "%s applies to item estimates, not to a numeric campaign"
                              % flag)
    out = compute_numeric(store, name, phase=query.phase, confidence=query.confidence)
    if query.post not in (None, "", NO_POST):
        out.warnings.append("post-processing %s applies to item estimates: a numeric campaign's "
                            "answer is not post-processed" % query.post)
    return out
