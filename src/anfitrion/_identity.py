"""People and principals compared as people read their names, not byte for byte.

Two spellings a person cannot tell apart are one identity: ``Alice``, ``alice``, ``ＡＬＩＣＥ``
(full width) and ``alice`` with a combining accent written either way are the same reviewer
(NFKC, then case folding, then NFKC again — case folding can undo a composition). A name a
person could misread is refused where identities decide anything (a vote, the two-person rule,
self-approval): invisible characters (format and control characters, the zero-width and bidi
family), and letters from more than one script (``аlice`` with a Cyrillic ``а``), which is
how a confusable passes for someone else. A whole name in another script is its own identity.
"""

from __future__ import annotations

import unicodedata

__all__ = ["identity_key", "identity_problem", "same_identity"]


def identity_key(name: str) -> str:
    """The form *name* is compared in: NFKC, case-folded, white space trimmed and runs of it
    made one space (``" Alice  Smith"`` is ``"alice smith"``)."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())
    return " ".join(folded.split())


def same_identity(a: str, b: str) -> bool:
    """Whether *a* and *b* name the same person or principal."""
    return identity_key(a) == identity_key(b)


def _script(char: str) -> str | None:
    if not unicodedata.category(char).startswith("L"):
        return None
    try:
        word = unicodedata.name(char).split(" ")[0]
    except ValueError:
        return "UNKNOWN"
    if word in ("HIRAGANA", "KATAKANA", "CJK"):  # Japanese mixes these by design
        return "CJK"
    return word


def identity_problem(name: str) -> str | None:
    """Why *name* is too ambiguous to identify anyone, or ``None``."""
    if not isinstance(name, str) or not name.strip():
        return "an empty name"
    for char in name:
        category = unicodedata.category(char)
        if category in ("Cf", "Cc", "Co", "Cn", "Cs") or (category.startswith("Z")
                                                          and char != " "):
            return (f"it holds an invisible or control character (U+{ord(char):04X}) that "
                    "would make two names look alike")
    scripts = {s for s in map(_script, identity_key(name)) if s is not None}
    if len(scripts) > 1:
        return (f"it mixes letters of several scripts ({', '.join(sorted(scripts))}), the "
                "way a look-alike name passes for another")
    return None
