"""Corpus ingestion and chunking."""

from .chunkers import ChunkerConfig, chunk_document, chunk_id

__all__ = ["ChunkerConfig", "chunk_document", "chunk_id"]
