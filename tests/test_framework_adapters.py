"""The LangChain and LlamaIndex adapters match a result by the workspace's id, else by its text (as import-logs matches
logged texts), and say what they could not match: no bare KeyError for a document without a chunk id, no silent
0.0 for nodes with the framework's own ids. LangChain's results are langchain-core's own ``Document`` objects;
llama-index-core is not installed here, so its results are objects with the attributes ``NodeWithScore`` has."""

from __future__ import annotations

import uuid

import pytest
from test_api import released  # noqa: F401  (the fixture)

from testset_builder import api
from testset_builder.errors import InputError

documents = pytest.importorskip("langchain_core.documents", reason="langchain-core gives the real Document class")


def relevant_texts(spec):
    """Each query's text -> its labelled chunks' (id, text), best grade first."""
    loaded = api.load_release(spec)
    return {
        loaded.queries[q]: [(c, loaded.corpus[c]["text"]) for c, _ in sorted(by.items(), key=lambda kv: -kv[1])]
        for q, by in loaded.qrels.items()
    }


class LangChainStore:
    """A LangChain retriever over ``results`` (query text -> Documents): what ``invoke`` returns."""

    def __init__(self, results):
        self.results = results

    def invoke(self, text):
        return self.results[text]


def test_langchain_documents_without_chunk_ids_are_matched_by_their_text(released):  # noqa: F811
    spec, _ = released
    by_query = relevant_texts(spec)
    Document = documents.Document
    plain = {
        q: [Document(page_content=text, id=str(uuid.uuid4())) for _, text in found] for q, found in by_query.items()
    }
    shouted = {q: [Document(page_content=f"  {text.upper()} ") for _, text in found] for q, found in by_query.items()}
    by_id = {q: [Document(page_content="as the app shows it", id=c) for c, _ in found] for q, found in by_query.items()}
    for results in (plain, shouted, by_id):
        wrapped = api.langchain_retriever(LangChainStore(results))
        scored = api.score(spec, wrapped, "recall@10,ndcg@10", ci=False)
        assert scored.metrics["recall@10"]["mean"] == 1.0 and scored.metrics["ndcg@10"]["mean"] == 1.0
        assert wrapped.unmatched == 0
    assert wrapped.matched == {"id": sum(map(len, by_query.values()))}


def test_results_matching_no_chunk_are_said_and_count_as_not_relevant(released):  # noqa: F811
    spec, _ = released
    by_query = relevant_texts(spec)
    Document = documents.Document
    half = {  # the best chunk by its text, the other a page the corpus never had
        q: [Document(page_content=found[0][1]), Document(page_content=f"an unknown page for {q}")]
        for q, found in by_query.items()
    }
    wrapped = api.langchain_retriever(LangChainStore(half))
    with pytest.warns(UserWarning, match=r"8 of 16 results matched no chunk of the release.*no chunk has this text"):
        scored = api.score(spec, wrapped, "recall@10", ci=False)
    assert scored.metrics["recall@10"]["mean"] == 0.5  # one of each query's two labelled chunks found
    nothing = {q: [Document(page_content="nothing like the corpus")] for q in by_query}
    with pytest.raises(InputError, match=r"every metric would read 0.*no metadata\['chunk_id'\].*export-chunks"):
        api.score(spec, api.langchain_retriever(LangChainStore(nothing)), "recall@10", ci=False)


class Node:
    """What a LlamaIndex ``TextNode`` has: ``metadata``, ``node_id``, ``text``."""

    def __init__(self, text, metadata=None):
        self.text, self.metadata, self.node_id = text, metadata or {}, str(uuid.uuid4())


class NodeWithScore:
    def __init__(self, node, score):
        self.node, self.score = node, score


class LlamaIndexStore:
    def __init__(self, results):
        self.results = results

    def retrieve(self, text):
        return self.results[text]


def test_llamaindex_nodes_with_their_own_ids_are_matched_by_their_text_not_scored_zero(released):  # noqa: F811
    spec, _ = released
    by_query = relevant_texts(spec)
    nodes = {q: [NodeWithScore(Node(text), 1.0 / (n + 1)) for n, (_, text) in enumerate(found)]
             for q, found in by_query.items()}  # fmt: skip
    wrapped = api.llamaindex_retriever(LlamaIndexStore(nodes))
    scored = api.score(spec, wrapped, "recall@10,ndcg@10", ci=False)
    assert scored.metrics["recall@10"]["mean"] == 1.0 and scored.metrics["ndcg@10"]["mean"] == 1.0
    assert wrapped.matched == {"exact": sum(map(len, by_query.values()))} and wrapped.unmatched == 0
    kept = {
        q: [NodeWithScore(Node("rendered", {"chunk_id": c}), 0.5) for c, _ in found] for q, found in by_query.items()
    }
    assert (
        api.score(spec, api.llamaindex_retriever(LlamaIndexStore(kept)), "recall@10", ci=False).metrics["recall@10"][
            "mean"
        ]
        == 1.0
    )
