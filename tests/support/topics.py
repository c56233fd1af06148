"""Report topics of a lean MQTT read, split in C for tests (`ldp_report_topics`, the rule of
`service.ingest.loop.parse_report_topic`; the ingest splits them on its `ReportBatch`)."""
from collections import namedtuple

import numpy as np

from ldpfleet.core.kernels import ffi, lib, ptr

TopicSpans = namedtuple("TopicSpans", "ok camp_off camp_len dev_off dev_len")


def report_topics(batch) -> TopicSpans:
    """`ldp_report_topics` over a `PublishBatch`: ok (uint8) and the campaign and device spans
    (offsets into `data`) of topics `ldp/<campaign>/r/<device>[/<id>]`."""
    n = len(batch)
    ok = np.zeros(n, np.uint8)
    spans = [np.zeros(n, np.uint32) for _ in range(4)]
    if n:
        topic_off = np.ascontiguousarray(batch.topic_off, np.uint32)
        topic_len = np.ascontiguousarray(batch.topic_len, np.uint32)
        lib.ldp_report_topics(ffi.from_buffer(batch.data), n, ptr(topic_off), ptr(topic_len),
                              *[ptr(s) for s in spans], ptr(ok))
    return TopicSpans(ok, *spans)
