"""Who may drive the workbench: the person who started it, from this machine's browser.

An ASGI middleware in front of every route:

- **Host / Origin allow-list** — a ``Host`` other than the bound address or ``localhost`` is refused
  (DNS rebinding: a web page whose name resolves to 127.0.0.1 reaches the port but sends its own
  name), and so is a request whose ``Origin`` is another site.
- **Access token** — ``openrknn ui`` prints ``http://host:port/?token=…`` (as Jupyter does); the first
  visit with the token gets a session cookie (HttpOnly, SameSite=Strict) and is redirected to the
  same page without the token. Without the cookie or the token, every page is refused: another local
  user or a page in the browser cannot drive the workbench.
- **CSRF token** — every ``<form>`` the pages send gets the session's token in its ``action``; a POST
  without it (query ``csrf_token`` or header ``X-CSRF-Token``) is refused before its body is read.
- **Upload limit** — a POST body larger than ``max_body_bytes`` is refused (413) from its
  ``Content-Length``, or as soon as that many bytes have arrived.
"""
from __future__ import annotations

import hashlib
import hmac
import html
import ipaddress
import re
import secrets
from http.cookies import SimpleCookie
from typing import Any, Awaitable, Callable, Iterable
from urllib.parse import parse_qs, urlencode, urlsplit

from starlette.exceptions import HTTPException

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

COOKIE = "openrknn_ui_session"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = b"x-csrf-token"
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
DEFAULT_MAX_BODY_BYTES = 2 << 30   # a model upload: protobuf cannot parse more anyway
_FORM = re.compile(rb"<form\b[^>]*>", re.I)
_ACTION = re.compile(rb'action="([^"]*)"', re.I)


def allowed_hosts(bound: str) -> frozenset[str]:
    """Host names a request may carry: ``localhost`` and the loopback addresses, plus the bound address
    (``*`` stands for any IP literal when bound to all interfaces: an address cannot be rebound)."""
    names = set(LOCAL_NAMES)
    names.add("*" if bound in ("0.0.0.0", "::", "") else bound.strip("[]").lower())
    return frozenset(names)


def _host_name(value: str) -> str:
    """'[::1]:8000' -> '::1', 'LocalHost:80' -> 'localhost'."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


class Guard:
    """The middleware; ``secret`` is the access token printed in the start URL."""

    def __init__(self, app: Any, secret: str, hosts: Iterable[str] = LOCAL_NAMES,
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.app = app
        self.secret = secret
        self.hosts = frozenset(hosts)
        self.max_body_bytes = max_body_bytes
        self.sessions: set[str] = set()

    def csrf_token(self, session: str) -> str:
        """The CSRF token of a session (derived from it: nothing more to store)."""
        return hmac.new(self.secret.encode(), b"csrf:" + session.encode(), hashlib.sha256).hexdigest()[:32]

    def host_allowed(self, host: str) -> bool:
        name = _host_name(host)
        return name in self.hosts or ("*" in self.hosts and _is_ip(name))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = headers.get(b"host", "")
        if not self.host_allowed(host):
            await _refuse(send, 403, f"this workbench answers only to {', '.join(sorted(self.hosts))}, not to "
                                     f"the host name '{_host_name(host)[:80]}' (a page of another site cannot use it)")
            return
        origin = headers.get(b"origin")
        if origin is not None and (origin == "null" or urlsplit(origin).netloc.lower() != host.lower()):
            await _refuse(send, 403, "requests from another site's page are refused")
            return
        session = _cookie(headers.get(b"cookie", ""))
        if session not in self.sessions:
            await self._log_in(scope, send)
            return
        if scope["method"] not in ("GET", "HEAD"):
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            given = headers.get(CSRF_HEADER) or (query.get(CSRF_FIELD) or [""])[0]
            if not hmac.compare_digest(given.encode(), self.csrf_token(session).encode()):
                await _refuse(send, 403, "the form is missing its CSRF token; reload the page and submit it again")
                return
            length = headers.get(b"content-length", "")
            if length.isdigit() and int(length) > self.max_body_bytes:
                await _refuse(send, 413, self._too_large())
                return
            receive = self._counting(receive)
        await self.app(scope, receive, self._with_csrf_forms(send, self.csrf_token(session)))

    async def _log_in(self, scope: Scope, send: Send) -> None:
        """The start URL's token opens a session; anything else is refused."""
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        token = (query.pop("token", None) or [""])[0]
        if scope["method"] != "GET" or not hmac.compare_digest(token.encode(), self.secret.encode()):
            await _refuse(send, 403, "this workbench needs its access token: open the URL that 'openrknn ui' "
                                     "printed (it ends in ?token=…)")
            return
        session = secrets.token_urlsafe(32)
        self.sessions.add(session)
        rest = urlencode(query, doseq=True)
        path = "/" + (scope.get("raw_path") or b"/").decode("latin-1").lstrip("/")   # never '//host': same site
        location = path + (f"?{rest}" if rest else "")
        await send({"type": "http.response.start", "status": 303,
                    "headers": [(b"location", location.encode("latin-1")), (b"content-length", b"0"),
                                (b"set-cookie", f"{COOKIE}={session}; HttpOnly; SameSite=Strict; Path=/".encode())]})
        await send({"type": "http.response.body", "body": b""})

    def _too_large(self) -> str:
        return (f"the upload is larger than the limit of {self.max_body_bytes // (1 << 20)} MiB; restart "
                "'openrknn ui' with a larger --max-upload-mb or give the file's path instead")

    def _counting(self, receive: Receive) -> Receive:
        seen = 0

        async def counted() -> dict[str, Any]:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_body_bytes:
                raise HTTPException(413, self._too_large())
            return message
        return counted

    @staticmethod
    def _with_csrf_forms(send: Send, token: str) -> Send:
        """Add the CSRF token to the ``action`` of every form in an HTML answer."""
        start: dict[str, Any] | None = None
        chunks: list[bytes] = []

        def add_token(match: re.Match[bytes]) -> bytes:
            tag = match.group(0)
            action = _ACTION.search(tag)
            if action is None:
                return tag
            url = html.unescape(action.group(1).decode())
            url += ("&" if "?" in url else "?") + f"{CSRF_FIELD}={token}"
            return tag[:action.start(1)] + html.escape(url).encode() + tag[action.end(1):]

        async def rewriting(message: dict[str, Any]) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                content_type = dict(message.get("headers", [])).get(b"content-type", b"")
                if not content_type.startswith(b"text/html"):
                    await send(message)
                    return
                start = message
                return
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = _FORM.sub(add_token, b"".join(chunks))
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            await send({**start, "headers": headers + [(b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
        return rewriting


def _cookie(header: str) -> str:
    cookie: SimpleCookie = SimpleCookie()
    try:
        cookie.load(header)
    except Exception:  # noqa: BLE001 - a malformed cookie header is simply no session
        return ""
    morsel = cookie.get(COOKIE)
    return morsel.value if morsel else ""


async def _refuse(send: Send, status: int, message: str) -> None:
    body = (f"<!doctype html><meta charset='utf-8'><title>openrknn workbench</title>"
            f"<p>{html.escape(message)}</p>").encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/html; charset=utf-8"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
