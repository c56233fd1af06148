"""The HTTP API's errors, in process (the ASGI app called directly, no socket): an LdpError is
400 naming its field (503 when it is the state), anything else a bug, 500 with a generic body
and the traceback in serve's log."""
import asyncio
import json
import sqlite3
import logging

import pytest

from ldpfleet.core.errors import ConfigError, StateError
from ldpfleet.service import Store
from ldpfleet.service.http import api


def get(app, path):
    """(status, JSON body) of `GET path` on the ASGI app."""
    sent = []
    requested = []

    async def receive():
        if not requested:
            requested.append(True)
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # no disconnect while the response is written

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "client": ("127.0.0.1", 50000),
             "server": ("127.0.0.1", 8080), "headers": [(b"host", b"127.0.0.1:8080")]}
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], json.loads(body)


@pytest.fixture
def app(tmp_path):
    url = "sqlite:///" + str(tmp_path / "state.db")
    with Store(url):
        pass
    return api.create_app(url, dashboard=None)


def raising(exc):
    def rows(_store):
        raise exc
    return rows


def test_listing_works(app):
    assert get(app, "/campaigns") == (200, [])


@pytest.mark.parametrize("exc", [ValueError("secret detail 1"), KeyError("secret detail 2"),
                                 TypeError("secret detail 3"), OverflowError("secret detail 4"),
                                 sqlite3.ProgrammingError("secret detail 5"),
                                 sqlite3.InterfaceError("secret detail 6")])
def test_an_internal_error_is_500_and_its_traceback_is_logged(app, monkeypatch, caplog, exc):
    monkeypatch.setattr(api, "campaign_rows", raising(exc))
    with caplog.at_level(logging.ERROR, logger="ldpfleet.service"):
        status, body = get(app, "/campaigns")
    assert status == 500, body
    assert body == {"detail": api.INTERNAL_DETAIL, "field": None}
    assert "secret detail" not in json.dumps(body)
    logged = [r for r in caplog.records if r.name == "ldpfleet.service" and r.exc_info]
    assert len(logged) == 1 and logged[0].exc_info[1] is exc
    assert "GET /campaigns" in logged[0].getMessage()
    assert "Traceback (most recent call last)" in caplog.text and "secret detail" in caplog.text


def test_a_typed_error_is_400_naming_the_field(app, monkeypatch, caplog):
    monkeypatch.setattr(api, "campaign_rows", raising(ConfigError("top", "must be >= 1")))
    with caplog.at_level(logging.ERROR, logger="ldpfleet.service"):
        assert get(app, "/campaigns") == (400, {"detail": "top: must be >= 1", "field": "top"})
    assert not [r for r in caplog.records if r.exc_info]


def test_an_unusable_state_is_503(app, monkeypatch):
    monkeypatch.setattr(api, "campaign_rows", raising(StateError("state", "cannot connect")))
    assert get(app, "/campaigns") == (503, {"detail": "state: cannot connect", "field": "state"})
    monkeypatch.setattr(api, "campaign_rows", raising(sqlite3.OperationalError("disk I/O error")))
    assert get(app, "/campaigns") == (503, {"detail": "state: disk I/O error", "field": "state"})
