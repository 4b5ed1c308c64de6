"""``init``: a new test set's folder — a config with every key, its value and what it does (generated from the config
models, so it cannot drift from them), a sample queries file, and a README stub.

The comments come from each setting's ``description`` and each section's docstring; values are those of the config
it starts from (a bundled one: quickstart, openai, anthropic), every default filled in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel

from .config import Config, as_yaml, bundled_config
from .errors import InputError

CONFIG_FILE = "testset-builder.yaml"
QUERIES_FILE = "queries.jsonl"
README_FILE = "README.md"
WIDTH = 120

SAMPLE_QUERIES = [
    {"_id": "q1", "text": "how do I rotate an API key without downtime?"},
    {"_id": "q2", "text": "what happens to queued jobs when a worker crashes"},
    {"_id": "q3", "text": "difference between soft and hard deletes"},
]


def _comment(text: str, indent: str) -> list[str]:
    """``text`` as YAML comment lines of at most WIDTH characters."""
    lines, line = [], ""
    for word in " ".join(text.replace("``", "`").split()).split(" "):
        if line and len(indent) + 2 + len(line) + 1 + len(word) > WIDTH:
            lines.append(f"{indent}# {line}")
            line = word
        else:
            line = f"{line} {word}" if line else word
    return lines + ([f"{indent}# {line}"] if line else [])


def _scalar(key: str, value, indent: str) -> list[str]:
    text = yaml.safe_dump({key: value}, sort_keys=False, allow_unicode=True, default_flow_style=True, width=10_000)
    line = indent + text.strip().removeprefix("{").removesuffix("}")
    if len(line) > WIDTH and isinstance(value, dict) and value:  # a long mapping: one entry a line
        return [f"{indent}{key}:"] + [entry for k, v in value.items() for entry in _scalar(k, v, indent + "  ")]
    return [line]


def _section(model: type[BaseModel], data: dict, indent: str) -> list[str]:
    lines = []
    for name, field in model.model_fields.items():
        if name not in data:
            continue
        value = data[name]
        nested = _model_of(field.annotation)
        if field.description:
            lines += _comment(field.description, indent)
        if nested is not None and isinstance(value, dict):
            if nested.__doc__ and not field.description:
                lines += _comment(nested.__doc__, indent)
            lines.append(f"{indent}{name}:")
            lines += _section(nested, value, indent + "  ")
        else:
            lines += _scalar(name, value, indent)
    return lines


def _model_of(annotation) -> type[BaseModel] | None:
    """The config model a field holds (through ``X | None``), if any."""
    for candidate in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def commented_config(config: Config, starting_from: str) -> str:
    """The config as YAML with every setting commented; loading it back gives ``config`` again."""
    data = yaml.safe_load(as_yaml(config))
    head = [
        f"# testset-builder config, started from the bundled {starting_from!r} config: every setting, its value and",
        "# what it does. Keys are read from the environment only (never write one here). Relative paths are taken from",
        "# this file's folder. `testset-builder config FILE` prints what commands will run with.",
        "",
    ]
    return "\n".join(head + _section(Config, data, "")) + "\n"


@dataclass
class InitSummary:
    directory: str
    files: list[str]
    starting_from: str

    def as_dict(self) -> dict:
        return {"directory": self.directory, "files": self.files, "starting_from": self.starting_from}


def init_project(directory: str | Path, starting_from: str = "quickstart", force: bool = False) -> InitSummary:
    """Write ``testset-builder.yaml``, ``queries.jsonl`` and ``README.md`` into ``directory`` (created if needed);
    refuses to overwrite any of them unless ``force``. The config's workspace is ``testset`` beside it."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise InputError("is a file; give a directory to create", path=directory)
    config = bundled_config(starting_from)
    config = config.model_copy(update={"workspace": Path("testset")})
    files = {
        CONFIG_FILE: commented_config(config, starting_from),
        QUERIES_FILE: "".join(json.dumps(q) + "\n" for q in SAMPLE_QUERIES),
        README_FILE: readme_stub(directory.resolve().name),
    }
    existing = [name for name in files if (directory / name).exists()]
    if existing and not force:
        raise InputError(f"{', '.join(existing)} already there; pass --force to overwrite", path=directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")
    return InitSummary(str(directory), list(files), starting_from)


def readme_stub(name: str) -> str:
    return (
        f"# {name}\n\n"
        "A retrieval test set built with testset-builder.\n\n"
        "## Corpus\n\nWhat the documents are, where they come from, and their license.\n\n"
        "## Queries\n\n`queries.jsonl` holds real user queries (one JSON object per line: `_id`, `text`); replace the "
        "samples with yours.\n\n"
        "## Building it\n\n"
        f"List the documents under `run: sources:` in `{CONFIG_FILE}` (and `run: queries: {QUERIES_FILE}` for real "
        "queries), then:\n\n"
        "```\n"
        f"testset-builder run {CONFIG_FILE}      # stops with exit code 4 while drawn pairs wait for review\n"
        f"testset-builder serve --config {CONFIG_FILE}\n"
        f"testset-builder run {CONFIG_FILE}      # releases, scores the baselines, writes the report\n"
        "```\n\n"
        "## Known limits\n\nWho reviewed, how many verdicts, and what the labels do not cover.\n"
    )
