"""The SQLite workspace: schema migrations, transactions, and record persistence."""

from .migrations import LATEST as LATEST_SCHEMA
from .rows import (
    add_judgments,
    get_chunk,
    get_document,
    get_query,
    iter_chunks,
    iter_judgments,
    put_chunks,
    put_documents,
    put_queries,
)
from .workspace import DB_NAME, Workspace, open_workspace

__all__ = [
    "DB_NAME",
    "LATEST_SCHEMA",
    "Workspace",
    "add_judgments",
    "get_chunk",
    "get_document",
    "get_query",
    "iter_chunks",
    "iter_judgments",
    "open_workspace",
    "put_chunks",
    "put_documents",
    "put_queries",
]
