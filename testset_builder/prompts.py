"""Prompt templates as files: ``prompts/<stage>/<name>.md``, front matter then the template, hashed by content.

A file starts with a YAML front matter block between ``---`` lines (``kind: chat | completion``, a
``description``, and whatever the stage reads, e.g. ``max_tokens``). A chat template has ``[system]`` and
``[user]`` sections; a completion template is one block of text. Variables are ``{name}``; ``{{`` and ``}}`` are
literal braces. A variable the caller does not supply is an error, never an empty string.

The sha256 of the file's bytes goes into every lineage record, so a label can always be traced to the exact
wording that produced it (labels move with the prompt's wording). A :class:`PromptLibrary` reads a user's prompt
directory first (``prompts_dir:`` in the config) and the bundled prompts for every name it lacks.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from . import bundled
from .errors import PromptError
from .llm.types import LLMRequest, Message

_VARIABLE = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SECTION = re.compile(r"^\[(system|user)\]\s*$", re.MULTILINE)


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


class PromptLibrary:
    """Prompt files by name: ``directory`` (a user's own, optional) first, then the bundled prompts."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory) if directory is not None else None
        if self.directory is not None and not self.directory.is_dir():
            raise PromptError(f"prompts_dir {self.directory} is not a directory")
        self._loaded: dict[str, Prompt] = {}

    def load(self, name: str) -> Prompt:
        """``load("judge/umbrela-chat")`` reads ``judge/umbrela-chat.md``; a path to an ``.md`` file works too."""
        if name not in self._loaded:
            self._loaded[name] = parse_prompt(name, self._bytes(name))
        return self._loaded[name]

    def _bytes(self, name: str) -> bytes:
        path = Path(name)
        if path.suffix == ".md" and path.is_file():
            return path.read_bytes()
        if self.directory is not None and (self.directory / f"{name}.md").is_file():
            return (self.directory / f"{name}.md").read_bytes()
        resource = bundled.prompt_files().joinpath(f"{name}.md")
        if resource.is_file():
            return resource.read_bytes()
        looked = f"{self.directory} and the bundled prompts" if self.directory else "the bundled prompts"
        raise PromptError(f"no prompt {name!r} (looked in {looked}; a path to an .md file works too)")


def load_prompt(name: str, directory: str | Path | None = None) -> Prompt:
    """One prompt by name (see :class:`PromptLibrary`)."""
    return PromptLibrary(directory).load(name)
