"""Release versions: semantic (``MAJOR.MINOR.PATCH[-pre]``), ordered as semver orders them, bumped on request,
and found on disk (``releases/<version>/`` with a manifest; ``latest`` is the highest)."""

from __future__ import annotations

import re
from pathlib import Path

from ...errors import InputError, UnknownIdError
from ...store import history
from ...store.workspace import Workspace

SEMVER = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z.-]+))?")  # use fullmatch


def parse_version(version: str) -> tuple:
    match = SEMVER.fullmatch(version)  # not .match: "$" would accept "1.0.0\n"
    if not match:
        raise InputError(f"version {version!r} is not semantic (MAJOR.MINOR.PATCH, e.g. 1.0.0)")
    major, minor, patch, pre = match.groups()
    # a pre-release sorts before its release: 1.0.0-rc1 < 1.0.0
    return (int(major), int(minor), int(patch), 0 if pre else 1, pre or "")


def existing_versions(workspace: Workspace) -> list[str]:
    return sorted(history.release_versions(workspace.db), key=parse_version)


def next_version(versions: list[str], bump: str) -> str:
    """The version after the highest of ``versions`` (0.0.0 when none) with its ``bump`` part raised."""
    major, minor, patch = parse_version(versions[-1])[:3] if versions else (0, 0, 0)
    if bump == "major":
        return f"{major + 1}.0.0"
    if bump == "minor":
        return f"{major}.{minor + 1}.0"
    if bump == "patch":
        return f"{major}.{minor}.{patch + 1}"
    raise InputError(f"--bump takes major, minor or patch, not {bump!r}")


def release_dir(workspace_root: str | Path, version: str) -> Path:
    """``releases/<version>`` of a workspace; ``latest`` is the highest version released. Works without opening
    the workspace's database (``score --release`` reads only the files)."""
    releases = Path(workspace_root) / "releases"
    if version == "latest":
        found = [p.name for p in releases.glob("*") if (p / "manifest.json").exists() and SEMVER.fullmatch(p.name)]
        if not found:
            if not Path(workspace_root).is_dir():
                raise InputError(f"no workspace {str(workspace_root)!r}: give WORKSPACE@VERSION of a workspace")
            raise UnknownIdError("release", f"latest ({workspace_root} has no release yet: run `release` first)")
        version = max(found, key=parse_version)
    else:
        parse_version(version)  # a version is never a path: "../x" is refused here
    path = releases / version
    if not (path / "manifest.json").exists():
        raise UnknownIdError("release", f"{version} (no {path})")
    return path
