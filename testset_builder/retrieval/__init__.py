"""Retrieval for candidate pools and baseline runs: BM25, dense (extra ``dense``) and reciprocal rank fusion."""

from .bm25 import BM25Index
from .dense import DenseIndex, dense_available
from .fusion import reciprocal_rank_fusion

__all__ = ["BM25Index", "DenseIndex", "dense_available", "reciprocal_rank_fusion"]
