"""testset-builder: build retrieval test sets you can trust, and score retrievers against them."""

from ._version import __version__ as __version__


def load(source, verify: bool = True):
    """Load a released test set: a release directory, or ``ORG/NAME@v1.0.0`` from the Hugging Face hub.

    Returns a :class:`~testset_builder.stages.release.LoadedRelease` (``corpus``, ``queries``, ``qrels``,
    ``manifest``); with ``verify`` every file is checked against the sha256 its manifest lists.
    """
    from .hub import load as _load

    return _load(source, verify=verify)
