"""Apps traced by the real instrumentors import with exact counts: a LangChain chain called with a dict, behind a
FastAPI server whose span is the trace's root (OpenInference's LangChain instrumentor and OpenTelemetry's FastAPI
instrumentor), and a LlamaIndex query engine (OpenInference's LlamaIndex instrumentor). Nothing here sets a span
attribute by hand except the feedback a user gave, which the app puts on its request span: every query stored is the
question the user asked, each request is counted once, and a vector store holding a document twice is folded."""

from __future__ import annotations

import pytest
from test_logs_app_traces import otlp_lines, stored
from test_logs_otel import Collected, workspace_chunks

from testset_builder.config import LogsConfig
from testset_builder.stages.logs.importer import import_logs

pytest.importorskip("opentelemetry.sdk.trace", reason="the test extra installs opentelemetry-sdk")

QUESTIONS = [f"how does {topic} work here?" for topic in ("recall", "ndcg", "bm25", "review", "release", "pooling")]
ASKED = [0, 1, 2, 3, 4, 5, 0, 1]  # request i asks QUESTIONS[ASKED[i]]
THUMBS = {0: "up", 3: "down", 6: "down"}  # request -> the feedback its user gave
SESSIONS = 3  # request i is in session i % 3


def picked(ids: list[str], i: int) -> list[str]:
    """The chunks the app's vector store returns for request ``i``, in rank order."""
    return [ids[(3 * i + k) % len(ids)] for k in range(3)]


def expected(ids: list[str]) -> dict:
    latest = {}
    for i, asked in enumerate(ASKED):
        latest[QUESTIONS[asked]] = picked(ids, i)
    first = {QUESTIONS[a]: ASKED.index(a) for a in set(ASKED)}  # a question's session is its earliest request's
    return {
        "frequency": {QUESTIONS[a]: ASKED.count(a) for a in set(ASKED)},
        "up": sum(v == "up" for v in THUMBS.values()),
        "down": sum(v == "down" for v in THUMBS.values()),
        "sessions": len({i % SESSIONS for i in first.values()}),
        "run": latest,
    }


def assert_imported(ws, summary, ids: list[str]) -> None:
    want, held = expected(ids), stored(ws)
    assert (summary.records, summary.unreadable, summary.feedback) == (len(ASKED), 0, len(THUMBS))
    assert summary.new_queries == len(QUESTIONS)
    assert {q: row["frequency"] for q, row in held["queries"].items()} == want["frequency"]  # the users' questions
    assert sum(row["thumbs_up"] for row in held["queries"].values()) == want["up"]
    assert sum(row["thumbs_down"] for row in held["queries"].values()) == want["down"]
    assert len({row["session"] for row in held["queries"].values()}) == want["sessions"]
    assert held["run"] == want["run"]


@pytest.fixture
def tracing():
    """A tracer provider whose finished spans are kept in memory."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    collected = Collected()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(collected))
    yield provider, collected
    provider.shutdown()


def test_a_langchain_app_behind_fastapi_imports_each_request_with_the_users_question(docs_workspace, tmp_path, tracing):
    """The chain is called with ``{"question", "chat_history"}`` inside a FastAPI route (the server's span is the
    root, its input the HTTP request); the retriever's documents carry the chunk id only in their metadata, and the
    store returns its first document twice."""
    pytest.importorskip("openinference.instrumentation.langchain", reason="the test extra installs it")
    pytest.importorskip("opentelemetry.instrumentation.fastapi", reason="the test extra installs it")
    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from langchain_core.documents import Document
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableLambda
    from openinference.instrumentation import using_session
    from openinference.instrumentation.langchain import LangChainInstrumentor
    from opentelemetry import trace
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    provider, collected = tracing
    ids, passages = workspace_chunks(docs_workspace)
    served = {"request": 0}

    class VectorStore(BaseRetriever):
        def _get_relevant_documents(self, query, *, run_manager=None):
            chosen = picked(ids, served["request"])
            return [
                Document(page_content=passages[c], metadata={"chunk_id": c, "source": "docs"}, id=f"uuid-{n}")
                for n, c in enumerate([chosen[0], *chosen])  # the first document stored twice
            ]

    def question(inputs: dict) -> str:
        return inputs["question"]

    prompt = ChatPromptTemplate.from_template("Context: {context}\nQuestion: {question}")
    chain = (
        {"context": RunnableLambda(question) | VectorStore(), "question": RunnableLambda(question)}
        | prompt
        | FakeListChatModel(responses=[f"answer {i}" for i in range(len(ASKED))])
        | StrOutputParser()
    )
    app = FastAPI()

    @app.post("/chat")
    def chat(body: dict) -> dict:
        with using_session(body["session"]):
            answer = chain.invoke({"question": body["question"], "chat_history": []})
        if body.get("thumbs"):  # the user's feedback, which the app puts on its request span
            trace.get_current_span().set_attribute("thumbs", body["thumbs"])
        return {"reply": answer}

    LangChainInstrumentor().instrument(tracer_provider=provider)
    FastAPIInstrumentor.instrument_app(app, tracer_provider=provider)
    try:
        client = TestClient(app)
        for i, asked in enumerate(ASKED):
            served["request"] = i
            body = {"question": QUESTIONS[asked], "session": f"session-{i % SESSIONS}", "thumbs": THUMBS.get(i)}
            assert client.post("/chat", json=body).status_code == 200
    finally:
        LangChainInstrumentor().uninstrument()
        FastAPIInstrumentor.uninstrument_app(app)
    spans = list(collected.memory.get_finished_spans())
    assert any(s.kind.name == "SERVER" and s.parent is None for s in spans)  # the server's span is the root
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(otlp_lines(spans)), encoding="utf-8")
    settings = LogsConfig.model_validate({"format": "otel", "fields": {"retrieved_id": "chunk_id"}})
    summary = import_logs(docs_workspace, path, settings)
    assert (summary.results, summary.results_folded) == (4 * len(ASKED), len(ASKED))
    assert_imported(docs_workspace, summary, ids)
    path.write_text("".join(otlp_lines(spans, per_line=3)), encoding="utf-8")  # the same traces exported again
    again = import_logs(docs_workspace, path, settings)
    assert (again.records, again.feedback, again.skipped) == (0, 0, {"seen before": len(ASKED)})
    assert_imported(docs_workspace, summary, ids)


def test_a_llamaindex_query_engine_imports_each_request_with_the_users_question(docs_workspace, tmp_path, tracing):
    """A query engine over a retriever whose nodes are the workspace's chunks (LlamaIndex traces two retriever spans
    a query: the question's and the internal one's)."""
    pytest.importorskip("openinference.instrumentation.llama_index", reason="the test extra installs it")
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, TextNode
    from openinference.instrumentation import using_attributes
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor
    from opentelemetry import trace

    provider, collected = tracing
    ids, passages = workspace_chunks(docs_workspace)
    served = {"request": 0}

    class VectorStore(BaseRetriever):
        def _retrieve(self, query_bundle):
            chosen = picked(ids, served["request"])
            nodes = [TextNode(text=passages[c], id_=c) for c in chosen]
            return [NodeWithScore(node=node, score=0.9 - k / 10) for k, node in enumerate(nodes)]

    engine = RetrieverQueryEngine.from_args(VectorStore(), llm=MockLLM(max_tokens=8))
    tracer = provider.get_tracer("llamaindex-app")
    LlamaIndexInstrumentor().instrument(tracer_provider=provider)
    try:
        for i, asked in enumerate(ASKED):
            served["request"] = i
            with using_attributes(session_id=f"session-{i % SESSIONS}"):
                with tracer.start_as_current_span("handle request"):  # the app's own span, where feedback goes
                    engine.query(QUESTIONS[asked])
                    if i in THUMBS:
                        trace.get_current_span().set_attribute("thumbs", THUMBS[i])
    finally:
        LlamaIndexInstrumentor().uninstrument()
    spans = list(collected.memory.get_finished_spans())
    retrievers = [s for s in spans if s.attributes.get("openinference.span.kind") == "RETRIEVER"]
    assert len(retrievers) == 2 * len(ASKED)
    assert {s.attributes["input.value"] for s in retrievers} - set(QUESTIONS)  # one of the two is not the question
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(otlp_lines(spans, per_line=7)), encoding="utf-8")
    summary = import_logs(docs_workspace, path, LogsConfig(format="otel"))
    assert summary.by_id == 3 * len(ASKED)
    assert_imported(docs_workspace, summary, ids)
