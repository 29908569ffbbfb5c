"""Signed webhooks against a real HTTP receiver on 127.0.0.1, and signed callbacks into the
inbox: delivered in the background with bounded retries, failures audited, forged or replayed
callbacks refused, the digest binding kept."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from typing import Any

import anyio
import pytest

pytest.importorskip("httpx")
pytest.importorskip("starlette")
import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from anfitrion import DeferredApprover, Effect, Host, Toolbox
from anfitrion.channels import Reviewers
from anfitrion.channels._webhooks import (
    DELIVERY_HEADER,
    SEEN_NAMESPACE,
    SIGNATURE_HEADER,
    ApprovalWebhook,
    signature_header,
    verify_signature,
)
from anfitrion.exceptions import ConfigError
from anfitrion.policy import WebhookTarget, parse_policy
from anfitrion.store import MemoryStore, Store
from anfitrion.testing import ScriptedModel, call
from anfitrion.web import create_app

from .receiver import closed_port, receiver, serve_app

pytestmark = pytest.mark.anyio

SECRET = "whsec-0123456789abcdef"
TOKEN = "inbox-token-0123456789abcdef"
QUORUM_POLICY = """
[[rules]]
tool = "send_email"
verdict = "ask"
quorum = { approvals = 2, roles = ["mail"] }
"""


class Waits:
    """Records the backoff instead of sleeping it."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def _host(store: Store, sent: list[str], listeners: list[Any], policy: str | None = None,
          steps: list[Any] | None = None) -> Host:
    tools = Toolbox()

    @tools.tool(effect=Effect.WRITE, provenance="trusted")
    def send_email(to: str, body: str) -> str:
        """Send an e-mail."""
        sent.append(to)
        return f"sent to {to}"

    model = ScriptedModel(steps if steps is not None else
                          [call("send_email", {"to": "ana@example.com", "body": "hi"}), "done"])
    return Host(model=model, tools=tools, store=store, approver=DeferredApprover(),
                listeners=listeners, policy=parse_policy(policy) if policy else None)


def _signed(body: dict[str, Any], *, secret: str = SECRET, at: float | None = None,
            delivery_id: str | None = None) -> tuple[bytes, dict[str, str]]:
    raw = json.dumps(body).encode()
    delivery = delivery_id or uuid.uuid4().hex
    stamp = int(time.time() if at is None else at)
    return raw, {"content-type": "application/json", DELIVERY_HEADER: delivery,
                 SIGNATURE_HEADER: signature_header([secret], stamp, delivery, raw)}


async def _delivery_types(store: Store) -> list[tuple[str, Any]]:
    return [(r.data.get("status"), r.data.get("detail")) for r in await store.audit_records()
            if r.type == "approval.delivery"]


async def test_a_request_goes_signed_to_a_real_receiver_and_a_signed_callback_answers_it(
) -> None:
    store, sent = MemoryStore(), []
    app = create_app(store, token=TOKEN, allowed_hosts=["127.0.0.1"], callback_secrets=[SECRET])
    with receiver() as bridge, serve_app(app) as inbox:
        hook = ApprovalWebhook(WebhookTarget(bridge.url, secret=SECRET,
                                             callback_url=f"{inbox}/api/v1/approvals/callback"),
                               store)
        run = await _host(store, sent, [hook]).run("mail ana", principal="agent")
        assert run.status == "suspended"
        with anyio.fail_after(30):
            (delivery,) = await hook.drain()
            await hook.aclose()
        assert delivery.delivered and delivery.attempts == 1
        (got,) = bridge.received
        # the receiver checks the signature over the raw body, as docs/approvals.md says
        assert verify_signature([SECRET], got.headers[SIGNATURE_HEADER],
                                got.headers[DELIVERY_HEADER], got.body, now=time.time()) is None
        payload = json.loads(got.body)
        request = payload["request"]
        assert request["id"] == run.pending[0].id and request["digest"] == run.pending[0].digest
        assert payload["answer"]["url"].endswith("/api/v1/approvals/callback")
        assert "ana@example.com" in payload["description"]
        raw, headers = _signed({"request_id": request["id"], "digest": request["digest"],
                                "decision": "approve", "reviewer": "dora"})
        async with httpx.AsyncClient() as client:
            answered = await client.post(payload["answer"]["url"], content=raw, headers=headers)
        assert answered.status_code == 200, answered.text
        assert answered.json()["answer"]["approver"] == "webhook:dora"
    done = await _host(store, sent, [], steps=["done"]).resume(run.session_id)
    assert done.status == "completed" and sent == ["ana@example.com"]
    assert await _delivery_types(store) == [("delivered", await _detail(store))]
    answered_records = [r.data for r in await store.audit_records()
                        if r.type == "approval.answered"]
    assert [r["detail"] for r in answered_records] == ["answered via webhook"]


async def _detail(store: Store) -> Any:
    return next(r.data["detail"] for r in await store.audit_records()
                if r.type == "approval.delivery")


async def test_a_failing_receiver_is_retried_with_backoff_under_one_delivery_id() -> None:
    store, sent = MemoryStore(), []
    waits = Waits()
    with receiver([503, 429, 200]) as bridge:
        hook = ApprovalWebhook(WebhookTarget(bridge.url, secret=SECRET, first_delay=2,
                                             max_delay=3), store, sleep=waits)
        await _host(store, sent, [hook]).run("mail ana", principal="agent")
        with anyio.fail_after(30):
            (delivery,) = await hook.drain()
            await hook.aclose()
    assert delivery.delivered and delivery.attempts == 3
    assert len({r.headers[DELIVERY_HEADER] for r in bridge.received}) == 1
    # exponential, capped at max_delay, with jitter between half and all of it
    assert 1 <= waits.delays[0] <= 2 and 1.5 <= waits.delays[1] <= 3
    assert len(waits.delays) == 2


async def test_an_unreachable_receiver_never_blocks_the_gate_and_its_failure_is_audited(
) -> None:
    store, sent = MemoryStore(), []
    release = anyio.Event()
    waits: list[float] = []

    async def held(seconds: float) -> None:
        waits.append(seconds)
        await release.wait()

    target = WebhookTarget(f"http://127.0.0.1:{closed_port()}/hook", secret=SECRET,
                           max_attempts=3, timeout=5)
    hook = ApprovalWebhook(target, store, sleep=held)
    run = await _host(store, sent, [hook]).run("mail ana", principal="agent")
    assert run.status == "suspended"  # the run went on while the delivery waits to retry
    assert await _delivery_types(store) == []
    release.set()
    with anyio.fail_after(30):
        (delivery,) = await hook.drain()
        await hook.aclose()
    assert not delivery.delivered and delivery.attempts == 3 and "ConnectError" in delivery.error
    ((status, detail),) = await _delivery_types(store)
    assert status == "failed" and "3 attempt(s)" in detail
    assert len(waits) == 2  # bounded: no wait after the last attempt


@pytest.mark.parametrize("status", [400, 403, 301, 302, 307, 308])
async def test_a_receiver_refusing_or_redirecting_is_not_retried(status: int) -> None:
    """A client error or a redirect (never followed: the delivery goes to the configured URL
    only) is the same answer on every try: one attempt, and the audit says why."""
    store, sent = MemoryStore(), []
    with receiver([status] * 5) as bridge:
        hook = ApprovalWebhook(WebhookTarget(bridge.url, secret=SECRET), store, sleep=Waits())
        await _host(store, sent, [hook]).run("mail ana", principal="agent")
        with anyio.fail_after(30):
            (delivery,) = await hook.drain()
            await hook.aclose()
    assert not delivery.delivered and delivery.attempts == 1
    assert f"HTTP {status}" in delivery.error
    assert len(bridge.received) == 1


@pytest.fixture
async def inbox() -> Any:
    store, sent = MemoryStore(), []
    run = await _host(store, sent, []).run("mail ana", principal="agent")
    reviewers = Reviewers.from_tokens({"alice": ("alice-token-0123456789", ["mail"]),
                                       "bob": ("bob-token-0123456789ab", ["mail"]),
                                       "eve": ("eve-token-0123456789abc", ["ops"])})
    app = create_app(store, token=TOKEN, allowed_hosts=["127.0.0.1"],
                     callback_secrets=[SECRET], reviewers=reviewers)
    with serve_app(app) as base:
        async with httpx.AsyncClient(base_url=base) as client:
            yield client, run.pending[0], store


def _decision(request: Any, decision: str = "approve", reviewer: str = "dora",
              digest: str | None = None) -> dict[str, Any]:
    return {"request_id": request.id, "digest": digest or request.digest, "decision": decision,
            "reviewer": reviewer}


async def _post(client: httpx.AsyncClient, raw: bytes, headers: dict[str, str]
                ) -> httpx.Response:
    return await client.post("/api/v1/approvals/callback", content=raw, headers=headers)


async def test_a_callback_signed_with_another_secret_is_refused(inbox: Any) -> None:
    client, request, store = inbox
    raw, headers = _signed(_decision(request), secret="not-the-secret-0123456789")
    response = await _post(client, raw, headers)
    assert response.status_code == 401 and "does not match" in response.json()["message"]
    found = await store.get_approval(request.id)
    assert found.answer is None


async def test_a_callback_whose_body_changed_after_signing_is_refused(inbox: Any) -> None:
    client, request, store = inbox
    raw, headers = _signed(_decision(request, "deny"))
    forged = raw.replace(b'"deny"', b'"approve"')
    assert (await _post(client, forged, headers)).status_code == 401
    assert (await store.get_approval(request.id)).answer is None


@pytest.mark.parametrize("skew", [-301, 301, -3600 * 24])
async def test_a_callback_with_an_old_or_future_timestamp_is_refused(inbox: Any,
                                                                     skew: int) -> None:
    client, request, _ = inbox
    raw, headers = _signed(_decision(request), at=time.time() + skew)
    response = await _post(client, raw, headers)
    assert response.status_code == 401 and "timestamp" in response.json()["message"]


async def test_a_replayed_callback_is_refused(inbox: Any) -> None:
    client, request, _ = inbox
    raw, headers = _signed(_decision(request, "deny"))
    first = await _post(client, raw, headers)
    assert first.status_code == 200
    again = await _post(client, raw, headers)
    assert again.status_code == 401 and "replay" in again.json()["message"]
    # a fresh id with the same content is a new callback: the request is decided, so 409
    raw2, headers2 = _signed(_decision(request, "approve"))
    assert (await _post(client, raw2, headers2)).status_code == 409


@pytest.mark.parametrize("headers", [{}, {DELIVERY_HEADER: "x"},
                                     {DELIVERY_HEADER: "abcdefgh12", SIGNATURE_HEADER: "t=1"},
                                     {DELIVERY_HEADER: "abcdefgh12",
                                      SIGNATURE_HEADER: "v1=" + "0" * 64}])
async def test_a_callback_without_a_well_formed_signature_is_refused(
        inbox: Any, headers: dict[str, str]) -> None:
    client, request, _ = inbox
    response = await client.post("/api/v1/approvals/callback",
                                 content=json.dumps(_decision(request)).encode(),
                                 headers={"content-type": "application/json", **headers})
    assert response.status_code == 401


async def test_a_callback_for_another_digest_is_refused_as_stale(inbox: Any) -> None:
    client, request, store = inbox
    raw, headers = _signed(_decision(request, digest="0" * 64))
    response = await _post(client, raw, headers)
    assert response.status_code == 409 and response.json()["error"] == "stale"
    assert (await store.get_approval(request.id)).answer is None


async def test_a_callback_signed_with_a_rotated_secret_among_several_is_accepted() -> None:
    store, sent = MemoryStore(), []
    run = await _host(store, sent, []).run("mail ana", principal="agent")
    request = run.pending[0]
    app = create_app(store, token=TOKEN, allowed_hosts=["127.0.0.1"],
                     callback_secrets=["old-secret-0123456789", SECRET])
    raw = json.dumps(_decision(request)).encode()
    delivery, stamp = uuid.uuid4().hex, int(time.time())
    header = signature_header(["retired-secret-012345", SECRET], stamp, delivery, raw)
    with serve_app(app) as base:
        async with httpx.AsyncClient(base_url=base) as client:
            response = await _post(client, raw, {"content-type": "application/json",
                                                 DELIVERY_HEADER: delivery,
                                                 SIGNATURE_HEADER: header})
    assert response.status_code == 200, response.text


async def test_callbacks_are_refused_where_no_secret_is_configured() -> None:
    store = MemoryStore()
    app = create_app(store, token=TOKEN, allowed_hosts=["127.0.0.1"])
    with serve_app(app) as base:
        async with httpx.AsyncClient(base_url=base) as client:
            raw, headers = _signed({"request_id": "x", "digest": "0" * 64,
                                    "decision": "approve", "reviewer": "r"})
            assert (await _post(client, raw, headers)).status_code == 404


async def test_webhook_votes_count_toward_a_quorum_once_per_known_reviewer() -> None:
    store, sent = MemoryStore(), []
    run = await _host(store, sent, [], policy=QUORUM_POLICY).run("mail ana", principal="agent")
    request = run.pending[0]
    reviewers = Reviewers.from_tokens({"alice": ("alice-token-0123456789", ["mail"]),
                                       "bob": ("bob-token-0123456789ab", ["mail"]),
                                       "eve": ("eve-token-0123456789abc", ["ops"])})
    app = create_app(store, token=TOKEN, allowed_hosts=["127.0.0.1"],
                     callback_secrets=[SECRET], reviewers=reviewers)
    with serve_app(app) as base:
        async with httpx.AsyncClient(base_url=base) as client:
            first = await _post(client, *_signed(_decision(request, reviewer="alice")))
            assert first.status_code == 202, first.text
            assert first.json()["quorum"]["needed"] == 1
            twice = await _post(client, *_signed(_decision(request, reviewer="alice")))
            assert twice.status_code == 409 and twice.json()["error"] == "already_voted"
            stranger = await _post(client, *_signed(_decision(request, reviewer="mallory")))
            assert stranger.status_code == 403  # not in the reviewers file: no identity
            no_role = await _post(client, *_signed(_decision(request, reviewer="eve")))
            assert no_role.status_code == 403 and no_role.json()["error"] == "unqualified"
            # the API shows who has approved so far
            shown = await client.get(f"/api/v1/approvals/{request.id}",
                                     headers={"authorization": f"Bearer {TOKEN}"})
            assert [v["voter"] for v in shown.json()["quorum"]["votes"]] == ["alice"]
            second = await _post(client, *_signed(_decision(request, reviewer="bob")))
            assert second.status_code == 200
            assert second.json()["answer"]["approver"] == "alice, bob"
    done = await _host(store, sent, [], policy=QUORUM_POLICY, steps=["done"]).resume(
        run.session_id)
    assert done.status == "completed" and sent == ["ana@example.com"]


def test_webhooks_are_declared_in_the_policy_file_and_the_runtime_sends_to_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAT_HOOK_SECRET", SECRET)
    policy = parse_policy("""
[approvals]
ttl = "10m"
[[approvals.webhooks]]
url = "https://chat.example/hooks/approvals"
secret_env = "CHAT_HOOK_SECRET"
callback_url = "https://inbox.example/api/v1/approvals/callback"
max_attempts = 4
""")
    (target,) = policy.approvals.webhooks
    assert (target.url, target.max_attempts, target.resolved_secret()) == \
        ("https://chat.example/hooks/approvals", 4, SECRET)
    from anfitrion._runtime import Runtime

    runtime = Runtime(policy=policy)
    assert any(isinstance(listener, ApprovalWebhook) for listener in runtime.listeners)


@pytest.mark.parametrize("bad", [
    'url = "http://chat.example/hook"\nsecret_env = "S"',  # plain http off loopback
    'url = "https://chat.example/hook"\nsecret = "inline-secret-0123456789"',  # never inline
    'url = "https://chat.example/hook"',
    'url = "ftp://chat.example/hook"\nsecret_env = "S"',
    'url = "https://chat.example/hook"\nsecret_env = "S"\nmax_attempts = 100',
])
def test_a_bad_webhook_in_the_policy_file_is_a_config_error(bad: str) -> None:
    with pytest.raises(ConfigError, match="webhooks"):
        parse_policy(f"[[approvals.webhooks]]\n{bad}\n")


def test_a_runtime_refuses_to_start_when_the_webhook_secret_variable_is_unset(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from anfitrion._runtime import Runtime
    from anfitrion.exceptions import UserError

    monkeypatch.delenv("UNSET_HOOK_SECRET", raising=False)
    policy = parse_policy('[[approvals.webhooks]]\nurl = "https://chat.example/h"\n'
                          'secret_env = "UNSET_HOOK_SECRET"\n')
    with pytest.raises(UserError, match="UNSET_HOOK_SECRET"):
        Runtime(policy=policy)


@settings(max_examples=200, deadline=None)
@given(body=st.binary(min_size=1, max_size=200), position=st.integers(min_value=0),
       flip=st.integers(min_value=1, max_value=255))
def test_changing_any_byte_of_a_signed_body_breaks_its_signature(body: bytes, position: int,
                                                                 flip: int) -> None:
    now = 1_764_614_400
    header = signature_header([SECRET], now, "delivery-1", body)
    assert verify_signature([SECRET], header, "delivery-1", body, now=now) is None
    changed = bytearray(body)
    changed[position % len(body)] ^= flip
    assert verify_signature([SECRET], header, "delivery-1", bytes(changed), now=now) is not None
    assert verify_signature([SECRET], header, "delivery-2", body, now=now) is not None


def test_a_delivery_cut_short_by_the_end_of_its_event_loop_is_audited_as_failed() -> None:
    """run_sync (or a process stopping) ends the loop a delivery runs on: it is not lost
    silently."""
    store, sent = MemoryStore(), []

    async def forever(seconds: float) -> None:
        await anyio.Event().wait()

    hook = ApprovalWebhook(WebhookTarget(f"http://127.0.0.1:{closed_port()}/hook",
                                         secret=SECRET), store, sleep=forever)
    run = _host(store, sent, [hook]).run_sync("mail ana", principal="agent")
    assert run.status == "suspended"
    records = anyio.run(_delivery_types, store)
    assert [status for status, _ in records] == ["failed"]
    assert "stopped before it ended" in records[0][1]


# Forged signature headers, as written by someone who read verify_signature: each keeps a valid
# signature and timestamp, so only the shape of the header is wrong. ``{t}`` is the current
# timestamp and ``{sig}`` the valid v1 for it; the header goes over HTTP in Latin-1, as
# Starlette decodes it.
_VALID_OTHER = "0" * 64
MALFORMED_SIGNATURES = {
    "superscript digit as t": "t=²,v1={sig}",
    "superscript digit after t": "t={t}²,v1={sig}",
    "superscript three and one": "t=³¹,v1={sig}",
    "huge t": "t=" + "9" * 40 + ",v1={sig}",
    "t past 12 digits": "t=1" + "0" * 12 + ",v1={sig}",
    "t with a leading zero": "t=0{t},v1={sig}",
    "t with a plus sign": "t=+{t},v1={sig}",
    "negative t": "t=-{t},v1={sig}",
    "fractional t": "t={t}.0,v1={sig}",
    "hex t": "t=0x1,v1={sig}",
    "empty t": "t=,v1={sig}",
    "no t": "v1={sig}",
    "repeated t": "t={t},t={t},v1={sig}",
    "repeated t, second other": "t={t},t=1,v1={sig}",
    "missing v1": "t={t}",
    "empty v1": "t={t},v1=",
    "short v1": "t={t},v1={sig_short}",
    "long v1": "t={t},v1={sig}0",
    "v1 of Latin-1 letters": "t={t},v1=" + "é" * 64,
    "v1 of non-hex ASCII": "t={t},v1=" + "z" * 64,
    "empty part in the middle": "t={t},,v1={sig}",
    "leading comma": ",t={t},v1={sig}",
    "trailing comma": "t={t},v1={sig},",
    "semicolon separator": "t={t};v1={sig}",
    "space separator": "t={t} v1={sig}",
    "colon instead of equals": "t:{t},v1:{sig}",
    "double equals": "t=={t},v1=={sig}",
    "spaces around equals": "t = {t},v1 = {sig}",
    "uppercase keys": "T={t},V1={sig}",
    "part without equals": "t={t},v1={sig},junk",
    "Latin-1 key": "t={t},v1={sig},ü=1",
    "only commas": ",,,",
    "empty header": "",
    "over-long header": "t={t}" + ",v1=" + _VALID_OTHER * 1 + ("," + "v1=" + _VALID_OTHER) * 60
                        + ",v1={sig}",
}


def _malformed(template: str, request: Any) -> tuple[bytes, dict[str, Any]]:
    raw = json.dumps(_decision(request)).encode()
    delivery, stamp = uuid.uuid4().hex, int(time.time())
    sig = signature_header([SECRET], stamp, delivery, raw).partition(",v1=")[2]
    header = template.format(t=stamp, sig=sig, sig_short=sig[:63])
    return raw, {"content-type": "application/json", DELIVERY_HEADER: delivery,
                 SIGNATURE_HEADER: header.encode("latin-1")}


@pytest.mark.parametrize("template", list(MALFORMED_SIGNATURES.values()),
                         ids=list(MALFORMED_SIGNATURES))
async def test_a_callback_with_a_malformed_signature_header_is_refused_and_answers_nothing(
        inbox: Any, template: str) -> None:
    """A forged header is a 401 with a reason, never a crash (500), and spends no delivery id."""
    client, request, store = inbox
    raw, headers = _malformed(template, request)
    response = await _post(client, raw, headers)
    assert response.status_code == 401, response.text
    assert response.json()["error"] == "bad_signature"
    assert (await store.get_approval(request.id)).answer is None
    assert await store.list_records(SEEN_NAMESPACE) == []


@pytest.mark.parametrize("delivery", ["abcdefgh²", "abcdefgh12\u00a0", "é" * 16, "a" * 65, ""])
async def test_a_callback_with_a_malformed_delivery_id_is_refused(inbox: Any,
                                                                   delivery: str) -> None:
    client, request, store = inbox
    raw, stamp = json.dumps(_decision(request)).encode(), int(time.time())
    signed = f"{stamp}.{delivery}.".encode("latin-1") + raw  # as the bytes on the wire read
    header = f"t={stamp},v1={hmac.new(SECRET.encode(), signed, hashlib.sha256).hexdigest()}"
    response = await _post(client, raw, {"content-type": "application/json",
                                         DELIVERY_HEADER: delivery.encode("latin-1"),
                                         SIGNATURE_HEADER: header})
    assert response.status_code == 401, response.text
    assert (await store.get_approval(request.id)).answer is None


@pytest.mark.parametrize("shape", ["t={t},v1={sig}", "v1={sig},t={t}", "t={t}, v1={sig}",
                                   "t={t},v1={upper}", "t={t},v1={other},v1={sig}",
                                   "t={t},v0={other},v1={sig}"])
def test_a_well_formed_signature_header_in_any_order_or_with_several_v1_holds(
        shape: str) -> None:
    """The refusals above stop at malformed headers: order, rotation, a space after a comma,
    uppercase hex and an unknown scheme next to v1 (Stripe's rule) still verify."""
    now, body = 1_764_614_400, b'{"decision": "approve"}'
    sig = signature_header([SECRET], now, "delivery-1", body).partition(",v1=")[2]
    header = shape.format(t=now, sig=sig, upper=sig.upper(), other=_VALID_OTHER)
    assert verify_signature([SECRET], header, "delivery-1", body, now=now) is None


@pytest.mark.parametrize("digits", ["١٧٦٤٦١٤٤٠٠", "１７６４６１４４００", "𝟏𝟕𝟔𝟒𝟔𝟏𝟒𝟒𝟎𝟎"])
def test_a_timestamp_in_other_scripts_digits_is_refused(digits: str) -> None:
    """int() reads Arabic-Indic, fullwidth and mathematical digits as the same number: a
    signature for t=1764614400 must not verify under another spelling of it."""
    now, body = 1_764_614_400, b"{}"
    assert int(digits) == now
    sig = signature_header([SECRET], now, "delivery-1", body).partition(",v1=")[2]
    problem = verify_signature([SECRET], f"t={digits},v1={sig}", "delivery-1", body, now=now)
    assert problem == "the signature header is missing or malformed"


@settings(max_examples=500, deadline=None)
@given(header=st.text(max_size=300), delivery=st.text(max_size=80))
def test_verifying_any_header_text_returns_a_reason_and_never_raises(header: str,
                                                                      delivery: str) -> None:
    problem = verify_signature([SECRET], header, delivery, b"{}", now=1_764_614_400)
    assert isinstance(problem, str)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.tuples(st.sampled_from(["t", "v1", "T", "v0", "", " t", "v1 "]),
                                st.sampled_from(["=", "==", ":", ""]),
                                st.one_of(st.text(max_size=70),
                                          st.sampled_from(["1764614400", "²", "0" * 64,
                                                           "é" * 64, ""]))),
                      max_size=6),
       separator=st.sampled_from([",", ";", ", ", " ", ",,"]))
def test_verifying_header_shaped_text_returns_a_reason_and_never_raises(
        parts: list[tuple[str, str, str]], separator: str) -> None:
    header = separator.join(k + eq + v for k, eq, v in parts)
    problem = verify_signature([SECRET], header, "delivery-1", b"{}", now=1_764_614_400)
    assert isinstance(problem, str)
