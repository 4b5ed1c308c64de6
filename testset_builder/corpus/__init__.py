"""Corpus ingestion and chunking."""

from ..config import ChunkingConfig
from .chunkers import chunk_document, chunk_id

__all__ = ["ChunkingConfig", "chunk_document", "chunk_id"]
