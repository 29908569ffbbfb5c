"""What a tool declares about where harm can happen: its data flow (:class:`Dataflow`).

A tool carries its own (:attr:`anfitrion._tools.Tool.dataflow`); the policy file declares one
for tools the operator does not own (``[tools."<name>"]``, :mod:`anfitrion.policy._declarations`,
which offers this class under its policy path too). Below both the tools and the policy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .exceptions import UserError

__all__ = ["AMOUNT_KINDS", "PARTY_FIELDS", "SINK_KINDS", "Dataflow"]

SINK_KINDS = ("recipient", "url", "account", "phone", "reference", "channel", "money",
              "quantity", "date")
"""The kinds of sink: an e-mail address or user name, a URL or host, an account number or
IBAN, a phone number, a file or object reference (a path, an id), a channel name; and the
amounts of an outward or financial action: a sum of money, a quantity, a date."""

AMOUNT_KINDS = frozenset({"money", "quantity"})
"""Sink kinds compared as numbers (``100``, ``100.00`` and ``$100`` are one amount)."""

PARTY_FIELDS = frozenset({"sender", "from", "recipient", "recipients", "to", "cc", "bcc",
                          "participants", "owner", "organizer", "author", "shared_with"})
"""Result fields that name a *party* of the conversation rather than an object, whatever a
declaration calls them: under ``reads="proven"`` a value read there from untrusted content
proves nothing (the sender of an injected e-mail is the attacker)."""


def _names(value: Any, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, Iterable) or isinstance(value, Mapping):
        raise UserError(f"{what} must be a list of argument names")
    names = tuple(value)
    for name in names:
        if not isinstance(name, str) or not name or name.startswith(".") or \
                name.endswith(".") or ".." in name:
            raise UserError(f"{what}: {name!r} is not an argument name (a dotted path)")
    return names


_VERB = re.compile(r"[a-z]+(?:[- ][a-z]+){0,3}")
_NAME_SMALL_WORDS = frozenset({"to", "by", "for", "of", "on", "in", "at", "from", "with",
                               "and", "or", "the", "an", "new", "my"})

FIELDS = frozenset({"sinks", "outward", "destructive", "service_ids", "parties", "directory",
                    "id_nouns", "verbs"})
"""The keys of a data-flow declaration (a policy file's ``[tools."<name>"]`` data-flow keys)."""


@dataclass(frozen=True, slots=True)
class Dataflow:
    """Where a tool's arguments and results lead (all optional).

    Attributes:
        sinks: argument path → kind (one of :data:`SINK_KINDS`): the arguments that choose
            who, where or which. Their values must be proven — written by the principal or
            a trusted result, or minted by a service — for the call to run unasked after
            taint.
        outward: argument paths whose text goes to another party (an e-mail's body, a
            message, a page). An unproven e-mail address, URL, account or phone number in it
            asks.
        destructive: argument paths naming what the call deletes, cancels or removes.
        service_ids: result fields (keys of the JSON result, at any depth) whose values a
            trusted system minted: a value found there is proven even in an untrusted result.
            Under ``reads="proven"`` only *object* ids (a file, an event, a transaction) do:
            a field in :data:`PARTY_FIELDS` or in *parties* proves nothing when read from
            untrusted content, unless the tool is a *directory*.
        parties: the result fields naming a party (a sender, a participant, an owner);
            ``None``: the service ids named as in :data:`PARTY_FIELDS` (declare ``[]`` or a
            list when a field so named holds an object, as a chat's channel ``recipient``).
        directory: the tool lists the user's own contacts or a directory the operator
            trusts: its party fields prove recipients even under ``reads="proven"`` — unless
            the look-up was chosen by what the session read (a call proposed after the first
            untrusted result with an argument nothing proves: an injection's "David").
        id_nouns: argument path → the nouns a person writes before such an id (``file`` for
            ``file_id``; derived from the path when not declared). A number the user wrote
            proves an id only next to one of them (``file 13``, ``file id 13``, ``#13``):
            the ``1.`` of a numbered list or ``4 hours`` proves nothing.
        verbs: the words with which a person asks for the tool's action (``send``,
            ``email``, ``reply`` for an e-mail; ``None``: the words of the tool's name). Under
            ``reads="proven"``, after untrusted content was read, a write to another party
            (a recipient, channel, account, phone or URL sink) runs unasked only when the
            user's words hold one of them, used as a verb: a reader the user named for one
            action (an invitation) is not theirs for another (an e-mail).

    Raises:
        ValueError: a name is empty or not a dotted path, or a sink kind is unknown.
    """

    sinks: Mapping[str, str] = field(default_factory=dict)
    outward: tuple[str, ...] = ()
    destructive: tuple[str, ...] = ()
    service_ids: tuple[str, ...] = ()
    parties: tuple[str, ...] | None = None
    directory: bool = False
    id_nouns: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    verbs: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.sinks, Mapping):
            raise UserError("sinks must map argument names to a kind")
        _names(tuple(self.sinks), "sinks")
        for name, kind in self.sinks.items():
            if kind not in SINK_KINDS:
                raise UserError(f"sink {name!r}: kind must be one of "
                                 f"{', '.join(SINK_KINDS)}, not {kind!r}")
        object.__setattr__(self, "sinks", dict(self.sinks))
        object.__setattr__(self, "outward", _names(self.outward, "outward"))
        object.__setattr__(self, "destructive", _names(self.destructive, "destructive"))
        service = _names(self.service_ids, "service_ids")
        if any("." in s for s in service):
            raise UserError("service_ids are result field names (no dots)")
        object.__setattr__(self, "service_ids", service)
        if self.parties is not None:
            parties = _names(self.parties, "parties")
            if any("." in s for s in parties):
                raise UserError("parties are result field names (no dots)")
            object.__setattr__(self, "parties", parties)
        if not isinstance(self.directory, bool):
            raise UserError("directory must be true or false")
        if not isinstance(self.id_nouns, Mapping):
            raise UserError("id_nouns must map argument names to lists of nouns")
        _names(tuple(self.id_nouns), "id_nouns")
        nouns: dict[str, tuple[str, ...]] = {}
        for name, words in self.id_nouns.items():
            words = (words,) if isinstance(words, str) else words
            if not isinstance(words, Iterable) or isinstance(words, Mapping) or not all(
                    isinstance(w, str) and re.fullmatch(r"[a-z][a-z-]{0,31}", w)
                    for w in words):
                raise UserError(f"id_nouns {name!r}: a list of lower-case nouns")
            nouns[name] = tuple(words)
        object.__setattr__(self, "id_nouns", nouns)
        if self.verbs is not None:
            verbs = (self.verbs,) if isinstance(self.verbs, str) else self.verbs
            if not isinstance(verbs, Iterable) or isinstance(verbs, Mapping) or not verbs or \
                    not all(isinstance(w, str) and _VERB.fullmatch(w) for w in verbs):
                raise UserError("verbs: a non-empty list of lower-case words (letters, "
                                "'-' and single spaces: 'send', 'e-mail', 'write back')")
            object.__setattr__(self, "verbs", tuple(verbs))

    @property
    def declared(self) -> bool:
        """Whether the tool says anything about its arguments (service ids alone do not)."""
        return bool(self.sinks or self.outward or self.destructive)

    def to_dict(self) -> dict[str, Any]:
        """The declaration as data (hashed into the tool's definition)."""
        out: dict[str, Any] = {
            "sinks": dict(sorted(self.sinks.items())), "outward": list(self.outward),
            "destructive": list(self.destructive), "service_ids": list(self.service_ids)}
        # the fields added later appear only when set: an earlier tool's hash stays the same
        if self.parties is not None:
            out["parties"] = list(self.parties)
        if self.directory:
            out["directory"] = True
        if self.id_nouns:
            out["id_nouns"] = {k: list(v) for k, v in sorted(self.id_nouns.items())}
        if self.verbs is not None:
            out["verbs"] = list(self.verbs)
        return out

    def is_party(self, field_name: str) -> bool:
        """Whether result field *field_name* names a party rather than an object."""
        if self.parties is not None:
            return field_name in self.parties
        return field_name.casefold() in PARTY_FIELDS

    def nouns_for(self, path: str) -> tuple[str, ...]:
        """The nouns that make a number the user wrote an id for argument *path*: declared,
        or the path's last part without ``_id`` (``attachments.file_id`` → ``file``)."""
        if path in self.id_nouns:
            return self.id_nouns[path]
        last = path.rsplit(".", 1)[-1].casefold()
        noun = re.sub(r"(?:_?ids?)$", "", last).strip("_-")
        return (noun.replace("_", " "),) if noun else ()

    def verbs_for(self, tool: str) -> tuple[str, ...]:
        """The words that ask for *tool*'s action: declared, or those of its name
        (``send_email`` → ``send``, ``email``; ``sendDirectMessage`` → ``send``,
        ``direct``, ``message``), without the small words of a name (``to``, ``by``)."""
        if self.verbs is not None:
            return self.verbs
        spaced = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", tool.rsplit(".", 1)[-1])
        return tuple(dict.fromkeys(w for w in re.findall(r"[a-z]+", spaced.casefold())
                                   if len(w) > 1 and w not in _NAME_SMALL_WORDS))

    @classmethod
    def coerce(cls, value: Dataflow | Mapping[str, Any]) -> Dataflow:
        """A :class:`Dataflow` from itself or a mapping of its fields."""
        if isinstance(value, Dataflow):
            return value
        if not isinstance(value, Mapping):
            raise UserError("dataflow must be a Dataflow or a mapping of its fields")
        unknown = set(value) - FIELDS
        if unknown:
            raise UserError(f"dataflow: unknown field(s) {', '.join(sorted(unknown))}")
        return cls(**value)
