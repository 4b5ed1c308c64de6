"""testset-builder: build retrieval test sets you can trust, and score retrievers against them."""

__version__ = "0.1.0"
