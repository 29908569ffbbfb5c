"""What is declared about tools: where harm can happen (data flow) and what a call does
(effect and effect identity). Both are written in one table of the policy file,
``[tools."<name>"]``, for tools the operator does not own; tools written in code declare them
on :class:`~anfitrion._tools.Tool`.

**Data flow.** What a tool declares about where harm can happen: its data flow.

A tool — or the operator's policy file, for tools the operator does not own (MCP tools) —
says which arguments choose *who, where or which* (**sinks**, each with its kind), which
arguments carry a payload **outward** to another party, which arguments name what a call
**destroys** (delete, cancel, remove), and which fields of its results hold **service ids**
(ids a trusted system minted: an e-mail's ``id``, a file's ``id_``). The taint rule in
``reads="sinks"`` mode (:func:`anfitrion.policy._taint.taint_rule`) asks a person only where an
injected instruction could act through these. A tool that declares nothing keeps the
behaviour of the other modes.

Argument names are dotted paths into the arguments object (``message.to``); arrays on the way
are entered, as in :class:`~anfitrion.policy.ArgumentRule`.

Example:
    >>> flow = Dataflow(sinks={"recipients": "recipient"}, outward=("subject", "body"))
    >>> flow.sinks["recipients"]
    'recipient'

**Effect identity.** What the operator declares about tools they do not own, in the policy file.

A tool the operator writes declares its effect and effect identity in code
(``Tool(..., effect_key="refund:{payment_id}")``); a tool of an MCP server or a framework
cannot. The policy file declares them instead, per tool name (the name the model sees)::

    [tools."payments__refund"]
    effect = "write"                     # "read" | "write"
    effect_key = "refund:{payment_id}"   # a template over the tool's arguments
    effect_scope = "global"              # "session" | "principal" | "global"
    idempotent = false

:meth:`ToolDeclaration.apply` returns the tool with what is declared in place of what it says
of itself (every undeclared field stays the tool's). The gate applies it where it resolves a
call's tool, so the policy's rules, the execution ledger and the effect key all see the
declared tool. A template naming an argument the tool does not have is an error naming the
policy file and line (:class:`~anfitrion.exceptions.ConfigError`), checked when the tool is
known: by :func:`check_declarations` for a list of tools, and by the gate, which refuses the
call (nothing runs) rather than guess an effect identity.
"""

from __future__ import annotations

import dataclasses
import string
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .._effects import EffectScope
from ..exceptions import ConfigError, ToolDefinitionError

if TYPE_CHECKING:  # tools imports this module (a Tool carries its Dataflow)
    from .._tools import Effect, Tool

__all__ = ["ArgumentProvenance", "ToolDeclaration", "check_declarations", "check_template_syntax"]

class ArgumentProvenance(Protocol):
    """What a rule may ask of a session's provenance (implemented by
    :class:`anfitrion._provenance.TaintIndex`; see its methods)."""

    @property
    def planned_tools(self) -> tuple[str, ...]: ...

    @property
    def plan_limits(self) -> tuple[tuple[str, ...], ...]: ...

    def unproven(self, value: str, *,
                 service_ids: Callable[[str], Collection[str]] | None = None,
                 minted: bool = True,
                 parties: Callable[[str], Collection[str]] | None = None,
                 id_nouns: Collection[str] | None = None,
                 directories: Callable[[str], bool] | None = None,
                 reader: bool = False) -> str | None: ...

    def unproven_entities(self, text: str, *,
                          service_ids: Callable[[str], Collection[str]] | None = None,
                          parties: Callable[[str], Collection[str]] | None = None,
                          directories: Callable[[str], bool] | None = None
                          ) -> list[str]: ...

    def unproven_amount(self, value: str, *,
                        service_ids: Callable[[str], Collection[str]] | None = None
                        ) -> str | None: ...

    def copied_text(self, text: str) -> list[str]: ...

    def asked_for(self, verbs: Collection[str]) -> str | None: ...

    def copied_runs(self, text: str) -> list[tuple[int, str, bool]]: ...

    def proposed_after_taint(self, before: str | None = None
                             ) -> tuple[tuple[str, Any], ...]: ...

    def refused_after_taint(self, before: str | None = None
                            ) -> tuple[tuple[str, Any], ...]: ...

T = TypeVar("T", bound="Tool")


def check_template_syntax(template: str) -> str | None:
    """What is wrong with *template* as an effect-key template, or ``None``: only plain
    ``{argument}`` fields, at least one (whether they name arguments needs the tool)."""
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        return str(exc)
    fields = [(name, spec, conversion) for _, name, spec, conversion in parts
              if name is not None]
    if not fields:
        return "names no argument (write it as, e.g., 'refund:{payment_id}')"
    for name, spec, conversion in fields:
        if spec or conversion or not name.isidentifier():
            return f"only plain {{argument}} fields are allowed, not {{{name}...}}"
    return None


@dataclass(frozen=True, slots=True)
class ToolDeclaration:
    """What ``[tools."<name>"]`` declares about one tool; ``None``: not declared (the tool's
    own value stands).

    ``path`` and ``lines`` (key → line) say where each key was written, for errors found
    only when the tool is known.
    """

    tool: str
    effect: Effect | None = None
    effect_key: str | None = None
    effect_scope: EffectScope | None = None
    idempotent: bool | None = None
    path: str | None = dataclasses.field(default=None, compare=False)
    lines: Mapping[str, int] = dataclasses.field(default_factory=dict, compare=False)
    preview: str | None = None
    """``"email"``: the tool sends the e-mail its arguments describe, and the inbox shows the
    message as it will be sent (``metadata["preview"]``; see
    :data:`anfitrion._approvals.PREVIEW_KINDS`)."""

    def _changes(self) -> dict[str, object]:
        changes: dict[str, object] = {}
        if self.effect is not None:
            changes["effect"] = self.effect
        if self.effect_key is not None:
            changes["effect_key"] = self.effect_key
        if self.effect_scope is not None:
            changes["effect_scope"] = self.effect_scope.value
        if self.idempotent is not None:
            changes["idempotent"] = self.idempotent
        return changes

    def apply(self, tool: T) -> T:
        """*tool* with the declared fields in place of its own.

        Raises:
            ConfigError: the declaration does not fit the tool (its ``effect_key`` names an
                argument the tool does not have), naming the policy file and line.
        """
        changes = {k: v for k, v in self._changes().items() if getattr(tool, k) != v}
        if self.preview is not None and tool.metadata.get("preview") != self.preview:
            changes["metadata"] = {**tool.metadata, "preview": self.preview}
        if not changes:
            return tool
        try:
            return dataclasses.replace(tool, **changes)  # type: ignore[arg-type]
        except ToolDefinitionError as exc:
            name = "effect_key" if "effect_key" in changes else next(iter(changes))
            raise ConfigError(f"[tools.{self.tool!r}] does not fit the tool: {exc}",
                              path=self.path, key=f"tools.{self.tool}.{name}",
                              line=self.lines.get(name)) from None


def check_declarations(declarations: Mapping[str, ToolDeclaration],
                       tools: Iterable[Tool]) -> None:
    """Check every declaration against the tool of its name among *tools* (others skipped).

    Raises:
        ConfigError: the first declaration that does not fit its tool.
    """
    for tool in tools:
        declared = declarations.get(tool.name)
        if declared is not None:
            declared.apply(tool)
