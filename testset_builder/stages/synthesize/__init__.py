"""Synthesize: questions generated from sampled chunks, each auto-labelling its source chunk (and the source's
duplicate twins) grade 2, filtered, deduplicated, and mined for other relevant chunks. See :mod:`.stage`."""

from .generation import Generator, Slot, query_id_for
from .stage import SynthesizeSummary, synthesize

__all__ = ["Generator", "Slot", "SynthesizeSummary", "query_id_for", "synthesize"]
