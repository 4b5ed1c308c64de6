"""Prompt templates as files: ``prompts/<stage>/<name>.md``, front matter then the template, hashed by content.

A file starts with a YAML front matter block between ``---`` lines (``kind: chat | completion``, a
``description``, and whatever the stage reads, e.g. ``max_tokens``). A chat template has ``[system]`` and
``[user]`` sections; a completion template is one block of text. Variables are ``{name}``; ``{{`` and ``}}`` are
literal braces. A variable the caller does not supply is an error, never an empty string.

The sha256 of the file's bytes goes into every lineage record, so a label can always be traced to the exact
wording that produced it (labels move with the prompt's wording).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from .errors import InputError
from .llm.types import LLMRequest, Message

PROMPT_DIR = Path(__file__).resolve().parents[1] / "prompts"
_VARIABLE = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SECTION = re.compile(r"^\[(system|user)\]\s*$", re.MULTILINE)


class PromptError(InputError):
    """A prompt file that cannot be read or rendered."""


@dataclass(frozen=True)
class Prompt:
    name: str
    kind: Literal["chat", "completion"]
    sections: dict[str, str]
    sha256: str
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def variables(self) -> set[str]:
        return {m.group(1) for text in self.sections.values() for m in _VARIABLE.finditer(text) if m.group(1)}

    def render(self, section: str, **values: str) -> str:
        def substitute(match: re.Match) -> str:
            token = match.group(0)
            if token in ("{{", "}}"):
                return token[0]
            name = match.group(1)
            if name not in values:
                raise PromptError(f"prompt {self.name!r} needs the variable {name!r}, which was not supplied")
            return str(values[name])

        return _VARIABLE.sub(substitute, self.sections[section])

    def request(self, model: str, **options: Any) -> LLMRequest:
        """An :class:`LLMRequest` with the rendered template; ``options`` holds the variables and request fields."""
        fields = {k: options.pop(k) for k in list(options) if k in LLMRequest.model_fields}
        if self.kind == "completion":
            return LLMRequest(kind="completion", model=model, prompt=self.render("prompt", **options), **fields)
        messages = [
            Message(role=role, content=self.render(role, **options))
            for role in ("system", "user")
            if role in self.sections
        ]
        return LLMRequest(kind="chat", model=model, messages=tuple(messages), **fields)


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, marked with " ..." when cut (passages put into a prompt)."""
    return text if len(text) <= limit else text[:limit] + " ..."


def parse_prompt(name: str, raw: bytes) -> Prompt:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PromptError(f"prompt {name!r} is not UTF-8") from None
    match = re.match(r"\A---\n(.*?)\n---\n", text, re.DOTALL)
    if not match:
        raise PromptError(f"prompt {name!r} has no front matter (a block between '---' lines at the top)")
    try:
        meta = yaml.safe_load(match.group(1)) or {}
    except yaml.YAMLError as error:
        raise PromptError(f"prompt {name!r} has invalid front matter: {error}") from None
    kind = meta.get("kind")
    if kind not in ("chat", "completion"):
        raise PromptError(f"prompt {name!r}: front matter 'kind' must be chat or completion, not {kind!r}")
    body = text[match.end() :]
    if kind == "completion":
        sections = {"prompt": body.rstrip("\n") + ("\n" if meta.get("trailing_newline") else "")}
    else:
        parts = _SECTION.split(body)
        sections = {parts[i]: parts[i + 1].strip("\n") for i in range(1, len(parts), 2)}
        if "user" not in sections:
            raise PromptError(f"chat prompt {name!r} needs a [user] section")
    return Prompt(name=name, kind=kind, sections=sections, sha256=hashlib.sha256(raw).hexdigest(), meta=meta)


def load_prompt(name: str, directory: Path | None = None) -> Prompt:
    """``load_prompt("judge/umbrela-chat")`` reads ``prompts/judge/umbrela-chat.md``; a path to a file works too."""
    path = Path(name)
    if path.suffix != ".md" or not path.exists():
        path = (directory or PROMPT_DIR) / f"{name}.md"
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise PromptError(f"cannot read prompt {name!r} ({error.strerror})", path=path) from None
    return parse_prompt(name, raw)
