"""The inbox's and the API's way to answer: :mod:`anfitrion.answers`, the one answer path."""

from __future__ import annotations

from ..answers import (
    MAX_EDIT_BYTES,
    MAX_NOTE_CHARS,
    OnAnswer,
    Outcome,
    Refusal,
    RequestState,
    answer,
    edit_for,
    notify,
    parse_edited_arguments,
    propose_edit,
    state_of,
)

__all__ = ["MAX_EDIT_BYTES", "MAX_NOTE_CHARS", "OnAnswer", "Outcome", "Refusal", "RequestState",
           "answer", "edit_for", "notify", "parse_edited_arguments", "propose_edit", "state_of"]
