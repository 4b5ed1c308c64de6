"""Releases: make one (``release``), read one, compare two (``diff``), copy one out (``export``), upload one
(``push``), bring a labelled set in (``import``), and project one onto another chunking (``remap``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError
from .workspace import load_config, opened

if TYPE_CHECKING:
    from ..config import Config
    from ..stages.importer import ImportSummary
    from ..stages.release import LoadedRelease, ReleaseDiff, ReleaseSummary
    from ..stages.release.remap import RemapSummary
    from ..store import Workspace


@dataclass
class ReleaseResult:
    """The version that holds the workspace's content, whether this call wrote it (``new``), where it is, and the
    new release's summary (None when the content was released already)."""

    version: str
    new: bool
    path: Path
    summary: ReleaseSummary | None = None
    coverage: dict | None = None  # how much of the logged traffic its questions cover (stages.release.coverage)

    def as_dict(self) -> dict:
        return {"version": self.version, "new": self.new, **({"coverage": self.coverage} if self.coverage else {})}


def release(
    config: Config,
    *,
    workspace: Workspace | None = None,
    version: str | None = None,
    bump: str | None = None,
    if_changed: bool = True,
    notes: str = "",
    parent: str | None = None,
    name: str | None = None,
    license: str | None = None,
    include_unverified: bool | None = None,
    estimates: bool | None = None,
    adjudicator: str | None = None,
    hold_unreviewed: bool | None = None,
) -> ReleaseResult:
    """Release the workspace's judgments as ``version``, or as the latest release bumped (``bump``: major, minor
    (default) or patch). With ``if_changed`` (the default; not with ``version``), nothing is written when the
    content equals the latest release's. ``notes`` and ``parent`` (default: the highest lower version) go in the
    manifest; ``name``, ``license``, ``include_unverified``, ``estimates``, ``adjudicator`` and
    ``hold_unreviewed`` override the config's ``release:`` section (None keeps it)."""
    from ..labels.policy import release_policy
    from ..stages.release import existing_versions, next_version, release_dir, release_if_changed, write_release

    if version is not None and bump is not None:
        raise InputError("give a version or a bump, not both")
    policy = release_policy(load_config(
        config, release__name=name, release__license=license, release__include_unverified=include_unverified,
        release__estimates=estimates, release__adjudicator=adjudicator, release__hold_unreviewed=hold_unreviewed,
    ))  # fmt: skip
    with opened(config, workspace) as ws:
        if version is None and if_changed:
            made, version = release_if_changed(ws, policy, bump or "minor", notes=notes, parent=parent)
            path = release_dir(ws.root, version)
            return ReleaseResult(version, made is not None, path, made, _coverage(ws, path))
        version = version or next_version(existing_versions(ws), bump or "minor")
        made = write_release(ws, version, policy, notes=notes, parent=parent)
        return ReleaseResult(made.version, True, Path(made.path), made, _coverage(ws, Path(made.path)))


def _coverage(ws: Workspace, path: Path) -> dict | None:
    """The coverage of the workspace's logged traffic by the release at ``path``, measured again when the log or
    the release changed since (:mod:`~testset_builder.stages.release.coverage`); None without a log."""
    from ..stages.release import load_release as loading
    from ..stages.release.coverage import measure_coverage
    from ..store.logs import has_logged_queries

    if not has_logged_queries(ws.db):
        return None
    loaded = loading(path, verify=False)  # the workspace's own release: its queries are all that is read
    return measure_coverage(ws, path, loaded.manifest["content_sha256"], loaded.queries)


def load_release(release: str | Path | LoadedRelease) -> LoadedRelease:
    """A release: a :class:`~testset_builder.stages.release.LoadedRelease` (returned as is), a release directory,
    or ``WORKSPACE@VERSION`` (VERSION may be ``latest``); its files are checked against their manifest's hashes. A
    release on the Hugging Face hub: :func:`testset_builder.load`."""
    from ..stages.release import LoadedRelease, release_dir
    from ..stages.release import load_release as loading

    if isinstance(release, LoadedRelease):
        return release
    root = workspace_of(release)
    return loading(release_dir(root, str(release).rsplit("@", 1)[1]) if root is not None else str(release))


def workspace_of(release: str | Path | LoadedRelease) -> Path | None:
    """The workspace a ``WORKSPACE@VERSION`` names (None for a release directory or a loaded release): where its
    baseline indexes are cached and its reports go."""
    spec = str(release)
    if "@" in spec and not Path(spec).exists():
        return Path(spec.rsplit("@", 1)[0])
    return None


def _of_workspace(config: Config, version: str) -> LoadedRelease:
    """The config's workspace's release ``version`` (or ``latest``)."""
    from ..stages.release import load_release as loading
    from ..stages.release import release_dir

    return loading(release_dir(config.workspace, version))


def diff(config: Config, old: str, new: str) -> ReleaseDiff:
    """What changed between two releases of the config's workspace: queries and qrels added, removed, regraded."""
    from ..stages.release import diff_releases

    return diff_releases(_of_workspace(config, old), _of_workspace(config, new))


@dataclass
class ExportResult:
    """A release copied out in one format: the files written under ``out``."""

    version: str
    format: str
    out: Path
    files: list[Path] = field(default_factory=list)

    def as_dict(self) -> dict:
        files = [str(path.relative_to(self.out)) for path in self.files]
        return {"version": self.version, "format": self.format, "out": str(self.out), "files": files}


def export_release(config: Config, version: str, fmt: str, out_dir: str | Path) -> ExportResult:
    """Copy the config's workspace's release ``version`` into ``out_dir`` (created; empty if it exists) as ``fmt``:
    hf, beir, trec, jsonl or a registered release export. The release itself stays as it is."""
    from ..export import RELEASE_EXPORTS
    from ..stages.release import export

    if fmt not in RELEASE_EXPORTS:
        raise InputError(f"unknown format {fmt!r}; use {', '.join(RELEASE_EXPORTS)}")
    loaded = _of_workspace(config, version)  # "latest" is named by its number in what the export says
    return ExportResult(loaded.version, fmt, Path(out_dir), export(loaded, fmt, out_dir))


@dataclass
class PushResult:
    """A release uploaded to the Hugging Face hub: the repository, the commit and its tag."""

    repo_id: str
    repo_url: str
    commit: str
    tag: str
    version: str

    def as_dict(self) -> dict:
        return asdict(self)


def push(config: Config, version: str, repo_id: str, *, private: bool = False) -> PushResult:
    """Upload the config's workspace's release ``version`` to the dataset repository ``repo_id`` (ORG/NAME) and tag
    that revision vVERSION; the token comes from HF_TOKEN."""
    from ..hub import push_release

    return PushResult(**push_release(_of_workspace(config, version), repo_id, private=private))


@dataclass
class ImportResult:
    """What an imported labelled set added (``summary``) and the release made of it (with a version)."""

    summary: ImportSummary
    release: ReleaseSummary | None = None

    def as_dict(self) -> dict:
        return {**self.summary.as_dict(), "release": self.release.as_dict() if self.release else None}


def import_set(
    config: Config,
    source: str | Path,
    *,
    queries: str | Path | None = None,
    version: str | None = None,
    workspace: Workspace | None = None,
) -> ImportResult:
    """Import a labelled set (a BEIR folder, an MTEB-layout dataset directory, or a qrels file with its
    ``queries``) into the workspace (created if missing; labels become human verdicts); with ``version``, release
    the imported state."""
    from ..labels.policy import release_policy
    from ..stages.importer import import_labelled_set
    from ..stages.release import write_release

    with opened(config, workspace, create=True) as ws:
        summary = import_labelled_set(ws, source, queries)
        notes = f"imported from {Path(source).name}"
        released = write_release(ws, version, release_policy(config), notes=notes) if version else None
    return ImportResult(summary, released)


def remap(
    release: str | Path | LoadedRelease,
    config: Config,
    version: str,
    *,
    notes: str = "",
    workspace: Workspace | None = None,
) -> RemapSummary:
    """Project a release's labels onto the config's workspace (the same documents chunked another way) as its new
    release ``version``; a chunk inherits a label when it covers ``remap.min_coverage`` of the label's span."""
    from ..labels.policy import release_policy
    from ..stages.release.remap import RemapPolicy, remap_release

    loaded = load_release(release)
    with opened(config, workspace) as ws:
        return remap_release(
            loaded, ws, version, RemapPolicy(config.remap.min_coverage), release_policy(config), notes=notes
        )
