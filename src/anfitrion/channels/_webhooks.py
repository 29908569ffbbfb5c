"""Signed webhooks: approval requests sent to a URL, answers taken back through a signed callback.

**Signature format** (the same both ways, like Stripe's and Standard Webhooks')::

    Anfitrion-Delivery: 3f1c0e6b9a8d4c21b7e5f0a2d9c8b7a6        (a fresh id per message)
    Anfitrion-Signature: t=1764614400,v1=5d41402abc4b2a76b9719d911017c592...

``v1`` is the lowercase hex HMAC-SHA256, keyed with the shared secret (UTF-8), of the bytes
``f"{t}.{delivery_id}."`` followed by the exact request body. ``t`` is Unix seconds. A receiver
recomputes it over the raw body (never a re-serialisation), compares in constant time, refuses a
``t`` more than five minutes away from its clock, and refuses a delivery id it has seen. While
a secret is rotated, several ``v1=`` may be sent; one valid one suffices. A header of another
shape (a ``t`` not in ASCII digits or repeated, an empty part, no ``v1``) is refused, never read
as best it can be.

**Out**: :class:`ApprovalWebhook` is a :class:`~anfitrion._events.HostEvent` listener (give it to
``Runtime(listeners=...)``, or declare ``[[approvals.webhooks]]`` in the policy file). On every
``approval.requested`` it starts a delivery in the background — the gate never waits for it —
and retries with bounded exponential backoff and jitter (network errors, 408, 429, 5xx) until
it is accepted, the attempts are spent or the request expired. Every delivery's outcome is
audited (``approval.delivery``, status ``delivered`` or ``failed``). Each attempt of one
delivery carries the same delivery id (receivers deduplicate by it) and a fresh signature.

**In**: :class:`CallbackVerifier` checks a callback's signature, timestamp and delivery id (kept
in the store, so a replay is refused after a restart and by every process sharing the store);
the inbox app's ``POST /api/v1/approvals/callback`` then answers through
:func:`anfitrion._answers.answer` with ``via="webhook"`` — bound to the digest the callback names.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import random
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from .._approvals import ApprovalRequest
from .._events import EventType, HostEvent
from ..exceptions import UserError
from ..policy import WebhookTarget

if TYPE_CHECKING:
    import httpx

    from ..store import AuditStore, RecordStore


__all__ = ["DELIVERY_HEADER", "SIGNATURE_HEADER", "TOLERANCE_SECONDS", "ApprovalWebhook",
           "CallbackVerifier", "Delivery", "sign", "signature_header",
           "verify_signature"]

log = logging.getLogger("anfitrion.webhooks")

DELIVERY_HEADER = "anfitrion-delivery"
SIGNATURE_HEADER = "anfitrion-signature"
TOLERANCE_SECONDS = 300
"""How far a signed timestamp may be from the receiver's clock."""
MIN_SECRET_CHARS = WebhookTarget.MIN_SECRET_CHARS
SEEN_NAMESPACE = "webhook.callbacks"
"""Store records: the delivery ids of callbacks already accepted."""
_DELIVERY_ID = re.compile(r"[A-Za-z0-9_-]{8,64}")
MAX_SIGNATURE_HEADER_CHARS = 2048
"""Longer signature headers are refused unread (room for some thirty ``v1=``)."""
# ASCII only, whole parts only: str.isdigit() and int() also take "²" and "١٧٦٤" (the first
# crashed int(), the second read as a valid timestamp), and hmac.compare_digest raises on
# non-ASCII text.
_PART = re.compile(r"([a-z][a-z0-9]{0,15})=([\x21-\x7e]+)", re.ASCII)
_TIMESTAMP = re.compile(r"0|[1-9][0-9]{0,11}", re.ASCII)
_SIGNATURE = re.compile(r"[0-9a-fA-F]{64}", re.ASCII)
_MALFORMED = "the signature header is missing or malformed"


def sign(secret: str, timestamp: int, delivery_id: str, body: bytes) -> str:
    """The hex HMAC-SHA256 of ``f"{timestamp}.{delivery_id}."`` + *body* under *secret*."""
    message = f"{timestamp}.{delivery_id}.".encode("ascii") + body
    return hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


def signature_header(secrets: Sequence[str], timestamp: int, delivery_id: str,
                     body: bytes) -> str:
    """``t=<timestamp>,v1=<sig>[,v1=<sig>…]``: one signature per secret (rotation)."""
    return ",".join([f"t={timestamp}", *(f"v1={sign(s, timestamp, delivery_id, body)}"
                                         for s in secrets)])


def _parse_signature_header(header: str) -> tuple[int, list[str]] | None:
    """The timestamp and the ``v1`` signatures of *header*, or ``None`` if it is malformed.

    Well formed: comma-separated ``key=value`` parts (spaces or tabs around a part allowed),
    exactly one ``t`` in ASCII decimal without sign or leading zero (at most 12 digits), at
    least one ``v1`` of 64 hex digits; another lowercase key is ignored (a future scheme sent
    next to ``v1``). Anything else — an empty part, a repeated ``t``, a non-ASCII character, a
    header over :data:`MAX_SIGNATURE_HEADER_CHARS` — makes the whole header malformed.
    """
    if len(header) > MAX_SIGNATURE_HEADER_CHARS:
        return None
    timestamp: int | None = None
    given: list[str] = []
    for part in header.split(","):
        match = _PART.fullmatch(part.strip(" \t"))
        if match is None:
            return None
        key, value = match.groups()
        if key == "t":
            if timestamp is not None or not _TIMESTAMP.fullmatch(value):
                return None
            timestamp = int(value)
        elif key == "v1":
            if not _SIGNATURE.fullmatch(value):
                return None
            given.append(value.lower())
    if timestamp is None or not given:
        return None
    return timestamp, given


def verify_signature(secrets: Sequence[str], header: str, delivery_id: str, body: bytes, *,
                     now: float, tolerance: int = TOLERANCE_SECONDS) -> str | None:
    """Why the signature does not hold, or ``None`` when it does (format: module docstring).

    Never raises on what a sender controls: a malformed *header* (what is well formed:
    :func:`_parse_signature_header`) or *delivery_id* is a reason."""
    if not _DELIVERY_ID.fullmatch(delivery_id):
        return "the delivery id is missing or malformed"
    parsed = _parse_signature_header(header)
    if parsed is None:
        return _MALFORMED
    timestamp, given = parsed
    if abs(now - timestamp) > tolerance:
        return "the signed timestamp is too old or in the future (replay?)"
    valid = False
    for secret in secrets:
        expected = sign(secret, timestamp, delivery_id, body)
        for candidate in given:  # every pair compared: no early exit on a match
            valid |= hmac.compare_digest(expected, candidate)
    return None if valid else "the signature does not match"


@dataclass(frozen=True, slots=True)
class Delivery:
    """How one delivery ended."""

    delivery_id: str
    request_id: str
    delivered: bool
    attempts: int
    last_status: int | None
    error: str = ""


def delivery_body(request: ApprovalRequest, delivery_id: str, callback_url: str | None,
                  ) -> bytes:
    """What a receiver gets: the request, the text a person should read, how to answer."""
    payload: dict[str, Any] = {
        "type": "approval.requested", "delivery_id": delivery_id,
        "request": request.to_dict(), "description": request.describe(),
        "answer": {"url": callback_url, "method": "POST",
                   "body": {"request_id": request.id, "digest": request.digest,
                            "decision": "approve | deny", "reviewer": "<who decided>",
                            "note": ""}}}
    return json.dumps(payload, ensure_ascii=False, sort_keys=True).encode("utf-8")


Sleep = Callable[[float], Awaitable[None]]


class ApprovalWebhook:
    """A listener sending every new approval request to *target* (module docstring).

    Args:
        target: the URL and its secret.
        store: where delivery outcomes are audited (the runtime's store).
        transport: an ``httpx`` transport (tests); default a real HTTP client.
        sleep: how to wait between attempts (tests may make it instant).

    Example:
        >>> from anfitrion.store import MemoryStore
        >>> hook = ApprovalWebhook(WebhookTarget("https://chat.example/hook",
        ...                                      secret="a-long-shared-secret"), MemoryStore())
    """

    def __init__(self, target: WebhookTarget, store: AuditStore, *,
                 transport: httpx.AsyncBaseTransport | None = None,
                 sleep: Sleep = asyncio.sleep,
                 clock: Callable[[], float] = time.time) -> None:
        self.target = target
        self.store = store
        self._secret = target.resolved_secret()
        self._transport = transport
        self._sleep = sleep
        self._clock = clock
        self._tasks: set[asyncio.Task[Delivery]] = set()
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    async def _http(self) -> httpx.AsyncClient:
        """The listener's HTTP client, made once — in a worker thread, because building its TLS
        context reads the CA bundle (tens of milliseconds that would stall the gate's loop)."""
        import httpx

        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:  # a client serves one loop
            client = await anyio.to_thread.run_sync(lambda: httpx.AsyncClient(
                transport=self._transport, timeout=self.target.timeout,
                follow_redirects=False))
            if self._client is not None and self._client_loop is loop:
                await client.aclose()  # another delivery made one meanwhile
            else:
                self._client, self._client_loop = client, loop
        return self._client

    async def aclose(self) -> None:
        """Wait for the deliveries in flight, then close the HTTP client."""
        await self.drain()
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    def __call__(self, event: HostEvent) -> None:
        if event.type is not EventType.APPROVAL_REQUESTED or event.request is None:
            return
        task = asyncio.get_running_loop().create_task(self.deliver(event.request))
        self._tasks.add(task)  # held until done: the loop keeps only weak references
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> list[Delivery]:
        """Wait for the deliveries in flight (before a process exits; tests)."""
        found: list[Delivery] = []
        while self._tasks:
            found += await asyncio.gather(*list(self._tasks))
        return found

    async def deliver(self, request: ApprovalRequest) -> Delivery:
        """Send *request*, retrying as configured; the outcome is audited. Never raises but
        for a cancellation (the loop ending: ``run_sync``, a process stopping), which is
        audited as a failed delivery first."""
        delivery_id = uuid.uuid4().hex
        try:
            return await self._deliver(request, delivery_id)
        except asyncio.CancelledError:
            with anyio.CancelScope(shield=True):
                await self._audit(request, Delivery(
                    delivery_id, request.id, False, 0, None,
                    "stopped before it ended (the event loop or the process ended)"))
            raise

    async def _deliver(self, request: ApprovalRequest, delivery_id: str) -> Delivery:
        body = delivery_body(request, delivery_id, self.target.callback_url)
        status: int | None = None
        error = ""
        attempt = 0
        try:
            client = await self._http()
        except ImportError:
            outcome = Delivery(delivery_id, request.id, False, 0, None,
                               "httpx is not installed: pip install 'anfitrion[http]'")
            await self._audit(request, outcome)
            return outcome
        import httpx

        while attempt < self.target.max_attempts:
            attempt += 1
            now = int(self._clock())
            headers = {"content-type": "application/json", DELIVERY_HEADER: delivery_id,
                       SIGNATURE_HEADER: signature_header([self._secret], now,
                                                          delivery_id, body),
                       "user-agent": "anfitrion-webhook/1"}
            try:
                response = await client.post(self.target.url, content=body,
                                             headers=headers)
                status, error = response.status_code, ""
            except httpx.HTTPError as exc:
                status, error = None, f"{type(exc).__name__}: {exc}"[:300]
            if status is not None and 200 <= status < 300:
                outcome = Delivery(delivery_id, request.id, True, attempt, status)
                await self._audit(request, outcome)
                return outcome
            if status is not None and 300 <= status < 400:
                error = f"the receiver answered HTTP {status}: redirects are not followed"
                break  # the same answer again: give the webhook's final URL
            if status is not None and 400 <= status < 500 and status not in (408, 429):
                error = f"the receiver refused it with HTTP {status}"
                break  # a permanent refusal: retrying sends the same thing again
            if status is not None:
                error = f"HTTP {status}"
            if request.expired(datetime.now(UTC)):
                error += " (the request expired: not retried)"
                break
            if attempt < self.target.max_attempts:
                pause = self.target.delay(attempt)
                await self._sleep(pause * (0.5 + random.random() / 2))
        outcome = Delivery(delivery_id, request.id, False, attempt, status, error)
        log.warning("webhook delivery of approval request %s to %s failed after %d "
                    "attempt(s): %s", request.id, self.target.url, attempt, error)
        await self._audit(request, outcome)
        return outcome

    async def _audit(self, request: ApprovalRequest, outcome: Delivery) -> None:
        from .._audit import AuditRecorder  # the recorder's module imports the store package

        recorder = AuditRecorder(self.store)
        detail = (f"to {self.target.url} in {outcome.attempts} attempt(s), delivery "
                  f"{outcome.delivery_id}" + (f": {outcome.error}" if outcome.error else ""))
        try:
            await recorder(HostEvent(EventType.APPROVAL_DELIVERY, request.session_id, 0,
                                     request.principal_id, request.call_id, request.tool_name,
                                     request=request,
                                     status="delivered" if outcome.delivered else "failed",
                                     detail=detail))
            await recorder.flush()
        except Exception:  # BLE001 - the top of a background task: the delivery's outcome is logged
            log.exception("could not audit the webhook delivery of %s", request.id)


def webhook_listeners(store: AuditStore, targets: Sequence[WebhookTarget]
                      ) -> list[ApprovalWebhook]:
    """One listener per target (what a runtime adds for its policy's webhooks)."""
    return [ApprovalWebhook(t, store) for t in targets]


class CallbackVerifier:
    """Checks signed callbacks: a valid signature under one of *secrets*, a fresh timestamp,
    and a delivery id never accepted before (recorded in *store*).

    Args:
        secrets: the shared secrets callbacks may be signed with (rotation: several).
        tolerance: seconds a timestamp may be away from now.
    """

    def __init__(self, secrets: Sequence[str], store: RecordStore, *,
                 tolerance: int = TOLERANCE_SECONDS,
                 clock: Callable[[], float] = time.time) -> None:
        if not secrets or any(len(s) < MIN_SECRET_CHARS for s in secrets):
            raise UserError(f"callback secrets need at least {MIN_SECRET_CHARS} characters")
        self.secrets = tuple(secrets)
        self.store = store
        self.tolerance = tolerance
        self._clock = clock

    async def check(self, headers: Mapping[str, str], body: bytes) -> str | None:
        """Why the callback is refused, or ``None`` when it may be acted on (and its delivery
        id is now spent: the same callback sent again is a replay)."""
        delivery_id = headers.get(DELIVERY_HEADER, "")
        now = self._clock()
        problem = verify_signature(self.secrets, headers.get(SIGNATURE_HEADER, ""),
                                   delivery_id, body, now=now, tolerance=self.tolerance)
        if problem is not None:
            return problem
        # one insert-if-absent in the store, not a read then a write: two inbox processes
        # sharing the store must not both take the same replayed callback
        if not await self.store.create_record(SEEN_NAMESPACE, delivery_id, {"at": now}):
            return "this delivery id was used already (replay)"
        return None
