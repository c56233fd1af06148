"""The operators' HTTP API of `ldpfleet serve --http HOST:PORT` (FastAPI, uvicorn in a thread).

Read (the CLI's JSON, the same functions): `GET /campaigns` (`campaign list`),
`GET /campaigns/{name}` (`campaign status`), `GET /campaigns/{name}/estimate` (`estimate`,
`format=json|csv`, `round=R` of a recurring campaign), `GET /campaigns/{name}/series` (`estimate
--series`: a recurring campaign's rounds), `GET /campaigns/{name}/trend` (`campaign trend`:
counters over time), `GET /metrics` (serve's Prometheus registry), `GET /openapi.json`;
`GET /healthz` (alive) and `GET /readyz` (state readable, ingest subscribed) need no token.
Write, only with the write token: `POST /campaigns/{name}/advance`, `POST /campaigns/{name}/close`.

Tokens (`ApiTokens`): with a read token every endpoint but the probes and the dashboard's
static files needs `Authorization: Bearer <token>` (the write token reads too); without a
write token the write endpoints answer 403. Each request opens its own store connection
(serve's ingest loop owns its own), so a reader never holds the writer up.

Host names (`host_allowed`): every request must name this API in its `Host` header — an IP
address, `localhost`, or a configured name (the host of `--http`, `--http-allowed-hosts`) —
or it gets 400. A web page the operator visits could otherwise rebind its own DNS name to
127.0.0.1 and read a token-less API (DNS rebinding); such a request carries the page's name.

Errors: an LdpError is bad input, 400 naming its field (503 when it is the state); anything
else is a bug, 500 with a generic body and the traceback in serve's log (`InternalErrors`).
"""
import hmac
import ipaddress
import json
import logging
import os
import re
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Optional

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ...core.errors import ConfigError, LdpError, StateError
from . import models as m
from .errors import INTERNAL_DETAIL, InternalErrors  # noqa: F401 (INTERNAL_DETAIL: the 500 body)
from .params import EstimateParams, SeriesParams, estimate_result
from ..campaigns.manage import campaign_rows
from ..state.store import Store
from ..state.sql import database_bug_errors, database_errors

log = logging.getLogger("ldpfleet.service")

DASHBOARD_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dashboard")
"""The dashboard's static files (index.html at `/`, the rest under `/static/`), if present."""

STORE_TIMEOUT = 10.0
"""Seconds a request waits for the state (a write waits for serve's batch to commit)."""


TOKEN_NAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")


@dataclass
class ApiTokens:
    """The bearer tokens, each with a name (what serve's log says when a write endpoint is
    used): `read` and `write` map name -> token (None: reads open / read-only API; a bare
    string is one token named after its role)."""

    read: dict = None
    write: dict = None

    def __post_init__(self):
        if isinstance(self.read, str):
            self.read = {"read": self.read}
        if isinstance(self.write, str):
            self.write = {"write": self.write}

    @classmethod
    def from_files(cls, read_file: str = None, write_file: str = None) -> "ApiTokens":
        return cls(_tokens(read_file, "http_token_file"), _tokens(write_file, "http_write_token_file"))

    @staticmethod
    def grants(creds, tokens: dict):
        """The name of the token of `tokens` that `creds` presents, else None."""
        if not tokens or creds is None:
            return None
        given = creds.credentials.encode("utf-8")
        found = None
        for name, token in tokens.items():  # compare with every one: no early exit
            if hmac.compare_digest(given, token.encode("utf-8")):
                found = name
        return found


def _tokens(path: str, field: str):
    """The tokens of a token file, {name: token} (None without a file): one per line, either
    `NAME:TOKEN` (an operator's or a tool's name, [A-Za-z0-9_.@-]) or a bare TOKEN named after
    the file; `#` lines are comments. Every token has at least 16 characters."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line.strip() for line in f]
    except OSError as exc:
        raise ConfigError(field, "cannot read %s: %s" % (path, exc.strerror or exc)) from None
    tokens = {}
    for lineno, line in enumerate(lines, 1):
        if not line or line.startswith("#"):
            continue
        name, sep, token = line.partition(":")
        if not sep or not TOKEN_NAME.match(name):
            name, token = os.path.basename(path), line
        if len(token) < 16:
            raise ConfigError(field, "%s:%d: a token of at least 16 characters (NAME:TOKEN or "
                              "TOKEN per line)" % (path, lineno))
        if name in tokens or token in tokens.values():
            raise ConfigError(field, "%s:%d: token name %s or its token given twice"
                              % (path, lineno, name))
        tokens[name] = token
    if not tokens:
        raise ConfigError(field, "%s holds no token (NAME:TOKEN or TOKEN per line)" % path)
    return tokens


class CliJSON(JSONResponse):
    """JSON as the CLI prints it (`json.dumps(..., sort_keys=True)`)."""

    def render(self, content) -> bytes:
        return json.dumps(content, sort_keys=True).encode("utf-8")


ERRORS = {400: {"model": m.Problem, "description": "bad input (the field is named)"},
          401: {"model": m.Problem, "description": "no or wrong bearer token"},
          500: {"model": m.Problem, "description": "internal error (a bug; logged)"},
          503: {"model": m.Problem, "description": "the state cannot be read"}}
NOT_FOUND = {404: {"model": m.Problem, "description": "no such campaign (named)"}}
FORBIDDEN = {403: {"model": m.Problem, "description": "read-only API, or a read token"}}
NAME = Path(description="campaign name")
LOCAL_NAMES = ("localhost",)


def _host_name(name: str) -> str:
    return name.strip().rstrip(".").lower()


def host_allowed(header, names=()) -> bool:
    """Whether a request's `Host` header (`name[:port]`, `[v6]:port`) names this API: any IP
    address literal (a page sends one only when it was loaded from that address itself),
    `localhost`, or one of `names`. A missing or malformed header is refused."""
    if not header:
        return False
    host = header.strip()
    if host.startswith("["):
        literal, end, rest = host[1:].partition("]")
        if not end or (rest and not (rest[:1] == ":" and rest[1:].isdigit())):
            return False
        try:
            ipaddress.IPv6Address(literal)
        except ValueError:
            return False
        return True
    name, colon, port = host.rpartition(":") if ":" in host else (host, "", "")
    if colon and not port.isdigit():
        return False
    name = _host_name(name)
    try:
        ipaddress.IPv4Address(name)
        return True
    except ValueError:
        pass
    return bool(name) and (name in LOCAL_NAMES or name in {_host_name(n) for n in names})


def create_app(state_url: str, metrics=None, tokens: ApiTokens = None, broker=None,
               ready: Callable[[], bool] = None, dashboard: str = DASHBOARD_DIR,
               allowed_hosts=(), fleet=None) -> FastAPI:
    """The API over the state at `state_url`. `metrics`: serve's ServiceMetrics (its registry
    at /metrics); `broker`: the BrokerSettings the write endpoints publish with; `ready`:
    whether serve's ingest is subscribed (default: always); `allowed_hosts`: the names besides
    IP addresses and localhost a request's Host header may give (`host_allowed`); `fleet`: the
    provisioned devices (coverage.ProvisionedFleet) of each campaign's coverage."""
    tokens = tokens or ApiTokens()
    allowed_hosts = tuple(allowed_hosts)
    ready = ready or (lambda: True)
    bearer = HTTPBearer(auto_error=False, description="the token of --http-token-file "
                        "(reads) or --http-write-token-file (reads and writes)")
    app = FastAPI(title="ldpfleet", version=_version(), openapi_url=None, docs_url=None,
                  redoc_url=None, description=__doc__.split("\n\n")[1])

    def can_read(creds: Optional[HTTPAuthorizationCredentials] = Depends(bearer)):
        if tokens.read is not None and not (tokens.grants(creds, tokens.read)
                                            or tokens.grants(creds, tokens.write)):
            raise _unauthorised(creds)

    def can_write(creds: Optional[HTTPAuthorizationCredentials] = Depends(bearer)) -> str:
        """The write token's name (who advances or closes: serve's log says it)."""
        if tokens.write is None:
            raise HTTPException(403, "read-only API: serve runs without --http-write-token-file")
        name = tokens.grants(creds, tokens.write)
        if name is not None:
            return name
        if creds is not None and (tokens.read is None or tokens.grants(creds, tokens.read)):
            raise HTTPException(403, "this token may only read")
        raise _unauthorised(creds)

    @contextmanager
    def state(name: str = None):
        """A store connection of its own for one request; 404 naming an unknown campaign."""
        with Store(state_url, timeout=STORE_TIMEOUT, create=False) as store:
            if name is not None and store.campaign(name) is None:
                raise _NoCampaign(name)
            yield store

    @app.exception_handler(_NoCampaign)
    def no_campaign(_request: Request, exc: _NoCampaign):
        return CliJSON({"detail": "no campaign named %r" % exc.name, "field": "name",
                        "campaign": exc.name}, status_code=404)

    @app.exception_handler(LdpError)
    def bad_input(_request: Request, exc: LdpError):
        if isinstance(exc, StateError) or (isinstance(exc, ConfigError) and exc.field == "state"):
            return CliJSON({"detail": str(exc), "field": "state"}, status_code=503)
        return CliJSON({"detail": str(exc), "field": getattr(exc, "field", None)}, status_code=400)

    def state_unusable(_request: Request, exc: Exception):
        if isinstance(exc, database_bug_errors()):
            raise exc  # our SQL or connection use: InternalErrors logs it and answers 500
        return CliJSON({"detail": "state: %s" % str(exc).strip(), "field": "state"},
                       status_code=503)

    for kind in database_errors():
        app.add_exception_handler(kind, state_unusable)

    @app.middleware("http")
    async def check_host(request: Request, call_next):
        host = request.headers.get("host")
        if not host_allowed(host, allowed_hosts):
            return CliJSON({"detail": "Host %r is not a name of this API (an IP address, "
                            "localhost or --http-allowed-hosts)" % (host or "")[:100],
                            "field": "host"}, status_code=400)
        return await call_next(request)

    app.add_middleware(InternalErrors)
    read = [Depends(can_read)]

    @app.get("/healthz", response_model=m.Health, tags=["probes"])
    def healthz():
        """The process is alive."""
        return CliJSON({"status": "ok"})

    @app.get("/readyz", response_model=m.Readiness, tags=["probes"],
             responses={503: {"model": m.Readiness, "description": "not ready"}})
    def readyz():
        """Ready when the state can be read and serve's ingest is subscribed to the broker."""
        out = {"ready": False, "state": False, "ingest": bool(ready())}
        try:
            with state() as store:
                store.meta("schema")
            out["state"] = True
        except Exception as exc:  # noqa: BLE001 (any failure to read is "not ready")
            out["detail"] = "state: %s" % (str(exc).strip() or type(exc).__name__)
            if (not isinstance(exc, (LdpError, OSError) + database_errors())
                    or isinstance(exc, database_bug_errors())):
                log.exception("readyz: reading the state failed (a bug)")
        if out["state"] and not out["ingest"]:
            out["detail"] = "ingest: not subscribed to the broker"
        out["ready"] = out["state"] and out["ingest"]
        return CliJSON(out, status_code=200 if out["ready"] else 503)

    @app.get("/campaigns", response_model=list[m.CampaignRow], dependencies=read,
             responses=ERRORS, tags=["campaigns"])
    def campaigns():
        """Every campaign, as `ldpfleet campaign list --json`."""
        with state() as store:
            return CliJSON(campaign_rows(store))

    @app.get("/campaigns/{name}", response_model=m.CampaignStatus, dependencies=read,
             responses={**ERRORS, **NOT_FOUND}, tags=["campaigns"])
    def campaign(name: str = NAME,
                 confidence: float = Query(0.95, gt=0, lt=1, description="of the intervals")):
        """Phases, epsilon per phase, reports, rejections by reason and expected error, as
        `ldpfleet campaign status NAME --json`."""
        from ..campaigns.manage import campaign_status
        with state(name) as store:
            return CliJSON(campaign_status(store, name, confidence=confidence, fleet=fleet))

    @app.get("/campaigns/{name}/estimate", response_model=m.Estimate, dependencies=read,
             responses={**ERRORS, **NOT_FOUND, 200: {"content": {"text/csv": {
                 "schema": {"type": "string"}}}, "description": "JSON or CSV (format=csv)"}},
             tags=["campaigns"])
    def estimate(name: str = NAME, query: EstimateParams = Depends()):
        """Frequency estimates with confidence intervals, as `ldpfleet estimate NAME --json`
        (or `--csv`) with the same options; a two-phase protocol campaign in phase 2 gives
        the protocol's answer unless `phase` is given."""
        with state(name) as store:
            result = estimate_result(store, name, query)
        if query.format == "csv":
            return Response(result.to_csv(), media_type="text/csv; charset=utf-8")
        return CliJSON(result.to_json())

    @app.get("/campaigns/{name}/series", response_model=m.Series, dependencies=read,
             responses={**ERRORS, **NOT_FOUND, 200: {"content": {"text/csv": {
                 "schema": {"type": "string"}}}, "description": "JSON or CSV (format=csv)"}},
             tags=["campaigns"])
    def series(name: str = NAME, query: SeriesParams = Depends()):
        """A recurring campaign's rounds, oldest first: window, reports and the estimates of
        the `top` items of the latest round with reports (or of `items`) with intervals and
        `noise` flags, or lbitmean's mean, as `ldpfleet estimate NAME --series --json`. A
        campaign without a schedule is 400 (field `schedule`)."""
        from ..campaigns.rounds import compute_series
        with state(name) as store:
            result = compute_series(store, name, top=query.top, items=query.items and
                                    query.items.split(","), confidence=query.confidence,
                                    fdr=query.fdr, last=query.last)
        if query.format == "csv":
            return Response(result.to_csv(), media_type="text/csv; charset=utf-8")
        return CliJSON(result.to_json())

    @app.get("/campaigns/{name}/trend", response_model=m.Trend, dependencies=read,
             responses={**ERRORS, **NOT_FOUND}, tags=["campaigns"])
    def trend(name: str = NAME):
        """Reports received, accepted, re-sent (duplicates) and rejected over time (at most
        one point a minute, cumulative; the last point is now), as `ldpfleet campaign trend
        NAME --json`."""
        from ..state.history import trend as campaign_trend
        with state(name) as store:
            return CliJSON(campaign_trend(store, name))

    @app.post("/campaigns/{name}/advance", response_model=m.Advanced, responses={**ERRORS, **NOT_FOUND, **FORBIDDEN}, tags=["write"])
    def advance(name: str = NAME, token: str = Depends(can_write)):
        """Phase 1 -> phase 2 of a two-phase protocol campaign, as `ldpfleet campaign advance
        NAME --json` (the phase-2 message is signed and published on serve's broker)."""
        from ..campaigns import events as lifecycle
        from ..campaigns.protocols import advance_campaign
        with state(name) as store:
            out = advance_campaign(store, write_broker(store), name)
            lifecycle.record(store, name, "advance", lifecycle.api_origin(token),
                             lifecycle.advance_detail(out))
            return CliJSON(out)

    @app.post("/campaigns/{name}/close", response_model=m.CampaignStatus, responses={**ERRORS, **NOT_FOUND, **FORBIDDEN}, tags=["write"])
    def close(name: str = NAME, token: str = Depends(can_write)):
        """Close a campaign as `ldpfleet campaign close NAME` (the signed close is published
        on serve's broker); answers its status."""
        from ..campaigns import events as lifecycle
        from ..campaigns.manage import campaign_status, close_campaign
        with state(name) as store:
            close_campaign(store, name, broker=write_broker(store))
            lifecycle.record(store, name, "close", lifecycle.api_origin(token))
            return CliJSON(campaign_status(store, name, fleet=fleet))

    def write_broker(store):
        """serve's broker settings, refused when they log in as serve (a broker that binds
        client ids to logins would hand serve's session to this connection)."""
        if broker is not None and broker.username and broker.username == store.meta("serve.username"):
            raise ConfigError("http_admin_username", "the write endpoints would log in as %s, "
                              "serve's own login: start serve with --http-admin-username (e.g. "
                              "%s-admin) and --http-admin-password-file" % (broker.username,
                                                                            broker.username))
        return broker

    if metrics is not None:
        @app.get("/metrics", dependencies=read, include_in_schema=False)
        def prometheus():
            from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
            return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/openapi.json", dependencies=read, include_in_schema=False)
    def openapi():
        return JSONResponse(app.openapi())

    _mount_dashboard(app, dashboard)
    return app


class _NoCampaign(Exception):
    def __init__(self, name):
        super().__init__(name)
        self.name = name


def _unauthorised(creds=None):
    """401: no token, or (`creds` given) a token that is not one of serve's."""
    if creds is None:
        detail = "a bearer token is needed (Authorization: Bearer <token>)"
    else:
        detail = ("this bearer token is not accepted: not the first line of serve's "
                  "--http-token-file (or --http-write-token-file)")
    return HTTPException(401, detail, headers={"WWW-Authenticate": "Bearer"})


def _version() -> str:
    from ... import __version__
    return __version__


def _mount_dashboard(app: FastAPI, directory: str):
    """`GET /` -> index.html and `/static/...` from the dashboard directory, if it exists (the
    page holds no data: it asks the JSON endpoints with the token)."""
    if not directory or not os.path.isdir(directory):
        return
    from fastapi.staticfiles import StaticFiles
    index = os.path.join(directory, "index.html")

    @app.get("/", include_in_schema=False)
    def dashboard():
        if not os.path.isfile(index):
            raise HTTPException(404, "no dashboard")
        return FileResponse(index, media_type="text/html")

    app.mount("/static", StaticFiles(directory=directory), name="static")


# --- running it inside serve ----------------------------------------------------------------------

def parse_address(text: str) -> tuple:
    """`HOST:PORT` (`[v6]:PORT`) -> (host, port); ConfigError naming `http`."""
    host, sep, port = str(text).rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError("http", "HOST:PORT, e.g. 127.0.0.1:8080, got %r" % text)
    return host, int(port)


def start_http(app, host: str, port: int, timeout: float = 10.0):
    """Serve `app` on host:port from a daemon thread (uvicorn, no signal handlers: serve keeps
    its own); returns the uvicorn Server (`should_exit = True` stops it). The socket is bound
    here, so a port in use is a ConfigError naming `http` at once."""
    import uvicorn
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError("http", "cannot serve the HTTP API on %s:%d: %s (another process uses "
                          "the port? choose another --http)" % (host, port, exc.strerror or exc)) from None
    sock.listen(128)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    server.install_signal_handlers = lambda: None  # uvicorn < 0.29; newer skip off the main thread
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="http-api",
                              daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    if not server.started:
        raise ConfigError("http", "the HTTP API did not start on %s:%d" % (host, port))
    return server
