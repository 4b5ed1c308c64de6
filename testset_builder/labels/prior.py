"""The shipped priors: the relevance model before a workspace has any verdict.

Each was fitted on the pools of the five collections ``benchmarks/estimate_transfer.py`` reads (their sources and
licences: ``benchmarks/data/README.md``), each weighing the same, by ``python benchmarks/estimate_transfer.py
--fit``, which also checks each collection left out of the fit. A pooled pair without a qrel counts as not
relevant.

- Only per-query z-scores and the dense cosine carry weight: ranks' logarithms and the raw BM25 ratio depend on the
  corpus's size and the query's length, so they do not transfer between domains.
- The LLM judge carries none: the embedded judge is at chance. A refit learns what a real judge is worth.
- The pooled systems' columns (:mod:`.systems`) are not among the features: no held-out collection here has both
  texts and systems that know more than BM25 and the dense model, so no prior weight for them can be fitted. A
  workspace's verdicts fit them.
- The base rate differs by domain, so no prior is calibrated everywhere: the verdicts' refit fixes that.
"""

from __future__ import annotations

from .model import RelevanceModel

PRIOR_FEATURES = ("dense", "dense_z", "bm25_z")  # what the prior fits; every other feature starts at weight 0
PRIOR_LEXICAL_FEATURES = ("bm25", "bm25_z")  # the same without a dense model

PRIOR = RelevanceModel(
    name="prior:five-domains-v6",
    bias=-3.2441,
    weights=(3.1572, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.3469, 0.3253, 0.0),
)

# for workspaces without the dense model
PRIOR_LEXICAL = RelevanceModel(
    name="prior:five-domains-lexical-v6",
    bias=-1.7897,
    weights=(0.0, 0.0, 0.4190, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.3220, 0.0),
)
