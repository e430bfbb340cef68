"""One webhook delivery attempt: a single HTTPS POST on a fresh connection, bounded in time and
bytes, that never raises for anything the network or the receiver does.

The SSRF guard (protocol/netguard.py) is applied here, where the connection is made: the host is
resolved once, the attempt is refused when ANY of its addresses is refused (a name with one
public and one private address is refused: which one a client picks is not ours to guess), and
the socket connects to an address that was checked — the name is never resolved again, so DNS
cannot answer differently between the check and the connection (rebinding). TLS verifies the
certificate against the URL's host (`server_hostname`), whatever address was connected to.
A host with `%` (an IPv6 zone id, a percent-encoded name) is refused outright. The port must be
the scheme's own (443; 80 for http) or one the operator allowed (`allowed_ports`), unless every
address is inside the allowed private networks (a receiver the operator runs on the host).

Everything from the receiver is hostile: the connection is the upstream pool's
(actors/http1_connection.py), the head framed by llhttp with its limits
(protocol/http1_client.py), the body is read only up to `BODY_LIMIT` bytes (for the log) and
all of it — resolution, connect, TLS, request, response head — happens within one attempt
timeout (10 s by default). Redirects are never followed (a 3xx is just a status). No connection is
pooled: a delivery is one request, and a pooled connection would outlive the address check.

Error texts name the failure, never the URL (its path or query may carry a receiver's token).
"""

from __future__ import annotations

import ipaddress
import math
import socket
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import trio

from actors.errors import ConnectionBroken, PortRefused, Refused, Stale
from actors.http1_connection import Connection, Response, secure
from protocol.errors import UpstreamError, UpstreamMalformed
from protocol.http1_client import format_request
from protocol.netguard import Network, inside, parse_address, refusal

BODY_LIMIT = 4096  # response body bytes kept (for the log); the rest is never read
MAX_URL_CHARS = 2048
USER_AGENT = "model-gateway-webhooks/1"
_ERROR_CHARS = 200

SockAddr = tuple[str, int] | tuple[str, int, int, int]
DEFAULT_PORTS = {"https": 443, "http": 80}


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """What one attempt came to: a status (None when no response head arrived) or an error."""

    status: int | None
    error: str | None
    retry_after: str | None  # the response's Retry-After header, raw
    duration_s: float
    body: bytes = b""  # the first BODY_LIMIT bytes of the response body at most


@dataclass(frozen=True, slots=True)
class Target:
    """A checked webhook URL, split into what a request needs."""

    scheme: str
    host: str  # lower-case, IPv6 literals without brackets
    port: int
    authority: str  # the Host header
    target: str  # path and query


class _Failed(Exception):
    """An attempt's failure, carrying the error text for the log."""


def parse_url(url: str, *, allow_http: bool = False) -> Target:
    """Split and check a webhook URL; ValueError names the problem."""
    if len(url) > MAX_URL_CHARS:
        raise ValueError(f"the URL is longer than {MAX_URL_CHARS} characters")
    if not url or not all("!" <= c <= "~" for c in url):
        raise ValueError("the URL may contain printable ASCII characters only (percent-encode)")
    parts = urlsplit(url)
    schemes = ("https", "http") if allow_http else ("https",)
    if parts.scheme.lower() not in schemes:
        raise ValueError("the URL must use https" + (" or http" if allow_http else ""))
    if "@" in parts.netloc:
        raise ValueError("the URL must not contain user information (user:password@)")
    host = parts.hostname
    if not host:
        raise ValueError("the URL has no host")
    try:
        port = parts.port
    except ValueError:
        raise ValueError("the URL's port is not valid") from None
    scheme = parts.scheme.lower()
    if port is None:
        port = 443 if scheme == "https" else 80
    elif port == 0:
        raise ValueError("the URL's port is not valid")
    if "%" in host:
        raise ValueError("the URL's host must not contain % (zone ids and escapes are refused)")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(scheme, host, port, parts.netloc, target)


async def resolve(
    target: Target, allowed: Sequence[Network] = (), allowed_ports: Sequence[int] = ()
) -> list[SockAddr]:
    """The addresses to connect to, all of them checked; Refused when any one is refused,
    PortRefused when the port is not allowed for them, socket.gaierror when the name does not
    resolve."""
    literal = parse_address(target.host)
    if literal is not None:
        why = refusal(literal, allowed)
        if why is not None:
            raise Refused(why)
        _check_port(target, allowed_ports, [literal], allowed)
        if literal.version == 4:
            return [(str(literal), target.port)]
        return [(str(literal), target.port, 0, 0)]
    try:
        infos = await trio.socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except UnicodeError:  # the IDNA codec refuses the name (an empty or 64+ character label)
        raise socket.gaierror("not a valid host name") from None
    found: list[SockAddr] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        host = sockaddr[0]
        if not isinstance(host, str):  # an AF_UNIX-style answer: never for a TCP lookup
            raise Refused("not an IP address")
        address = ipaddress.ip_address(host.split("%", 1)[0])
        why = refusal(address, allowed)
        if why is not None:
            raise Refused(why)
        addr: SockAddr = (
            (host, int(sockaddr[1]))
            if len(sockaddr) == 2
            else (host, int(sockaddr[1]), int(sockaddr[2]), int(sockaddr[3]))
        )
        if addr not in found:
            found.append(addr)
    if not found:
        raise socket.gaierror("no address")
    checked = [ipaddress.ip_address(a[0].split("%", 1)[0]) for a in found]
    _check_port(target, allowed_ports, checked, allowed)
    return found


def _check_port(
    target: Target,
    allowed_ports: Sequence[int],
    addresses: Sequence[ipaddress.IPv4Address | ipaddress.IPv6Address],
    allowed: Sequence[Network],
) -> None:
    if target.port == DEFAULT_PORTS[target.scheme] or target.port in allowed_ports:
        return
    if not all(inside(address, allowed) for address in addresses):
        raise PortRefused(target.port)


async def check_url(
    url: str,
    *,
    allowed_networks: Sequence[Network] = (),
    allow_http: bool = False,
    allowed_ports: Sequence[int] = (),
    timeout_s: float = 10.0,
) -> None:
    """For subscription create/update: the URL is well-formed, its host resolves, and every
    address it resolves to may be reached on its port. ValueError names the problem; `Refused`
    (a ValueError) when an address is of a class deliveries may not reach, `PortRefused` (one
    too) when the port is not allowed."""
    target = parse_url(url, allow_http=allow_http)
    try:
        with trio.fail_after(timeout_s):
            await resolve(target, allowed_networks, allowed_ports)
    except (OSError, trio.TooSlowError):
        raise ValueError("the URL's host does not resolve") from None


def _header_lines(headers: Sequence[tuple[str, str]]) -> bytes:
    lines = [*headers, ("User-Agent", USER_AGENT), ("Connection", "close")]
    text = "".join(f"{name}: {value}\r\n" for name, value in lines)
    if text.count("\n") != len(lines) or text.count("\r") != len(lines):
        raise ValueError("a header name or value contains a line break")
    return text.encode("latin-1")


def _clip(text: str) -> str:
    return " ".join(text.split())[:_ERROR_CHARS]


def _tls_error(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, ssl.SSLCertVerificationError):
        return _clip(f"TLS failure: {cause.verify_message or 'certificate verify failed'}")
    if isinstance(cause, ssl.SSLError):
        return _clip(f"TLS failure: {cause.reason or type(cause).__name__}")
    return "TLS failure: connection closed during the handshake"


class WebhookSender:
    """Sends delivery attempts under one set of rules (allowed networks, http, timeout, TLS)."""

    def __init__(
        self,
        *,
        allowed_networks: Sequence[Network] = (),
        allow_http: bool = False,
        allowed_ports: Sequence[int] = (),
        attempt_timeout_s: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.allowed_networks = tuple(allowed_networks)
        self.allow_http = allow_http
        self.allowed_ports = tuple(allowed_ports)
        self.attempt_timeout_s = attempt_timeout_s
        # create_default_context() loads the system store, which honours SSL_CERT_FILE.
        self._ssl = ssl_context if ssl_context is not None else ssl.create_default_context()

    async def post(
        self, url: str, body: bytes, headers: Sequence[tuple[str, str]]
    ) -> AttemptResult:
        """One attempt. Never raises for network or receiver behaviour (cancellation still
        propagates): failures come back as `error`."""
        began = trio.current_time()
        deadline = began + self.attempt_timeout_s
        status: int | None = None
        retry_after: str | None = None
        error: str | None = None
        conn: Connection | None = None
        parts: list[bytes] = []  # body bytes read, kept when the deadline cuts the body short
        try:
            with trio.move_on_at(deadline):
                try:
                    target = parse_url(url, allow_http=self.allow_http)
                except ValueError as exc:
                    raise _Failed(f"invalid URL: {exc}") from None
                try:
                    lines = _header_lines(headers)
                except ValueError:  # ours, not the network's: a header we built is unsendable
                    raise _Failed("invalid request headers") from None
                request = format_request("POST", target.target, target.authority, lines, body)
                conn = await self._open(target)
                try:
                    await conn.send(request)
                except Stale:
                    raise _Failed("connection closed while sending the request") from None
                response = await _read_head(conn)
                status = response.status
                retry_after = response.headers.get("retry-after")
                await _read_body(response, parts)
            if status is None:
                error = f"timeout after {self.attempt_timeout_s:g} s"
        except _Failed as exc:
            error = _clip(str(exc))
        finally:
            if conn is not None:
                await conn.aclose()
        duration = trio.current_time() - began
        kept = b"".join(parts)
        return AttemptResult(status, error, retry_after, duration, kept[:BODY_LIMIT])

    async def _open(self, target: Target) -> Connection:
        try:
            addresses = await resolve(target, self.allowed_networks, self.allowed_ports)
        except Refused as exc:
            raise _Failed(f"refused address: {exc.why}") from None
        except PortRefused as exc:
            raise _Failed(f"refused port: {exc.port}") from None
        except OSError:
            raise _Failed("DNS resolution failed") from None
        tcp = await _connect(addresses)
        if target.scheme == "http":
            return Connection(tcp)
        try:
            return await secure(tcp, self._ssl, target.host, https_compatible=True)
        except trio.BrokenResourceError as exc:
            raise _Failed(_tls_error(exc)) from None


async def _read_head(conn: Connection) -> Response:
    """The response head (the attempt's deadline bounds it)."""
    try:
        return await conn.read_head(within_s=math.inf, read_timeout_s=math.inf)
    except (Stale, ConnectionBroken) as exc:
        if exc.eof:
            raise _Failed(
                "invalid response: connection closed before the end of the response head"
            ) from None
        raise _Failed("connection broken while reading the response") from None
    except UpstreamMalformed as exc:
        raise _Failed(f"invalid response: {exc}") from None


async def _read_body(response: Response, parts: list[bytes]) -> None:
    """Up to BODY_LIMIT body bytes into `parts`, best effort: the status already decided the
    attempt."""
    size = 0
    try:
        while size < BODY_LIMIT and (chunk := await response.next_chunk()):
            parts.append(chunk)
            size += len(chunk)
    except UpstreamError:
        pass


async def _connect(addresses: Sequence[SockAddr]) -> trio.SocketStream:
    """A TCP connection to the first checked address that accepts, in resolver order."""
    error = "connection failed"
    for address in addresses:
        family = socket.AF_INET if len(address) == 2 else socket.AF_INET6
        sock = trio.socket.socket(family, socket.SOCK_STREAM)
        try:
            await sock.connect(address)
        except ConnectionRefusedError:
            sock.close()
            error = "connection refused"
            continue
        except OSError as exc:
            sock.close()
            error = _clip(f"connection failed: {exc.strerror or type(exc).__name__}")
            continue
        except BaseException:
            sock.close()
            raise
        return trio.SocketStream(sock)
    raise _Failed(error)
