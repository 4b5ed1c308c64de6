"""Release: resolve judgments into qrels by a stated policy (:mod:`testset_builder.labels.policy`, shared with the
review's agreement figures), write an immutable, versioned labelled set (:mod:`.writer`, :mod:`.versions`), and read,
compare and export releases (:mod:`.reader`)."""

from ...labels.policy import ORIGINS, ReleasePolicy, ResolvedQrel, describe, resolve
from .reader import LoadedRelease, ReleaseDiff, diff_releases, export, load_release
from .versions import SEMVER, existing_versions, next_version, parse_version, release_dir
from .writer import ReleaseContent, ReleaseSummary, RemapOrigin, gather, lineage, release_if_changed, write_release

__all__ = [
    "ORIGINS",
    "SEMVER",
    "LoadedRelease",
    "ReleaseContent",
    "ReleaseDiff",
    "ReleasePolicy",
    "ReleaseSummary",
    "RemapOrigin",
    "ResolvedQrel",
    "describe",
    "diff_releases",
    "existing_versions",
    "export",
    "gather",
    "lineage",
    "load_release",
    "next_version",
    "parse_version",
    "release_dir",
    "release_if_changed",
    "resolve",
    "write_release",
]
