"""Retrieval for candidate pools and baseline runs: BM25 and reciprocal rank fusion."""

from .bm25 import BM25Index
from .fusion import reciprocal_rank_fusion

__all__ = ["BM25Index", "reciprocal_rank_fusion"]
