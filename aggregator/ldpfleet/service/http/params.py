"""The query parameters of the HTTP API's read endpoints (api.py): `ldpfleet estimate`'s
options as FastAPI query parameters, and what an estimate answers for them (the CLI's
functions)."""
from typing import Literal, Optional

from fastapi import Query

from ..state.store import Store


def _post_methods() -> tuple:
    from ...core import post
    from ..campaigns.estimates import NO_POST
    return tuple(sorted(post.METHODS)) + (NO_POST,)


class EstimateParams:
    """The query parameters of an estimate (`ldpfleet estimate`'s options)."""

    def __init__(
            self,
            phase: Optional[int] = Query(None, ge=1, description="default: the current phase"),
            round: Optional[int] = Query(None, description="a recurring campaign's round "
                                         "(default: the latest with reports; 400 outside 1..R)"),
            post: Optional[Literal[_post_methods()]] = Query(
                None, description="consistency post-processing (ldpfleet.core.post.METHODS) of one "
                                  "phase's estimates; none: none"),
            top: Optional[int] = Query(None, ge=1, description="only the K largest"),
            threshold: Optional[str] = Query(
                None, description="'auto' (only the rows that stand out of the noise at the "
                                  "`fdr` false-discovery rate) or a fraction in [0, 1)"),
            fdr: float = Query(0.05, gt=0, lt=1, description="false-discovery rate of the list's "
                               "`noise` flags"),
            confidence: float = Query(0.95, gt=0, lt=1, description="of the intervals"),
            items: Optional[str] = Query(None, description="only these items, comma-separated"),
            subset: Optional[str] = Query(
                None, description="set-value query over these items, comma-separated"),
            format: Literal["json", "csv"] = Query("json")):
        self.phase, self.post, self.top, self.threshold = phase, post, top, threshold
        self.confidence, self.items, self.subset, self.format = confidence, items, subset, format
        self.fdr, self.round = fdr, round


class SeriesParams:
    """The query parameters of a series (`ldpfleet estimate --series`'s options)."""

    def __init__(
            self,
            top: Optional[int] = Query(None, ge=1, description="follow the K largest items of "
                                       "the latest round with reports (default 5)"),
            items: Optional[str] = Query(None, description="follow these items instead, "
                                         "comma-separated"),
            last: Optional[int] = Query(None, description="the N latest rounds (default 90, "
                                        "at most 1000)"),
            fdr: float = Query(0.05, gt=0, lt=1, description="false-discovery rate of each "
                               "round's `noise` flags"),
            confidence: float = Query(0.95, gt=0, lt=1, description="of the intervals"),
            format: Literal["json", "csv"] = Query("json")):
        self.top, self.items, self.last, self.fdr = top, items, last, fdr
        self.confidence, self.format = confidence, format


def estimate_result(store: Store, name: str, q: EstimateParams):
    """What `ldpfleet estimate` prints for these options (`query.estimate`); items are
    comma-separated here, never a file name (a remote client must not name server files)."""
    from ..campaigns.estimates import EstimateQuery
    from ..campaigns.query import estimate

    def split(text):
        return None if text is None else str(text).split(",")
    return estimate(store, name, EstimateQuery(
        phase=q.phase, post=q.post, top=q.top, threshold=q.threshold, confidence=q.confidence,
        items=split(q.items), subset=split(q.subset), fdr=q.fdr, round=q.round))
