"""E-mail, propose then confirm: ``draft_email`` records a draft, ``send_email`` sends it.

``draft_email`` writes the draft to the outbox — the store's ``drafts`` records — and returns its
id and digest. Nothing leaves the host, so the tool is declared ``Effect.READ``: it changes no
state outside the host's own store, the default policy allows it, and the control point is the
send. (An operator who wants drafts to need approval too adds a policy rule for ``draft_email``.)

``send_email`` is a write: by default the policy asks a person. Its arguments are the draft id
*and* the draft's recipients, subject and body, so the approval request — rendered from the
arguments and bound to them by digest — shows the person exactly what will be sent, and policy
rules can constrain the recipients like any argument (e.g. their domains). It sends only when those
arguments hash to the stored draft, the draft is the caller's, and it was never sent (see
:mod:`anfitrion._drafts`).

Addresses are plain ASCII ``local@domain`` (international domains in punycode, ``xn--…``), so a
look-alike domain cannot hide in the approval request; the local part has no ``%`` or ``!``
(old relay routing syntax that could carry mail on to another domain); subjects are one line,
refusing every character a mail library or client may break a line on — CR, LF, NEL (U+0085),
the Unicode line and paragraph separators — so no header can be injected; the operator may also
restrict recipient domains here. Delivery goes to a local Maildir
by default, or to an SMTP server when configured.
"""

from __future__ import annotations

import mailbox
import re
import smtplib
import ssl
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from pathlib import Path
from typing import Any

import anyio.to_thread

from .._conversation import Provenance
from .._drafts import Draft, Drafts
from .._tools import Effect, Tool, Toolbox, ToolContext
from ..exceptions import ArgumentError, ToolDefinitionError, ToolNotExecuted
from ..store import DraftStore

__all__ = ["SmtpSettings", "check_address", "mail"]

# RFC 5322 atext without "%" and "!": user%other.example@allowed.example and bang paths are
# relay routing, which would let an allowed domain forward the mail to any other
_LOCAL = re.compile(r"[A-Za-z0-9#$&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9#$&'*+/=?^_`{|}~-]+)*")
_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")
MAX_SUBJECT_CHARS = 200


@dataclass(frozen=True, slots=True)
class SmtpSettings:
    """Where to send through SMTP instead of the local Maildir.

    ``STARTTLS`` verifies the server's certificate and name (system CAs, or *tls_context* for a
    private CA): without that, anyone on the path could pose as the server and receive the
    password. A user name without ``STARTTLS`` is refused, for the same reason.
    """

    host: str
    port: int = 587
    starttls: bool = True
    username: str | None = None
    password: str | None = None
    timeout: float = 30.0
    tls_context: ssl.SSLContext | None = None


def check_address(address: Any, field: str = "to") -> str:
    """A plain ASCII ``local@domain`` address, lower-cased domain; :class:`ArgumentError` if not.

    Example:
        >>> check_address("Ana@Example.COM")
        'Ana@example.com'
    """
    if not isinstance(address, str) or len(address) > 254:
        raise ArgumentError(f"{field}: an address must be a string of at most 254 characters",
                            field=field)
    if "@" not in address:
        raise ArgumentError(f"{field}: {address!r} is not an e-mail address (expected "
                            "'name@example.com')", field=field)
    if not address.isascii():
        raise ArgumentError(f"{field}: {address!r} has non-ASCII characters; write "
                            "international domains in punycode (xn--…)", field=field)
    local, at, domain = address.rpartition("@")
    if not at or not _LOCAL.fullmatch(local) or len(local) > 64:
        raise ArgumentError(f"{field}: {address!r} is not a plain address like "
                            "'name@example.com' (no display names, spaces or brackets)",
                            field=field)
    labels = domain.split(".")
    if len(labels) < 2 or not all(_LABEL.fullmatch(label) for label in labels):
        raise ArgumentError(f"{field}: {address!r} has an invalid domain", field=field)
    return f"{local}@{domain.lower()}"


def _domain_allowed(domain: str, allowed: frozenset[str]) -> bool:
    return any(domain == d or domain.endswith("." + d) for d in allowed)


def mail(store: DraftStore, *, sender: str, maildir: str | Path | None = None,
         smtp: SmtpSettings | None = None, allowed_domains: Iterable[str] | None = None,
         max_recipients: int = 10, max_body_chars: int = 20_000,
         namespace: str = "drafts") -> Toolbox:
    """The mail toolkit: ``draft_email`` (allowed by default) and ``send_email`` (asks).

    Args:
        store: where drafts live (the host's store or another).
        sender: the From address; chosen by the operator, never by the model.
        maildir: the local Maildir delivered to (created if missing). The default delivery.
        smtp: send through this SMTP server instead.
        allowed_domains: if given, recipients must be in these domains (or their subdomains);
            checked at validate, in addition to whatever the policy says.
        max_recipients: most recipients per e-mail.
        max_body_chars: longest body.
        namespace: the store records namespace of the drafts.

    Raises:
        ToolDefinitionError: neither or both of *maildir* and *smtp*, an invalid sender, or
            SMTP credentials without ``STARTTLS``.
    """
    if (maildir is None) == (smtp is None):
        raise ToolDefinitionError("mail needs exactly one of maildir= or smtp=")
    if smtp is not None and smtp.username is not None and not smtp.starttls:
        raise ToolDefinitionError("mail: an SMTP user name needs starttls=True; the password "
                                  "would otherwise cross the network in clear")
    try:
        from_address = check_address(sender, "sender")
    except ArgumentError as exc:
        raise ToolDefinitionError(str(exc)) from None
    allowed = None if allowed_domains is None else frozenset(
        d.lower().lstrip("@") for d in allowed_domains)
    mailer = _Mailer(Drafts(store, kind="email", namespace=namespace), from_address,
                     maildir, smtp, allowed, max_recipients, max_body_chars)
    return Toolbox([
        Tool.from_function(mailer.draft_email, effect=Effect.READ,
                           provenance=Provenance.TRUSTED, validator=mailer.validate,
                           metadata={"draft": "propose"}),
        # one effect per draft (sent once), and a send that is not its draft is refused
        # before a person is asked
        Tool.from_function(mailer.send_email, effect=Effect.WRITE,
                           provenance=Provenance.TRUSTED, validator=mailer.validate,
                           metadata={"draft": "commit", "preview": "email"},
                           effect_key="draft:{draft_id}",
                           effect_scope="principal", precheck=mailer.send_precheck),
    ])


@dataclass(frozen=True)
class _Mailer:
    """The mail tools' configuration, their validator, and delivery."""

    drafts: Drafts
    from_address: str
    maildir: str | Path | None
    smtp: SmtpSettings | None
    allowed: frozenset[str] | None
    max_recipients: int
    max_body_chars: int

    def validate(self, arguments: Mapping[str, Any]) -> None:
        to = arguments.get("to")
        if not isinstance(to, list) or not to:
            raise ArgumentError("to: give at least one recipient", field="to")
        if len(to) > self.max_recipients:
            raise ArgumentError(f"to: at most {self.max_recipients} recipients", field="to")
        for address in to:
            checked = check_address(address)
            if checked != address:
                raise ArgumentError(f"to: write {address!r} as {checked!r}", field="to")
            domain = checked.rpartition("@")[2]
            if self.allowed is not None and not _domain_allowed(domain, self.allowed):
                raise ArgumentError(f"to: e-mail to {domain!r} is not allowed (allowed: "
                                    f"{', '.join(sorted(self.allowed))})", field="to")
        if len(set(to)) != len(to):
            raise ArgumentError("to: a recipient is listed twice", field="to")
        subject = arguments.get("subject", "")
        if not isinstance(subject, str) or len(subject) > MAX_SUBJECT_CHARS \
                or any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in subject):
            raise ArgumentError(f"subject must be one line of at most {MAX_SUBJECT_CHARS} "
                                "characters, without control characters", field="subject")
        body = arguments.get("body", "")
        if not isinstance(body, str) or len(body) > self.max_body_chars or "\x00" in body:
            raise ArgumentError(f"body must be text of at most {self.max_body_chars} characters",
                                field="body")

    def _message_for(self, draft: Draft) -> EmailMessage:
        message = EmailMessage()
        message["From"] = self.from_address
        message["To"] = ", ".join(str(a) for a in draft.content["to"])  # type: ignore[union-attr]
        message["Subject"] = str(draft.content["subject"])
        message["Date"] = formatdate(localtime=False, usegmt=True)
        message["Message-ID"] = make_msgid(domain=self.from_address.rpartition("@")[2])
        message["X-Anfitrion-Draft"] = f"{draft.id} sha256:{draft.digest}"
        message.set_content(str(draft.content["body"]))
        return message

    def _deliver_now(self, message: EmailMessage, recipients: list[str]) -> None:
        smtp = self.smtp
        if smtp is None:
            box = mailbox.Maildir(str(self.maildir), create=True)
            box.add(message)
            return
        # A refusal before the message is handed over provably sent nothing: the call failed
        # (ToolNotExecuted), so nobody is asked whether it happened. Anything after the
        # hand-over began (a reply lost, a timeout) leaves the outcome unknown.
        try:
            client = smtplib.SMTP(smtp.host, smtp.port, timeout=smtp.timeout)
        except (OSError, smtplib.SMTPException) as exc:
            raise ToolNotExecuted(f"cannot reach the mail server {smtp.host}:{smtp.port}: "
                                  f"{type(exc).__name__}; nothing was sent") from None
        with client:
            try:
                if smtp.starttls:  # smtplib's own default context checks no certificate
                    client.starttls(context=smtp.tls_context or ssl.create_default_context())
                if smtp.username is not None:
                    client.login(smtp.username, smtp.password or "")
            except (OSError, smtplib.SMTPException) as exc:
                raise ToolNotExecuted(f"the mail server refused the session before the message "
                                      f"({type(exc).__name__}); nothing was sent") from None
            try:
                client.send_message(message, from_addr=self.from_address, to_addrs=recipients)
            except (smtplib.SMTPSenderRefused, smtplib.SMTPRecipientsRefused) as exc:
                raise ToolNotExecuted(f"the mail server refused the message "
                                      f"({type(exc).__name__}); nothing was sent") from None

    async def draft_email(self, to: list[str], subject: str, body: str,
                          context: ToolContext) -> dict[str, Any]:
        """Write an e-mail draft to the outbox; nothing is sent.

        Returns a draft id. To send the draft, call send_email with that draft_id and exactly
        the same to, subject and body; a person will be asked to approve it.

        Args:
            to: Recipient addresses, e.g. ["ana@example.com"].
            subject: One line.
            body: The text of the e-mail.
        """
        draft = await self.drafts.propose({"to": list(to), "subject": subject, "body": body},
                                     context)
        return {"draft_id": draft.id, "digest": draft.digest, "status": "drafted, not sent",
                "from": self.from_address,
                "next": "to send it, call send_email with this draft_id and the same to, "
                        "subject and body"}

    async def send_email(self, draft_id: str, to: list[str], subject: str, body: str,
                         context: ToolContext) -> dict[str, Any]:
        """Send one e-mail draft made with draft_email, after a person approves it.

        Repeat the draft's to, subject and body exactly; a changed e-mail needs a new draft.
        Only send what the user asked to send.

        Args:
            draft_id: The id draft_email returned.
            to: The draft's recipients, unchanged.
            subject: The draft's subject, unchanged.
            body: The draft's body, unchanged.
        """
        content = {"to": list(to), "subject": subject, "body": body}

        async def deliver(draft: Draft) -> str:
            message = self._message_for(draft)
            await anyio.to_thread.run_sync(self._deliver_now, message, list(to))
            return str(message["Message-ID"])

        message_id = await self.drafts.commit(draft_id, content, context, deliver)
        return {"sent": draft_id, "to": list(to), "message_id": message_id}

    async def send_precheck(self, arguments: dict[str, Any], context: ToolContext) -> str | None:
        content = {"to": list(arguments["to"]), "subject": arguments["subject"],
                   "body": arguments["body"]}
        return await self.drafts.problem(arguments["draft_id"], content, context.principal.id)
