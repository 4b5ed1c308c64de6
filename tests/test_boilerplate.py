"""Page furniture (navigation, tables of contents, "this page" blocks, cookie banners, repeated footers) is marked on
its chunks: kept searchable, never a synthetic question's source, never taken for sure in review. Checked on pages
Sphinx and MkDocs build themselves, on hand-written HTML in the shapes of Docusaurus, GitBook and plain sites, and on
text without markup."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fake_provider import FakeProvider, passage_of, question_words, shared_words_grade

from testset_builder.config import ChunkingConfig, SynthesizeConfig
from testset_builder.corpus.boilerplate import NAVIGATION, REPEATED, text_reason
from testset_builder.corpus.ingest import ingest
from testset_builder.corpus.loaders import load_sources
from testset_builder.labels.design import split_budget
from testset_builder.store import corpus as corpus_store
from testset_builder.store import open_workspace, rows

CHUNKING = ChunkingConfig(chunker="markdown", size=800, overlap=80)  # what the quickstart config cuts with

PAGES = {
    "install": (
        "Installing widgets",
        "Download the archive and run the installer. The installer checks that Python 3.10 or later is present "
        "and refuses to continue otherwise.",
        "Upgrading",
        "An upgrade keeps the settings file in place; the old binaries are moved to a backup folder named after "
        "the version.",
    ),
    "usage": (
        "Using widgets",
        "Start a widget with the run command. The widget prints the port it listens on and writes a log file "
        "beside its settings.",
        "Stopping",
        "Send SIGTERM to stop a widget gracefully: it finishes the requests in flight, then exits with status zero.",
    ),
    # sections whose titles are furniture words: their ids ("cookie-objects", "navigation") name no furniture
    "cookies": (
        "Cookie objects",
        "A widget keeps the session of each client in a cookie object, signed with the key from its settings file.",
        "Navigation",
        "The console of a widget moves between panes with the arrow keys; the tab key moves to the next field.",
    ),
}
CONTENT = [sentence for title, first, section, second in PAGES.values() for sentence in (first, second)]


def marked_chunks(workspace) -> tuple[dict[str, str], dict[str, str]]:
    """(chunk id -> text of the marked live chunks, chunk id -> text of the others)."""
    marks = corpus_store.boilerplate_chunks(workspace.db)
    texts = dict(corpus_store.live_chunk_texts(workspace.db))
    return {c: t for c, t in texts.items() if c in marks}, {c: t for c, t in texts.items() if c not in marks}


def ingested(tmp_path: Path, folder: Path):
    workspace = open_workspace(tmp_path / "ws")
    ingest(workspace, load_sources([folder]), CHUNKING)
    return workspace


def build_tool(module: str, command: list[str], cwd: Path) -> None:
    """Run a documentation tool as its own users do; without it the test skips, except under CI=true."""
    if importlib.util.find_spec(module) is None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must have {module} (the dev extra installs it)", pytrace=False)
        pytest.skip(f"{module} is not installed (pip install -e '.[dev]')")
    subprocess.run([sys.executable, "-m", *command], cwd=cwd, check=True, capture_output=True, timeout=300)


def sphinx_site(tmp_path: Path, theme: str) -> Path:
    source = tmp_path / "src"
    source.mkdir()
    (source / "conf.py").write_text(f'project = "Widgets"\nhtml_theme = "{theme}"\n', encoding="utf-8")
    toctree = "\n".join(f"   {name}" for name in PAGES)
    (source / "index.rst").write_text(
        f"Widgets\n=======\n\n.. toctree::\n\n{toctree}\n\nWidgets turn configuration files into services.\n",
        encoding="utf-8",
    )
    for name, (title, first, section, second) in PAGES.items():
        rst = f"{title}\n{'=' * len(title)}\n\n{first}\n\n{section}\n{'-' * len(section)}\n\n{second}\n"
        (source / f"{name}.rst").write_text(rst, encoding="utf-8")
    build_tool("sphinx", ["sphinx", "-q", "-b", "html", str(source), str(tmp_path / "html")], tmp_path)
    site = tmp_path / "site"
    site.mkdir()
    for name in ["index", *PAGES]:  # the pages, as a crawl of the built site keeps them
        (site / f"{name}.html").write_bytes((tmp_path / "html" / f"{name}.html").read_bytes())
    return site


def mkdocs_site(tmp_path: Path, theme: str) -> Path:
    project = tmp_path / "project"
    (project / "docs").mkdir(parents=True)
    nav = "\n".join(f"  - {title}: {name}.md" for name, (title, *_) in PAGES.items())
    (project / "mkdocs.yml").write_text(
        f"site_name: Widgets\ntheme: {theme}\nnav:\n  - Home: index.md\n{nav}\n", encoding="utf-8"
    )
    (project / "docs" / "index.md").write_text("# Widgets\n\nWidgets turn configuration files into services.\n")
    for name, (title, first, section, second) in PAGES.items():
        (project / "docs" / f"{name}.md").write_text(f"# {title}\n\n{first}\n\n## {section}\n\n{second}\n")
    build_tool("mkdocs", ["mkdocs", "build", "-q", "-d", str(tmp_path / "built")], project)
    site = tmp_path / "site"
    site.mkdir()
    for name in ["index", *PAGES]:
        built = tmp_path / "built" / ("index.html" if name == "index" else f"{name}/index.html")
        (site / f"{name}.html").write_bytes(built.read_bytes())
    return site


def assert_content_kept_and_furniture_marked(workspace, furniture: list[str]) -> None:
    marked, content = marked_chunks(workspace)
    for sentence in CONTENT:  # every sentence of the pages' text is in a chunk that is not marked
        assert any(sentence in text for text in content.values()), f"content marked as boilerplate: {sentence!r}"
    for phrase in furniture:  # and every piece of furniture only in marked chunks
        assert any(phrase in text for text in marked.values()), f"furniture not marked: {phrase!r}"
        assert not any(phrase in text for text in content.values()), f"furniture left unmarked: {phrase!r}"


@pytest.mark.parametrize(
    "theme, furniture",
    [
        ("classic", ["### Navigation", "Table of Contents", "This Page", "Show Source", "Quick search", "Previous"]),
        ("alabaster", ["### Navigation", "Related Topics", "Documentation overview", "Powered by"]),
    ],
)
def test_a_sphinx_sites_sidebars_and_this_page_blocks_are_marked_and_its_text_is_not(tmp_path, theme, furniture):
    with ingested(tmp_path, sphinx_site(tmp_path, theme)) as workspace:
        assert_content_kept_and_furniture_marked(workspace, furniture)


@pytest.mark.parametrize(
    "theme, furniture",
    [
        ("mkdocs", ["Keyboard Shortcuts", "From here you can search these documents"]),
        ("readthedocs", ["- Home"]),  # its breadcrumbs (its pagination's two links ride on a paragraph of text)
    ],
)
def test_an_mkdocs_sites_navigation_and_dialogs_are_marked_and_its_text_is_not(tmp_path, theme, furniture):
    with ingested(tmp_path, mkdocs_site(tmp_path, theme)) as workspace:
        assert_content_kept_and_furniture_marked(workspace, furniture)


PROSE = (
    "The scheduler runs each job in its own process. A job that exceeds its memory limit is stopped, and the "
    "scheduler retries it once with twice the limit before it marks the job failed."
)
HAND_WRITTEN = {
    "plain": (
        f"""<html><body><div id="menu"><a href="/">Home</a> | <a href="/about">About</a> |
        <a href="/contact">Contact</a></div>
        <div class="cookie-banner">We use cookies to give you the best experience on our site.
        <button>Accept all</button></div>
        <h1>Scheduler</h1><p>{PROSE} See <a href="/limits">memory limits</a> for the defaults.</p>
        <div id="footer-links"><a href="/privacy">Privacy</a> <a href="/terms">Terms</a></div></body></html>""",
        ["Home", "We use cookies", "Privacy"],
    ),
    "docusaurus": (
        f"""<html><body><div id="__docusaurus"><nav class="navbar">Docs Blog</nav><div class="main-wrapper">
        <aside class="theme-doc-sidebar-container">Intro Scheduler</aside><main class="docMainContainer">
        <div class="row"><div class="col docItemCol"><article>
        <div class="tocCollapsible theme-doc-toc-mobile"><button type="button">On this page</button></div>
        <div class="theme-doc-markdown markdown"><h1>Scheduler</h1><p>{PROSE}</p></div>
        <footer class="theme-doc-footer"><a href="/edit">Edit this page</a></footer></article>
        <nav class="pagination-nav"><a href="/intro">Previous Intro</a></nav></div>
        <div class="col col--3"><div class="tableOfContents theme-doc-toc-desktop">
        <ul class="table-of-contents"><li><a href="#jobs">Jobs</a></li><li><a href="#retries">Retries and memory
        limits</a></li></ul></div></div></div></main></div></div></body></html>""",
        ["On this page", "Retries and memory limits"],
    ),
    "gitbook": (
        f"""<html><body><header>Acme docs</header><div class="flex"><aside>Getting started</aside>
        <main><h1>Scheduler</h1><p>{PROSE}</p>
        <div class="flex flex-row"><a href="/intro"><span>Previous</span><span>Introduction</span></a>
        <a href="/setup"><span>Next</span><span>Setting up workers</span></a></div>
        <div>Last updated 3 months ago</div></main>
        <div class="page-aside"><div>Was this helpful?</div></div></div></body></html>""",
        ["Setting up workers", "Was this helpful?"],
    ),
}


@pytest.mark.parametrize("kind", sorted(HAND_WRITTEN))
def test_hand_written_and_generated_html_furniture_is_marked_and_the_prose_is_not(tmp_path, kind):
    markup, furniture = HAND_WRITTEN[kind]
    site = tmp_path / "site"
    site.mkdir()
    (site / "scheduler.html").write_text(markup, encoding="utf-8")
    # small chunks: each block its own, so a mark is judged block by block
    workspace = open_workspace(tmp_path / "ws")
    with workspace:
        ingest(workspace, load_sources([site]), ChunkingConfig(chunker="recursive", size=60, overlap=0))
        marked, content = marked_chunks(workspace)
        assert PROSE.split(". ")[0] in " ".join(content.values())  # the prose is content, its inline link too
        for phrase in furniture:
            assert phrase in " ".join(marked.values()), f"furniture not marked: {phrase!r}"
            assert phrase not in " ".join(content.values()), f"furniture left unmarked: {phrase!r}"


def test_text_without_markup_is_marked_by_its_links_and_furniture_lines_and_prose_about_cookies_is_not():
    assert text_reason("- [Home](index.md)\n- [Install](install.md)\n- [Usage](usage.md)") == NAVIGATION
    assert text_reason("Table of Contents\n\nPrevious topic\n\nNext topic\n\nThis Page\n\nShow Source") == "furniture"
    assert text_reason("Python » 3.12 Documentation » The Python Standard Library »") == "furniture"
    cookies = (
        "The http.cookies module defines classes for abstracting the concept of cookies, an HTTP state management "
        "mechanism. It supports both simple string-only cookies, and provides an abstraction for any serializable "
        "data-type as cookie value."
    )
    assert text_reason(cookies) == "" and text_reason(PROSE + " See [limits](limits.md).") == ""


def repeated_corpus(folder: Path, documents: int, with_footer: int) -> str:
    footer = "Widgets is maintained by the platform team. Questions go to the team's channel, not to this page."
    folder.mkdir()
    for i in range(documents):
        body = f"# Page {i}\n\nPage {i} explains topic number {i} of the widget system in its own words.\n\n"
        tail = f"## About\n\n{footer}\n" if i < with_footer else ""
        (folder / f"page{i}.md").write_text(body + tail, encoding="utf-8")
    return footer


def test_a_block_repeated_across_most_documents_is_marked_and_one_a_few_documents_share_is_not(tmp_path, capsys):
    from testset_builder.cli import main

    footer = repeated_corpus(tmp_path / "site", documents=6, with_footer=6)
    assert main(["chunk", str(tmp_path / "site"), "--workspace", str(tmp_path / "ws")]) == 0
    assert "6 marked boilerplate (6 repeated" in capsys.readouterr().out
    with open_workspace(tmp_path / "ws") as workspace:
        marked, _ = marked_chunks(workspace)
        assert all(footer in text for text in marked.values()) and len(marked) == 6
        assert set(corpus_store.boilerplate_chunks(workspace.db).values()) == {REPEATED}
    repeated_corpus(tmp_path / "big", documents=12, with_footer=2)  # two pages of twelve: not a site's footer
    with ingested(tmp_path / "second", tmp_path / "big") as workspace:
        assert corpus_store.boilerplate_counts(workspace.db) == {}


def asked(request):
    """A generator that asks about the passage's words, and a judge that grades shared words."""
    grade = shared_words_grade(request.prompt)
    if grade is not None:
        return grade
    words = question_words(passage_of(request.prompt))[:3]
    return f" how does {' '.join(words).lower()} work in practice number {request.seed % 97}?"


def test_no_synthetic_question_is_sourced_on_a_marked_chunk(tmp_path):
    from testset_builder.llm import LLMClient
    from testset_builder.llm.roles import Roles
    from testset_builder.stages.synthesize import synthesize

    site = tmp_path / "site"
    site.mkdir()
    for i, (kind, (markup, _)) in enumerate(sorted(HAND_WRITTEN.items()) * 2):
        (site / f"{kind}{i}.html").write_text(markup.replace("Scheduler", f"Scheduler part {i}"), encoding="utf-8")
    with open_workspace(tmp_path / "ws") as workspace:
        ingest(workspace, load_sources([site]), ChunkingConfig(chunker="recursive", size=120, overlap=0))
        marked = corpus_store.boilerplate_chunks(workspace.db)
        assert marked
        client = LLMClient(FakeProvider(asked), workspace, "synthesize")
        settings = SynthesizeConfig(questions=30, mine=False, critic=False, check_sources=False, min_chars=20)
        summary = asyncio.run(synthesize(workspace, Roles.single(client, "fake-model"), settings))
        sources = [
            chunk_id
            for (query_id,) in workspace.db.execute("SELECT query_id FROM queries")
            for chunk_id in rows.get_query(workspace.db, query_id).metadata["source_chunk_ids"]
        ]
        assert sources and not set(sources) & set(marked)
        assert summary.chunks_skipped["boilerplate"] >= len(marked)


def test_a_pair_on_a_marked_chunk_is_never_taken_for_sure_and_keeps_a_known_chance_in_the_random_draw():
    query_ids = ["q1"] * 4 + ["q2"] * 4
    p = [0.95, 0.9, 0.6, 0.1, 0.99, 0.7, 0.2, 0.1]
    furniture = [True, False, False, False, True, True, False, False]
    split = split_budget(
        query_ids, p, [1.0] * 8, {"q1", "q2"}, budget=4, uniform_share=0.2, take_all_share=0.5, per_query=3, seed=0,
        furniture=furniture,
    )  # fmt: skip
    assert split.certain and not any(furniture[i] for i in split.certain)
    inclusion = split.inclusion()
    even_share = 0.2 * split.sample_budget / len(split.rest)
    for i in np.flatnonzero(furniture):  # the even share only: known, above 0, below any likely pair's
        assert inclusion[i] == pytest.approx(even_share)
    unmarked = [i for i in split.rest if not furniture[i]]
    assert inclusion[unmarked].sum() + inclusion[np.flatnonzero(furniture)].sum() == pytest.approx(2)


def pairs_to_review(path: Path):
    """The project's docs corpus, chunked as the demo chunks it, with two real queries each paired with every chunk
    in the review queue (as the ``pair_queue`` fixture, at ``path``)."""
    from conftest import queue_every_chunk

    from testset_builder.records import Query, QueryOrigin

    workspace = open_workspace(path)
    docs = Path(__file__).resolve().parents[1] / "examples" / "corpus"
    ingest(workspace, load_sources([docs]), ChunkingConfig(chunker="markdown", size=600, overlap=60))
    queries = [
        Query(query_id="q-ndcg", text="how is ndcg computed", origin=QueryOrigin.real),
        Query(query_id="q-recall-at-k", text="what does recall at k count", origin=QueryOrigin.real),
    ]
    queue_every_chunk(workspace, queries, rows.live_chunk_rows(workspace.db))
    return workspace


def test_select_never_takes_a_marked_chunk_for_sure_and_draws_it_only_with_the_even_share(tmp_path):
    from testset_builder.stages.selection import select_for_review
    from testset_builder.store import draws as stored

    with pairs_to_review(tmp_path / "unmarked") as workspace:
        select_for_review(workspace, budget=10)
        taken = {d.chunk_id for d in stored.draws(workspace.db).values() if d.stratum == stored.TAKE_ALL}
    assert taken  # the estimate calls some pairs of the real queries likely relevant
    with pairs_to_review(tmp_path / "marked") as workspace:  # the same corpus, those chunks marked as furniture
        with workspace.transaction() as db:
            corpus_store.mark_boilerplate(db, [(chunk_id, NAVIGATION) for chunk_id in taken])
        summary = select_for_review(workspace, budget=10)
        considered = list(stored.draws(workspace.db).values())
    assert not any(d.chunk_id in taken for d in considered if d.stratum == stored.TAKE_ALL)
    on_marked = [d for d in considered if d.chunk_id in taken]
    assert on_marked and summary.furniture_pairs == len(on_marked)
    smallest = min(d.probability for d in considered)  # the even share, what every pair has at least
    assert all(d.probability == pytest.approx(smallest) for d in on_marked)
