"""The library under every command: what a notebook or a script calls, and what the CLI and ``run`` call.

Each stage is one function from a :class:`~testset_builder.config.Config` (and, optionally, a workspace you hold
open) to a result object with ``as_dict()``; none calls the CLI, none prints::

    from testset_builder import api

    config = api.load_config("my-set/testset-builder.yaml")   # or api.load_config(None, workspace="ws")
    result = api.run(config)                                     # the whole job: chunk ... release, report
    print(result.stopped_for_review, result.release)
    scored = api.score("my-set/testset@latest", my_retriever, ["recall@10", "ndcg@10"])
    print(scored.metrics["recall@10"]["mean"])

``my_retriever`` is any callable from a query's text to its ranked results: (chunk id, score) pairs, or chunk ids
alone (ranked first to last). :func:`langchain_retriever` and :func:`llamaindex_retriever` wrap those libraries'
retrievers (importing nothing of them until called).

Stages that call an LLM take ``progress`` (a ``rich.progress.Progress``, or None for none). A stage function opens
the config's workspace itself unless ``workspace`` is given; a process waiting for another to finish with the
workspace waits silently (the CLI says so on stderr).
"""

from __future__ import annotations

from ..registry import load_plugins

# each name's module: importing the package imports none of them, and a name its module alone (`score` needs one)
WHERE = {
    "corpus": ("ChunkResult", "ChunksExportResult", "IndexResult", "chunk", "export_chunks", "import_logs", "index"),
    "labelling": (
        "CostsResult",
        "EstimateResult",
        "ProposeResult",
        "QueueResult",
        "ResumeResult",
        "audit",
        "costs",
        "estimate",
        "judges_pools",
        "propose",
        "queue",
        "resume",
        "select",
        "select_logs",
        "synthesize",
    ),
    "pipeline": ("RunResult", "checks_questions", "plan", "run"),
    "releases": (
        "ExportResult",
        "ImportResult",
        "PushResult",
        "ReleaseResult",
        "diff",
        "export_release",
        "import_set",
        "load_release",
        "push",
        "release",
        "remap",
    ),
    "reviewing": (
        "ReviewersResult",
        "ReviewerToken",
        "ReviewExportResult",
        "ReviewServer",
        "ReviewSession",
        "ReviewStatsResult",
        "add_reviewer",
        "review_export",
        "review_import",
        "review_server",
        "review_session",
        "review_stats",
        "reviewers",
    ),
    "scoring": (
        "DEFAULT_METRICS",
        "BaselineResult",
        "CompareResult",
        "ReportResult",
        "Retriever",
        "ScoreResult",
        "baseline",
        "compare",
        "langchain_retriever",
        "llamaindex_retriever",
        "report",
        "retrieve",
        "score",
    ),
    "workspace": (
        "ConfigView",
        "describe_config",
        "init",
        "load_config",
        "open_workspace",
        "prompt_library",
        "run_async",
        "with_roles",
    ),
}
_MODULE_OF = {name: module for module, names in WHERE.items() for name in names}


def __getattr__(name: str):
    """A name of the library, imported from its module on first use; and a stage's constant the commands show (the
    stage's modules are slow to import)."""
    if name in _MODULE_OF:
        import importlib

        value = getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
        globals()[name] = value  # the next use is a plain lookup
        return value
    if name == "MINED_RELEVANT":  # the P(relevant) at which mining queues another chunk of a question
        from ..stages.synthesize.mining import MINED_RELEVANT

        return MINED_RELEVANT
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_METRICS", "BaselineResult", "ChunkResult", "ChunksExportResult", "CompareResult", "ConfigView",
    "CostsResult", "EstimateResult", "ExportResult", "ImportResult", "IndexResult", "ProposeResult", "PushResult",
    "QueueResult", "ReleaseResult", "ReportResult", "ResumeResult", "Retriever", "ReviewExportResult",
    "ReviewServer", "ReviewSession", "ReviewStatsResult", "ReviewerToken", "ReviewersResult", "RunResult",
    "ScoreResult", "add_reviewer", "audit", "baseline", "checks_questions", "chunk", "compare", "costs",
    "describe_config", "diff", "estimate", "export_chunks", "export_release", "import_logs", "import_set", "index",
    "init", "judges_pools", "langchain_retriever", "llamaindex_retriever", "load_config", "load_plugins",
    "load_release", "open_workspace", "plan", "prompt_library", "propose", "push", "queue", "release", "remap",
    "report", "resume", "retrieve", "review_export", "review_import", "review_server", "review_session",
    "review_stats", "reviewers", "run", "run_async", "score", "select", "select_logs", "synthesize", "with_roles",
]  # fmt: skip
