"""What the HTTP API answers for a bug: an exception no handler maps (api.py maps LdpError to
400 naming its field and the database's errors to 503) is logged with its traceback and
answered 500 with a generic body."""
import logging

from fastapi.responses import JSONResponse

log = logging.getLogger("ldpfleet.service")

INTERNAL_DETAIL = "internal error (a bug: serve's log has the traceback)"


class InternalErrors:
    """ASGI middleware: an exception no handler maps (not an LdpError, not the database's) is
    a bug, not bad input. Its traceback goes to serve's log (`logging.exception`) and the
    client gets 500 with a generic body that leaks nothing of the exception."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)
        try:
            await self.app(scope, receive, watched)
        except Exception:  # noqa: BLE001 (logged with its traceback, answered 500)
            log.exception("internal error answering %s %s", scope.get("method"),
                          scope.get("path"))
            if started:
                raise  # the response is under way: only the server can cut it
            await JSONResponse({"detail": INTERNAL_DETAIL, "field": None},
                               status_code=500)(scope, receive, send)
