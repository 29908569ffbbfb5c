"""What a form asks for, by meaning: the classes of secret a server may never elicit.

Words alone miss whole classes (issue 35): "card number", "the 6-digit code we texted you",
"your 12 words". Each class below is a set of phrasings of one meaning, matched on word
boundaries over text already normalised by :func:`normalised` (NFKC, so full-width and
compatibility letters read as plain ones; invisible and format characters removed, so
``pass\\u200bword`` reads ``password``; case folded).
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["SECRET_CLASSES", "normalised", "secret_class"]

SECRET_CLASSES: dict[str, str] = {
    "payment card": r"(credit|debit|payment|bank|visa|mastercard|amex) ?cards?"
                    r"|card ?(number|no|num|details|holder|expiry|expiration|cvv|cvc|pin)s?"
                    r"|cc ?(number|num|no)|pan number|cvv2?|cvc2?|ccv|csc"
                    r"|security code on the back|expir(y|ation) date",
    "one-time or verification code": r"(verification|confirmation|authentication|auth|login"
                    r"|sign ?in|security|access|sms|text|email|2fa|mfa|one ?time|otp|totp"
                    r"|authenticator|pairing|activation) ?(code|pin|number)s?"
                    r"|one ?time ?pass(word|code)?s?|otp|totp|hotp|[0-9]+ ?digit (code|pin)"
                    r"|code (we|i) (sent|texted|emailed)|passcodes?|backup codes?",
    "password": r"pass ?words?|passwd|pwd|pass ?phrases?|log ?in pin|contraseñas?"
                r"|passwort|mot de passe|senha|wachtwoord|parola|has[łl]o|kennwort",
    "API key or token": r"api ?(keys?|tokens?|secrets?)|access ?(keys?|tokens?)"
                        r"|secret ?(keys?|access ?keys?)|client ?secrets?|bearer|auth ?tokens?"
                        r"|refresh ?tokens?|session ?(tokens?|cookies?|ids?)|private ?keys?"
                        r"|personal access tokens?|ssh ?keys?|signing ?keys?|webhook secrets?",
    "recovery phrase": r"(recovery|seed|mnemonic|backup|wallet|secret) ?(phrases?|words?|keys?)"
                       r"|mnemonics?|(12|24|twelve|twenty[- ]four) ?words?|recovery ?codes?",
}

_PATTERNS = [(name, re.compile(rf"\b(?:{body})\b")) for name, body in SECRET_CLASSES.items()]


def normalised(text: str) -> str:
    """*text* as a person reads it: NFKC, invisible and format characters removed.

    >>> normalised("Ｐａｓｓ\\u200bword")
    'Password'
    """
    text = unicodedata.normalize("NFKC", text)
    return "".join(c for c in text if unicodedata.category(c) not in ("Cf", "Cc", "Mn")
                   or c in "\\n\\t")


def secret_class(text: str) -> str | None:
    """The class of secret *text* (normalised) asks for, with the words that say so."""
    folded = text.casefold()
    for name, pattern in _PATTERNS:
        found = pattern.search(folded)
        if found:
            return f"{name}: {found.group(0)}"
    return None
