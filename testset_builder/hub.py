"""The Hugging Face hub: push a release (upload the folder, tag the revision ``v<version>``) and load one back.

The token comes from ``HF_TOKEN`` (or huggingface_hub's own login); it is never written anywhere. ``HF_ENDPOINT``
points at another hub (a mirror, or a test server).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import HubError, InputError
from .stages.release import LoadedRelease, load_release


def _api():
    try:
        from huggingface_hub import HfApi
    except ImportError:  # it comes with datasets, so this is rare
        raise InputError("pushing needs huggingface_hub: pip install huggingface_hub") from None
    return HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None, token=os.environ.get("HF_TOKEN") or None)


def _endpoint() -> str:
    return os.environ.get("HF_ENDPOINT") or "https://huggingface.co"


NETWORK_LIBRARIES = {"httpx", "httpx2", "httpcore", "requests", "urllib3"}


def network_failure(error: BaseException) -> bool:
    """Whether the hub client failed to reach the hub: an OS-level connection error, or a transport error of the
    HTTP library it uses (httpx, its fork httpx2, or requests, by version), recognised by the library it comes
    from rather than by importing each."""
    if isinstance(error, (OSError, TimeoutError)):
        return True
    return any(cls.__module__.split(".")[0] in NETWORK_LIBRARIES for cls in type(error).__mro__)


@contextmanager
def hub_errors(what: str) -> Iterator[None]:
    """Turn what the hub client raises (offline mode, an HTTP refusal, a network failure) into one-line HubErrors;
    ``what`` says what was being done."""
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled

    try:
        yield
    except OfflineModeIsEnabled:
        raise HubError(f"HF_HUB_OFFLINE is set, so the hub cannot be reached to {what}; unset it") from None
    except LocalEntryNotFoundError:
        raise HubError(
            f"cannot {what}: not in the local cache and the hub cannot be reached (HF_HUB_OFFLINE?)"
        ) from None
    except HfHubHTTPError as error:
        status = error.response.status_code if error.response is not None else "?"
        raise HubError(f"the hub answered {status} to {what}: {str(error).splitlines()[0]}") from None
    except Exception as error:
        if network_failure(error):
            raise HubError(
                f"cannot reach the hub at {_endpoint()} to {what} ({type(error).__name__}: {error})"
            ) from None
        raise


def push_release(release: LoadedRelease, repo_id: str, private: bool = False) -> dict:
    """Create the dataset repository if needed, upload the release folder in one commit, and tag it."""
    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise InputError(f"--repo-id must look like ORG/NAME, not {repo_id!r}")
    api = _api()
    tag = f"v{release.version}"
    with hub_errors(f"push {repo_id}"):
        repo = api.create_repo(repo_id, repo_type="dataset", private=True if private else None, exist_ok=True)
        commit = api.upload_folder(
            folder_path=str(release.path),
            repo_id=repo_id,
            repo_type="dataset",
            commit_message=f"testset-builder release {release.version}",
            commit_description=release.manifest.get("notes") or "",
        )
        api.create_tag(
            repo_id,
            tag=tag,
            revision=commit.oid,
            repo_type="dataset",
            tag_message=f"release {release.version}, content sha256 {release.manifest['content_sha256']}",
        )
    return {"repo_id": repo_id, "repo_url": str(repo), "commit": commit.oid, "tag": tag, "version": release.version}


def load(source: str | Path, verify: bool = True) -> LoadedRelease:
    """A release from a directory, or from the hub as ``ORG/NAME@v1.0.0`` (downloaded at that tag)."""
    path = Path(source)
    if path.exists():
        return load_release(path, verify=verify)
    text = str(source)
    if "@" not in text:
        raise InputError(f"{text!r} is neither a release directory nor ORG/NAME@vVERSION")
    repo_id, revision = text.rsplit("@", 1)
    from huggingface_hub import snapshot_download

    with hub_errors(f"download {text}"):
        folder = snapshot_download(
            repo_id,
            repo_type="dataset",
            revision=revision,
            endpoint=os.environ.get("HF_ENDPOINT") or None,
            token=os.environ.get("HF_TOKEN") or None,
        )
    return load_release(Path(folder), verify=verify)
