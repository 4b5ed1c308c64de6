"""The progress bars and lines of :mod:`testset_builder.progress`, under the name the LLM stages have used. A stage
that needs no LLM (``chunk``) imports :mod:`testset_builder.progress` itself: importing this module imports the LLM
layer (its providers and client) first."""

from ..progress import LINE_EVERY_S, LINE_STEP, LineProgress, llm_progress, progress_line

__all__ = ["LINE_EVERY_S", "LINE_STEP", "LineProgress", "llm_progress", "progress_line"]
