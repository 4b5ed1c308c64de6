"""Scrubbing personal data from logged text before anything is stored: e-mail addresses, phone numbers, and
patterns a config names (employee ids, account numbers). Each match becomes a placeholder naming what it was, so a
reviewer still reads a sensible query ("reset the password of [email]")."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from ...errors import InputError

EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
# a leading + or digit, then at least 8 more digits with the usual separators; years and small counts do not match,
# nor a decimal number (a p-value 0.000012345, a measurement 3.14159265): one point between two runs of digits
PHONE = re.compile(r"(?<![\w.])(?!\d+\.\d+(?![\d\s().-]*\d))\+?\d(?:[\s().-]*\d){8,14}(?![\w.])")


def _bare_number(found: str) -> bool:
    """Digits alone, without a leading + or a separator: an integer (2147483647, an order or row id, a timestamp),
    not a phone number as people write one."""
    return found.isdigit()


@dataclass
class Scrubber:
    """Replaces e-mails, phone numbers and the ``patterns`` given (regular expressions) with placeholders; counts
    what it replaced by kind."""

    patterns: Iterable[str] = ()
    counts: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        # (kind, placeholder, rule, a substring every match holds or None, which matches to keep or None)
        self._rules = [("email", "[email]", EMAIL, "@", None), ("phone", "[phone]", PHONE, None, _bare_number)]
        for index, pattern in enumerate(self.patterns):
            try:
                self._rules.append((f"pattern {index}", "[redacted]", re.compile(pattern), None, None))
            except re.error as error:
                raise InputError(f"logs.pii_patterns[{index}] is not a regular expression ({error})") from None

    def __call__(self, text: str | None) -> str | None:
        if not text:
            return text
        for kind, placeholder, rule, needed, keep in self._rules:
            if needed is not None and needed not in text:
                continue
            if keep is None:
                text, replaced = rule.subn(placeholder, text)
            else:
                replaced = 0

                def replace(match: re.Match, placeholder: str = placeholder, keep=keep) -> str:
                    nonlocal replaced
                    if keep(match.group()):
                        return match.group()
                    replaced += 1
                    return placeholder

                text = rule.sub(replace, text)
            self.counts[kind] += replaced
        return text
