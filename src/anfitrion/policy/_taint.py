"""The taint rule: a person looks at calls an injected instruction could have caused.

It asks the session's provenance index (:class:`anfitrion._provenance.TaintIndex`, through
``PolicyContext.provenance`` and ``PolicyContext.flagged_arguments``) and turns its answers into
decisions: every side-effecting call in a tainted session asks a person (even when another
rule allowed it), and any call with a flagged argument or an egress warning asks too (or is
denied, if the operator says so). Warnings name the untrusted sources and the flagged values:
``argument recipients[0]: e-mail `x@y` appeared only in a result of web_fetch at turn 3``.

It is an escalation (:attr:`~anfitrion.policy.RuleRole.ESCALATION`): it can make a person look
at an allowed call, never grant a denied one.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from .._dataflow import AMOUNT_KINDS, Dataflow
from .._json import as_written
from .._provenance import (
    ADDRESSED_MIN_WORDS,
    APPEARED,
    COPY_MIN_WORDS,
    EGRESS_WARNING,
    MAX_FLAGS_PER_ARGUMENT,
    MAX_OUTWARD_CALLS,
    SPLIT_MIN_WORDS,
    egress_warnings,
    host_of,
    is_url,
    normalise,
    short,
    strings,
)
from .._tools import BoundCall, Effect
from ..exceptions import UserError
from ._contract import BaseRule, RuleRole
from ._decision import Decision, PolicyContext, Verdict
from ._declarations import ArgumentProvenance

__all__ = ["FLAG_WARNING", "PLAN_BEFORE_TAINT", "PLAN_WARNING", "READS_MODES", "TAINT_WARNING",
           "TRADE_OFFS", "UNPROVEN_WARNING", "TaintRule", "taint_rule"]

TAINT_WARNING = "this session read untrusted content from"
"""Prefix of the warning on side-effecting calls in a tainted session."""
FLAG_WARNING = "argument "
"""Prefix of a warning about an argument whose value came only from untrusted content."""
UNPROVEN_WARNING = "is not proven"
"""In a warning about a sink, destructive target or outward payload whose value nobody
trusted wrote (``argument to (recipient): `x@y` is not proven: it appeared in ...``)."""
PLAN_WARNING = "outside the plan: "
"""Prefix of a warning about a call of a tool the task's plan does not name."""

READS_MODES = ("url", "flagged", "all", "sinks", "proven")
"""How :func:`taint_rule` treats calls: see its ``reads`` argument."""

TRADE_OFFS = {
    "url": "reads stay free after taint unless a URL argument came from untrusted content; "
           "every write asks",
    "flagged": "reads ask after taint only for an argument from untrusted content; every "
               "write asks",
    "all": "after taint every call asks, reads included: no attacker read runs unseen, and a "
           "person is asked most often",
    "sinks": "after taint a declared tool asks only where an injection could act (an "
             "unproven sink or destructive target, an unproven address in an outward payload, "
             "a call outside the plan, a URL from untrusted content); other reads run unseen "
             "and so may an attacker's; undeclared writes still ask",
    "proven": "the recommended preset: \"sinks\" with proofs that hold against an attacker "
              "who knows them — a party field (sender, participants, owner) of untrusted "
              "content proves no recipient, nor does a directory's answer to a look-up the "
              "session's reading chose; outward text copied from untrusted content asks; "
              "other reads run unseen and so may an attacker's; undeclared writes still ask",
}
"""What each mode lets through, in a phrase (shown by ``anfitrion policy validate``)."""

PLAN_BEFORE_TAINT = "before-taint"
"""``taint_rule(plan=...)``: the plan is the tools the model proposed before the first
untrusted result."""

_COPIED_END = "to be the user's words"
_ADDRESS_KINDS = frozenset({"recipient", "channel", "account", "phone", "url"})
"""Sink kinds that say who reads a call's outward text."""
_MAX_LEARNED = 4096
_DATAFLOW_MODES = ("sinks", "proven")
"""The ``reads`` settings that read tools' data-flow declarations."""


def _values(arguments: Any, path: str) -> list[str]:
    """The scalar values at a dotted *path* (arrays entered), as text."""
    found: list[Any] = [arguments]
    for part in path.split("."):
        nxt: list[Any] = []
        for item in found:
            for one in (item if isinstance(item, list) else [item]):
                if isinstance(one, Mapping) and part in one:
                    nxt.append(one[part])
        found = nxt
    out: list[str] = []
    for item in found:
        for one in (item if isinstance(item, list) else [item]):
            if isinstance(one, str | int | float) and not isinstance(one, bool):
                out.append(str(as_written(one)))
            elif one is not None:
                out += [text for _, text in strings(one)]
    return out


def _plain(path: str) -> str:
    """An argument path without array indices (``to[0]`` → ``to``), as declarations name it."""
    return re.sub(r"\[\d+\]", "", path)


class _DataflowCheck:
    """The ``reads="sinks"`` checks of one declared call (see :func:`taint_rule`)."""

    def __init__(self, declarations: Mapping[str, Dataflow], proven: bool = False) -> None:
        self.declarations = dict(declarations)
        self.proven = proven  # reads="proven": party fields of untrusted results prove nothing
        self.learned: dict[str, Dataflow] = {}  # tool -> its own declaration, from calls seen

    def flow_of(self, call: BoundCall) -> Dataflow | None:
        flow = self.declarations.get(call.name) or call.tool.dataflow
        if call.tool.dataflow is not None and call.name not in self.learned \
                and len(self.learned) < _MAX_LEARNED:
            self.learned[call.name] = call.tool.dataflow
        return flow

    def _declared(self, tool: str) -> Dataflow | None:
        return self.declarations.get(tool) or self.learned.get(tool)

    def service_ids(self, tool: str) -> Collection[str]:
        flow = self._declared(tool)
        return flow.service_ids if flow is not None else ()

    def parties(self, tool: str) -> Collection[str]:
        """The result fields of *tool* that name a party and so, read from untrusted content,
        prove nothing (``reads="proven"``; a directory's prove)."""
        flow = self._declared(tool)
        if flow is None or flow.directory:
            return ()
        return tuple(f for f in (*(flow.parties or ()), *flow.service_ids) if flow.is_party(f))

    def directory(self, tool: str) -> bool:
        """Whether *tool* is a declared directory (whose answers prove parties)."""
        flow = self._declared(tool)
        return flow is not None and flow.directory

    @property
    def _directories(self) -> Any:
        """``reads="proven"``: a directory's answer to a look-up the session's reading chose
        proves nothing (:meth:`TaintIndex.unproven`)."""
        return self.directory if self.proven else None

    def _unproven(self, provenance: ArgumentProvenance, flow: Dataflow, path: str, kind: str,
                  value: str, write: bool, own: Collection[str] = ()) -> str | None:
        if kind in AMOUNT_KINDS:
            return provenance.unproven_amount(value, service_ids=self.service_ids) \
                if write else None
        if normalise(value) in own:
            return None  # the principal's own address: theirs, whoever else names it
        return provenance.unproven(value, service_ids=self.service_ids,
                                   parties=self.parties if self.proven else None,
                                   id_nouns=flow.nouns_for(path),
                                   directories=self._directories,
                                   reader=self.proven and kind == "recipient")

    def warnings(self, call: BoundCall, flow: Dataflow, provenance: ArgumentProvenance,
                 own: Collection[str] = ()) -> list[str]:
        """Unproven sinks, destructive targets and outward addresses (a read: URL sinks).
        *own*: the principal's own addresses (normalised), proven wherever they appear."""
        out: list[str] = []
        write = call.tool.effect is Effect.WRITE
        for path, kind in flow.sinks.items():
            if not write and kind != "url":
                continue  # a look-up changes nothing; only where it reaches matters
            for value in _values(call.arguments, path):
                why = self._unproven(provenance, flow, path, kind, value, write, own)
                if why is not None and not write:
                    # a read asks only for a URL or host from untrusted content
                    host = host_of(normalise(value))
                    host_why = provenance.unproven(host) if host else None
                    why = why if why.startswith(APPEARED) else (
                        f"its host {host_why}" if host_why and host_why.startswith(APPEARED)
                        else None)
                if why is not None:
                    out.append(f"{FLAG_WARNING}{path} ({kind}): `{short(value)}` "
                               f"{UNPROVEN_WARNING}: {why}")
        for path in flow.destructive if write else ():
            for value in _values(call.arguments, path):
                why = provenance.unproven(value, service_ids=self.service_ids, minted=False,
                                          id_nouns=flow.nouns_for(path),
                                          directories=self._directories)
                if why is not None:
                    out.append(f"{FLAG_WARNING}{path} (destructive target): `{short(value)}` "
                               f"{UNPROVEN_WARNING} to come from the user or a trusted result: "
                               f"{why}")
        for path in flow.outward if write else ():
            out += self._outward(provenance, path, _values(call.arguments, path))
        if write and self.proven:
            addressed = _addressees(call.arguments, flow, own)
            if not any(w.endswith(_COPIED_END) for w in out):
                split = self._split(call, flow, provenance, bool(addressed))
                out += split or self._series(call, provenance, addressed, own)
            # the last check: a call already flagged asks, and its first reason says more
            out = out or self._not_asked_for(call, flow, provenance, addressed)
        return out

    @staticmethod
    def _not_asked_for(call: BoundCall, flow: Dataflow, provenance: ArgumentProvenance,
                       addressed: Mapping[str, tuple[str, str, str]]) -> list[str]:
        """A write to another party whose kind of action the user's words do not ask for
        (none of the tool's :meth:`~anfitrion._dataflow.Dataflow.verbs_for`): a reader the
        user named for one action (an invitation, a share) is not theirs for another (an
        e-mail), and a reader a trusted result proves is not one the user asked to write to
        at all. Proven readers prove who; this proves what."""
        if not addressed:
            return []
        verbs = flow.verbs_for(call.name)
        if provenance.asked_for(verbs) is not None:
            return []
        path, kind, _ = next(iter(addressed.values()))
        readers = ", ".join(f"`{short(value)}`" for _, _, value in
                            list(addressed.values())[:MAX_FLAGS_PER_ARGUMENT])
        return [f"{FLAG_WARNING}{path} ({kind}): {readers} {UNPROVEN_WARNING} to be the user's "
                f"choice for {call.name}: the user's words ask for no such action (none of "
                f"{', '.join(verbs[:8])}); after untrusted content was read, a write to "
                f"another party runs unasked only where the user asked for its kind of action"]

    def _series(self, call: BoundCall, provenance: ArgumentProvenance,
                addressed: Mapping[str, tuple[str, str, str]],
                own: Collection[str]) -> list[str]:
        """An outward call to a party an earlier outward call of the session (proposed
        after taint) went to, or was denied for — by the policy or a person: a payload
        split over calls, each piece too short to tell (single words), goes on to the reader
        the first piece was for. One outward call per reader and session runs unasked after
        taint; every later one asks, naming the earlier."""
        if not addressed:
            return []
        for earlier, what in ((provenance.refused_after_taint(call.call_id), "was denied"),
                              (provenance.proposed_after_taint(call.call_id), "went out")):
            for tool, arguments in reversed(earlier):  # all: a reader is a cheap match
                declared = self._declared(tool)
                if declared is None or not declared.outward:
                    continue
                for party in addressed.keys() & _addressees(arguments, declared, own).keys():
                    path, kind, value = addressed[party]
                    return [f"{FLAG_WARNING}{path} ({kind}): `{short(value)}` "
                            f"{UNPROVEN_WARNING} to be the user's choice: an earlier {tool} "
                            f"to the same reader after untrusted content was read {what} "
                            f"in this session (the rest of a payload split over calls goes "
                            f"to the reader its first piece was for; one outward call per "
                            f"reader runs unasked)"]
        return []

    def _runs(self, provenance: ArgumentProvenance, flow: Dataflow,
              arguments: Any) -> list[tuple[str, int, str, bool]]:
        """``(path, words, quoted run, whether it is a whole record)`` of the copied runs in a
        call's outward arguments."""
        return [(path, counted, shown, record) for path in flow.outward
                for value in _values(arguments, path)
                for counted, shown, record in provenance.copied_runs(value)]

    def _split(self, call: BoundCall, flow: Dataflow, provenance: ArgumentProvenance,
               addressed: bool = True) -> list[str]:
        """A payload split over calls (``reads="proven"``). A copied run of this call's
        outward text cut from a longer untrusted text asks at once: it is what the first
        piece of a split payload looks like — from :data:`SPLIT_MIN_WORDS` words, or from
        :data:`ADDRESSED_MIN_WORDS` when the call is *addressed* to someone other than the
        principal. Other runs add up with those of the session's earlier outward calls (of
        any declared tool, proposed after the first untrusted result: at most
        :data:`MAX_OUTWARD_CALLS`, newest first), in two totals: records (a field's whole
        value: an address, a name) and short runs (fewer than :data:`SPLIT_MIN_WORDS`
        words); the call asks when one reaches :data:`COPY_MIN_WORDS` words, this call
        adding one."""
        current = self._runs(provenance, flow, call.arguments)
        if not current:
            return []
        least = ADDRESSED_MIN_WORDS if addressed else SPLIT_MIN_WORDS
        cut = [(path, shown) for path, counted, shown, record in current
               if not record and counted >= least]
        if cut:
            quoted = "; ".join(shown for _, shown in cut[:MAX_FLAGS_PER_ARGUMENT])
            paths = ", ".join(dict.fromkeys(path for path, _ in cut))
            return [f"{FLAG_WARNING}{paths} (outward): carries text {quoted}, which "
                    f"{UNPROVEN_WARNING} to be the user's words (a piece cut from a longer "
                    f"untrusted text, as a payload split over calls is sent)"]
        pieces = {shown: (path, counted) for path, counted, shown, _ in current}
        why = self._added_up(call, provenance, pieces)
        if why is None:
            return []
        quoted = "; ".join(f"{shown} (in {where})" for shown, (where, _) in
                           list(pieces.items())[:MAX_FLAGS_PER_ARGUMENT + 1])
        paths = ", ".join(dict.fromkeys(path for path, _, _, _ in current))
        return [f"{FLAG_WARNING}{paths} (outward): carries text {quoted}, which "
                f"{UNPROVEN_WARNING} to be the user's words ({why})"]

    def _added_up(self, call: BoundCall, provenance: ArgumentProvenance,
                  pieces: dict[str, tuple[str, int]]) -> str | None:
        """Why this call's runs (*pieces*: quoted run → where, words), with the earlier
        calls' added to *pieces*, make a copied payload, or ``None``: the records' total or
        the short runs' total reaches :data:`COPY_MIN_WORDS`."""
        short_now = any(c < SPLIT_MIN_WORDS for _, c in pieces.values())
        short_before = False

        def reached() -> bool:
            longer = sum(c for _, c in pieces.values() if c >= SPLIT_MIN_WORDS)
            shorter = sum(c for _, c in pieces.values() if c < SPLIT_MIN_WORDS)
            return max(longer, shorter) >= COPY_MIN_WORDS or (short_now and short_before)

        earlier = [(tool, declared, arguments) for tool, arguments
                   in provenance.proposed_after_taint(call.call_id)
                   if (declared := self._declared(tool)) is not None and declared.outward]
        if len(earlier) > MAX_OUTWARD_CALLS:
            return (f"this session made {len(earlier)} outward calls after reading untrusted "
                    f"content, more than the {MAX_OUTWARD_CALLS} whose copied text is added up")
        for tool, declared, arguments in reversed(earlier):
            if reached():
                break
            for path, counted, shown, _ in self._runs(provenance, declared, arguments):
                pieces.setdefault(shown, (f"{path} of an earlier {tool}", counted))
                short_before = short_before or counted < SPLIT_MIN_WORDS
        return "pieces of it add up to a copied payload" if reached() else None

    def _outward(self, provenance: ArgumentProvenance, path: str,
                 values: list[str]) -> list[str]:
        """An outward payload: unproven addresses and numbers, and (``reads="proven"``)
        text copied from untrusted content, quoted with its source."""
        out: list[str] = []
        for value in values:
            found = provenance.unproven_entities(
                value, service_ids=self.service_ids,
                parties=self.parties if self.proven else None,
                directories=self._directories)
            if found:
                out.append(f"{FLAG_WARNING}{path} (outward): carries "
                           f"{'; '.join(found[:MAX_FLAGS_PER_ARGUMENT])}, which "
                           f"{UNPROVEN_WARNING}")
            copied = provenance.copied_text(value) if self.proven else []
            if copied:
                out.append(f"{FLAG_WARNING}{path} (outward): carries text "
                           f"{'; '.join(copied[:MAX_FLAGS_PER_ARGUMENT])}, which "
                           f"{UNPROVEN_WARNING} to be the user's words")
        return out


def _addressees(arguments: Any, flow: Dataflow, own: Collection[str]
                ) -> dict[str, tuple[str, str, str]]:
    """Who reads a call's outward text besides the principal: each value (normalised) of a
    recipient, channel, account, phone or URL sink not among *own*, with its path, kind and
    value as written."""
    return {normalise(value): (path, kind, value)
            for path, kind in flow.sinks.items() if kind in _ADDRESS_KINDS
            for value in _values(arguments, path)
            if value.strip() and normalise(value) not in own}


def _own_addresses(context: PolicyContext) -> frozenset[str]:
    """The principal's own identities: its id and ``attributes["addresses"]`` (normalised).
    A recipient that is the user themself is proven whoever else names it."""
    principal = context.principal
    addresses = principal.attributes.get("addresses", ()) if principal.attributes else ()
    if isinstance(addresses, str) or not isinstance(addresses, list | tuple | frozenset | set):
        addresses = ()
    return frozenset(normalise(a) for a in (principal.id, *addresses)
                     if isinstance(a, str) and a)


class TaintRule(BaseRule):
    """The rule that makes a person look at calls an injected instruction could have caused:
    an escalation (:attr:`RuleRole.ESCALATION`) — it can make a person look at an allowed
    call, never grant a denied one. Built by :func:`taint_rule`, which documents the settings.
    """

    role = RuleRole.ESCALATION

    def __init__(self, *, allowed_hosts: Iterable[str] | None = None,
                 deny_flagged: bool = False, reads: str = "url", free_reads: Iterable[str] = (),
                 declarations: Mapping[str, Dataflow | Mapping[str, Any]] | None = None,
                 plan: str | Iterable[str] | None = None) -> None:
        if reads not in READS_MODES:
            raise UserError(f"reads must be one of {', '.join(map(repr, READS_MODES))}, "
                             f"not {reads!r}")
        self.rule_id = "taint"
        self.reads = reads
        self.deny_flagged = deny_flagged
        self.allowed_hosts = None if allowed_hosts is None else tuple(allowed_hosts)
        self.free_reads = tuple(free_reads)
        for glob in self.free_reads:
            if not isinstance(glob, str) or not glob:
                raise UserError("free_reads takes tool-name globs (non-empty strings), "
                                 f"not {glob!r}")
        declared = {name: Dataflow.coerce(flow) for name, flow in (declarations or {}).items()}
        self.plan = plan
        self.planned: tuple[str, ...] | None
        if plan is None or plan == PLAN_BEFORE_TAINT:
            self.planned = None
        elif isinstance(plan, str):
            raise UserError(f"plan takes tool-name globs or {PLAN_BEFORE_TAINT!r}, "
                             f"not {plan!r}")
        else:
            self.planned = tuple(plan)
            if not all(isinstance(g, str) and g for g in self.planned):
                raise UserError("plan takes tool-name globs (non-empty strings)")
        self._check = _DataflowCheck(declared, proven=reads == "proven")
        self.trade_off = TRADE_OFFS[reads]
        # what `anfitrion policy validate` shows of this rule
        self.settings: dict[str, Any] = {
            "reads": reads, "free_reads": list(self.free_reads),
            "allowed_hosts": None if self.allowed_hosts is None else list(self.allowed_hosts),
            "deny_flagged": deny_flagged,
            **({"declared_tools": sorted(declared)} if declared else {}),
            **({"plan": plan if isinstance(plan, str) else list(self.planned or ())}
               if plan is not None else {})}

    def description(self) -> Mapping[str, Any]:
        """What the policy hash covers: the shape earlier versions hashed (the rule was a
        function carrying these attributes), so a policy's hash does not change with the
        class. The settings say everything that can change a decision."""
        return {"id": self.rule_id, "kind": "taint_rule.<locals>.rule",
                "attributes": {"kind": "function", "escalates_only": True,
                               "rule_id": self.rule_id, "settings": dict(self.settings),
                               "trade_off": self.trade_off}}

    def __call__(self, call: BoundCall, context: PolicyContext) -> Decision | None:
        write = call.tool.effect is Effect.WRITE
        flow = self._check.flow_of(call) if self.reads in _DATAFLOW_MODES else None
        flagged = self._flagged(call, context, flow)
        egress = ([] if self.allowed_hosts is None
                  else egress_warnings(call.arguments, self.allowed_hosts))
        off_plan = self._outside_plan(call, context)
        tainted_read = (not write and self.reads == "all" and context.tainted
                        and not any(fnmatch.fnmatchcase(call.name, g) for g in self.free_reads))
        warnings: list[str] = []
        if ((write and flow is None) or tainted_read) and context.tainted:
            warnings.append(f"{TAINT_WARNING} {', '.join(context.untrusted_sources)}")
        warnings += flagged + egress + off_plan
        if not warnings:
            return None
        return self._decision(warnings, flagged, egress, off_plan, tainted_read)

    def _flagged(self, call: BoundCall, context: PolicyContext,
                 flow: Dataflow | None) -> list[str]:
        """Warnings on arguments: flagged values, and a declared tool's unproven sinks."""
        write = call.tool.effect is Effect.WRITE
        flagged_items = dict(context.flagged_arguments)
        # a read, or a declared write (its sinks say what matters): only URL flags count
        if flagged_items and (flow is not None or (
                not write and self.reads in ("url", *_DATAFLOW_MODES))):
            values = dict(strings(call.arguments))
            flagged_items = {path: why for path, why in flagged_items.items()
                             if is_url(values.get(path, "").strip().casefold())
                             or EGRESS_WARNING in why}
        declared: list[str] = []
        if flow is not None and context.tainted and context.provenance is not None:
            declared = self._check.warnings(call, flow, context.provenance,
                                            _own_addresses(context))
            # a sink's own warning says more than the flag on the same argument
            flagged_items = {p: why for p, why in flagged_items.items()
                             if EGRESS_WARNING in why or not any(
                                 w.startswith(f"{FLAG_WARNING}{_plain(p)} (") for w in declared)}
        return [f"{FLAG_WARNING}{path}: {why}" for path, why in flagged_items.items()] + declared

    def _outside_plan(self, call: BoundCall, context: PolicyContext) -> list[str]:
        if self.plan is None or not context.tainted:
            return []
        provenance = context.provenance
        if self.planned is not None:
            globs = self.planned
            source = "the application's plan"
        else:
            globs = tuple(provenance.planned_tools) if provenance is not None else ()
            source = "the tools proposed before untrusted content was read"
        limits = provenance.plan_limits if provenance is not None else ()
        for narrowed in limits:  # the session's narrowings (Host.run(plan=...)) bound both
            if not any(fnmatch.fnmatchcase(call.name, g) for g in narrowed):
                globs, source = narrowed, "the session's narrowed plan"
                break
        else:
            if any(fnmatch.fnmatchcase(call.name, g) for g in globs):
                return []
        return [f"{PLAN_WARNING}{call.name} is not among {source} "
                f"({', '.join(globs) or 'none'})"]

    def _decision(self, warnings: list[str], flagged: list[str], egress: list[str],
                  off_plan: list[str], tainted_read: bool) -> Decision:
        if flagged or egress:
            rule_id = "taint.egress" if egress and not flagged else "taint.argument"
            if self.deny_flagged:
                reason = ("an argument came from untrusted content or leaves the allow-list: "
                          f"{(flagged + egress)[0]}")
                return Decision(Verdict.DENY, reason, rule_id, tuple(warnings))
            return Decision.ask("an argument came from untrusted content or leaves the "
                                "allow-list; a person must check it", rule_id, warnings)
        if off_plan:
            return Decision.ask("the session read untrusted content and this tool is not in "
                                "the task's plan; a person must check it", "taint.plan",
                                warnings)
        if tainted_read:
            return Decision.ask("the session read untrusted content; under this policy every "
                                "call after that, reads included, needs a person's approval",
                                "taint.read", warnings)
        return Decision.ask("the session read untrusted content; a side-effecting call needs "
                            "a person's approval", "taint", warnings)


def taint_rule(*, allowed_hosts: Iterable[str] | None = None, deny_flagged: bool = False,
               reads: str = "url", free_reads: Iterable[str] = (),
               declarations: Mapping[str, Dataflow | Mapping[str, Any]] | None = None,
               plan: str | Iterable[str] | None = None) -> TaintRule:
    """The rule that makes a person look at calls an injected instruction could have caused.

    Args:
        allowed_hosts: hosts URL arguments may reach (subdomains included); ``None`` turns
            the allow-list check off.
        deny_flagged: deny, rather than ask about, calls with flagged arguments or egress
            warnings.
        reads: how calls are treated once the session is tainted.
            ``"url"`` (the default): a read asks only when a flagged argument is a URL (the
            read would reach a host an attacker chose, or carry data out); chained look-ups
            — reviews of the hotels a listing returned — stay free.
            ``"flagged"``: a read asks for *any* flagged argument.
            ``"all"``: every read asks too, flagged or not — for an operator who assumes the
            model is compromised: an injected instruction cannot even make it *look*
            anything up unseen. Tools named in *free_reads* are exempt.
            ``"sinks"``: a tool that declares its data flow (:class:`~anfitrion.policy.
            declarations.Dataflow`, on the tool or in *declarations*) asks only where an
            injection could act: a sink whose value is not proven, a destructive target not
            from the user or a trusted result, an outward payload carrying an unproven
            e-mail address, URL, account or phone number, a URL argument from untrusted
            content, a call outside the *plan*. Its other calls run without a question even
            after taint. Undeclared tools are treated as under ``"url"``.
            ``"proven"`` (the recommended preset): ``"sinks"`` with the proofs an attacker
            who has read them cannot walk through — a party field (sender, participants,
            owner, :data:`~anfitrion._dataflow.PARTY_FIELDS`) of an untrusted result proves
            no recipient unless the tool is a declared directory, and an outward payload
            that copies :data:`~anfitrion._provenance.COPY_MIN_WORDS` or more words of
            untrusted text asks, quoting them and their source — as does one carrying a run
            of :data:`~anfitrion._provenance.SPLIT_MIN_WORDS` or more copied words cut from
            a longer untrusted text (a piece of a payload split over calls; from
            :data:`~anfitrion._provenance.ADDRESSED_MIN_WORDS` words in a call to another
            party), or runs that are a field's whole value (a record: an address) which,
            added to those of the session's earlier outward calls, reach that many; runs of
            :data:`~anfitrion._provenance.PIECE_MIN_WORDS` to 3 words may go out in one call
            (fewer than that many words), every later call carrying one asks; and an
            outward call to a reader an earlier outward call was denied for asks. In both,
            a number the user wrote proves an id only written as one (``file 13``), and a
            declared amount (``sinks = {amount = "money"}``) is proven only by the user's
            or a trusted result's figure.
        free_reads: tool-name globs of reads that stay free in a tainted session under
            ``reads="all"`` (a clock, a unit converter: nothing private comes back and
            nothing leaves). A flagged URL argument still asks. Writes are never exempt.
        declarations: tool name → data-flow declaration, for tools the operator does not
            own (``[tools."name"]`` in the policy file); it takes precedence over the tool's.
            The service ids a tool declares itself are learned when the rule first decides a
            call of it (in this process); until then its results prove nothing (fail closed).
        plan: the tools the task may use (name globs, fixed by the application before the
            task starts), or :data:`PLAN_BEFORE_TAINT` — the tools the model proposed before
            the first untrusted result. A call of another tool after taint asks, whatever
            *reads* says. ``None``: no plan.

    Returns:
        a :class:`TaintRule`: side-effecting calls in a tainted session ask, naming the
        untrusted sources; calls with flagged arguments ask (or are denied), naming each
        value and its origin.

    Raises:
        ValueError: *reads* is not one of :data:`READS_MODES`, or a declaration or plan is
            malformed.
    """
    return TaintRule(allowed_hosts=allowed_hosts, deny_flagged=deny_flagged, reads=reads,
                     free_reads=free_reads, declarations=declarations, plan=plan)
