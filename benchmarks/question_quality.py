"""How many questions the embedded model writes are usable, and how well the question checks sort them.

Three corpora of different kinds: SciFact abstracts (scientific prose), a Sphinx site built here from the
docstrings of a dozen standard-library modules (HTML from a static-site generator, like a library's reference), and
the Python language reference's help topics as shipped with Python (``pydoc_data.topics``: long technical prose in
plain text). The question checks were written while reading the first two corpora's candidates; the third was not
read before its figures were taken, so its precision and recall are held out. From each, the same sampled chunks
(boilerplate excluded, as synthesize samples them) are asked for questions three ways with the embedded Gemma 3 270M:

- ``one``: the natural-question prompt, one sample per chunk (``synthesize.candidates: 1``);
- ``best-of-3``: up to three tries per chunk, with the seeds synthesize derives; the first that passes the question
  checks is kept (what synthesize does with ``candidates: 3``);
- ``span-first``: an answer sentence is taken from the chunk first, and the model is asked for the question it
  answers (``benchmarks/data/prompts/completion-span.md``).

Every candidate goes through :func:`testset_builder.questions.validation_problem` (the checks synthesize
applies; none reads a retriever). Grades come from ``benchmarks/data/question_grades.json``: a hand grade per
question text, by the rubric there (usable: the chunk answers it, a person would ask it, nothing dangles). Ungraded
candidates are listed (``--ungraded``) so they can be graded and the figures recomputed; a figure counts graded
questions only and says how many there were.

Reported per corpus and variant: questions kept after the checks, the share usable before and after them, and the
checks' precision and recall on bad questions. Also how well the embedded model itself tells a usable question from
a bad one by reading its chunk (ROC AUC against the hand grades): P(Yes) from ``benchmarks/data/prompts/answerable.md``,
and P(grade 2) from the judge's few-shot prompt; an AUC near 0.5 is chance. Results go to
``benchmarks/results/question_quality.json``.

Every answer is cached in the benchmark's workspaces (``benchmarks/.cache/question-quality-*``), so a rerun, even
after a kill, asks the model nothing twice.

    python benchmarks/question_quality.py [--chunks 20] [--ungraded]

The hand grades were made on these very candidates, and the rules were written while reading them: the checks'
precision and recall here are on the data they were tuned on, an upper bound for another corpus.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCIFACT = ROOT.parent / "shared" / "data" / "scifact"
CACHE = ROOT / "benchmarks" / ".cache"
GRADES = ROOT / "benchmarks" / "data" / "question_grades.json"
RESULTS = ROOT / "benchmarks" / "results" / "question_quality.json"
MODULES = ("textwrap", "pprint", "getpass", "timeit", "shlex", "fnmatch", "glob", "heapq", "bisect", "shutil",
           "tempfile", "string")  # fmt: skip
CANDIDATES = 3

from sklearn.metrics import roc_auc_score  # noqa: E402

from testset_builder import api  # noqa: E402
from testset_builder.corpus.sampling import SourceChunk, eligible_chunks, slot_seed, stratified_sample  # noqa: E402
from testset_builder.labels.judge import Judge, JudgePair  # noqa: E402
from testset_builder.llm.roles import open_roles  # noqa: E402
from testset_builder.prompts import PromptLibrary, clip  # noqa: E402
from testset_builder.questions import clean, validation_problem  # noqa: E402
from testset_builder.store import corpus as corpus_store  # noqa: E402
from testset_builder.store import rows  # noqa: E402


def sphinx_site(out: Path) -> Path:
    """A Sphinx HTML site of the modules' docstrings (alabaster theme, sidebars and all)."""
    source = out / "source"
    source.mkdir(parents=True, exist_ok=True)
    (source / "conf.py").write_text(
        "project = 'stdlib'\nextensions = ['sphinx.ext.autodoc']\nhtml_theme = 'alabaster'\n", encoding="utf-8"
    )
    toc = "\n".join(f"   {m}" for m in MODULES)
    (source / "index.rst").write_text(f"Library\n=======\n\n.. toctree::\n\n{toc}\n", encoding="utf-8")
    for module in MODULES:
        title = f"``{module}``"
        page = f"{title}\n{'=' * len(title)}\n\n.. automodule:: {module}\n   :members:\n"
        (source / f"{module}.rst").write_text(page, encoding="utf-8")
    html = out / "html"
    subprocess.run(
        [sys.executable, "-m", "sphinx", "-q", "-b", "html", str(source), str(html)], check=True, capture_output=True
    )
    return html


def help_topics(out: Path) -> Path:
    """The language reference's help topics shipped with Python, one plain-text file a topic."""
    from pydoc_data.topics import topics

    folder = out / "topics"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in sorted(topics.items()):
        (folder / f"{name}.txt").write_text(text, encoding="utf-8")
    return folder


def scifact_subset(out: Path, count: int = 60, seed: int = 0) -> Path:
    lines = (SCIFACT / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    picked = random.Random(seed).sample(lines, count)
    path = out / "scifact.jsonl"
    path.write_text("\n".join(picked) + "\n", encoding="utf-8")
    return path


def span_of(text: str, seed: int) -> str:
    """An answer sentence from the chunk: one of its informative sentences (8 to 40 words), chosen by the seed."""
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", " ".join(text.split())) if s.strip()]
    good = [s for s in sentences if 8 <= len(s.split()) <= 40] or sentences
    return random.Random(seed).choice(good)


async def generate(config, workspace, chunks: list[SourceChunk]) -> list[dict]:
    prompts = PromptLibrary()
    # by path: the prompts of this checkout, whatever install the package resolves to
    natural = prompts.load(str(ROOT / "prompts" / "synthesize" / "completion-natural.md"))
    span_prompt = prompts.load(str(ROOT / "benchmarks" / "data" / "prompts" / "completion-span.md"))
    requests, meta = [], []
    for chunk in chunks:
        passage = " ".join(clip(chunk.text, 3000).split())
        first = slot_seed(0, chunk.chunk_id, "natural", "0")
        for n in range(CANDIDATES):
            seed = slot_seed(first, "candidate", str(n)) if n else first  # as a synthesize slot's tries
            options = dict(temperature=0.7, seed=seed, max_tokens=48, stop=("\n",))
            requests.append(natural.request("gemma-3-270m", passage=passage, **options))
            meta.append({"chunk_id": chunk.chunk_id, "variant": "sample", "n": n})
        seed = slot_seed(0, chunk.chunk_id, "span")
        answer = span_of(chunk.text, seed)
        requests.append(
            span_prompt.request(
                "gemma-3-270m", passage=passage, answer=answer, temperature=0.7, seed=seed, max_tokens=48, stop=("\n",)
            )
        )
        meta.append({"chunk_id": chunk.chunk_id, "variant": "span-first", "n": 0, "answer": answer})
    texts = {c.chunk_id: c.text for c in chunks}
    roles = open_roles(config, workspace, "benchmark")
    async with roles:
        answers = await roles.generator.client.complete_many(requests)
        out = []
        for m, answer in zip(meta, answers):
            question = clean(answer.text) if not isinstance(answer, Exception) else ""
            problem = validation_problem(question, texts[m["chunk_id"]], "natural")
            out.append({**m, "question": question, "problem": problem})
        await model_reads(roles, config, prompts, [q for q in out if q["question"]], texts)
    return out


def p_yes(completion) -> float:
    """P(Yes) against P(No) at the first position that offers either."""
    for position in completion.logprobs:
        top = position.top or {position.token: position.logprob}
        yes = sum(math.exp(v) for k, v in top.items() if k.strip().lower() == "yes")
        no = sum(math.exp(v) for k, v in top.items() if k.strip().lower() == "no")
        if yes + no > 0:
            return yes / (yes + no)
    return 0.5


async def model_reads(roles, config, prompts, questions: list[dict], texts: dict[str, str]) -> None:
    """Each question's P(Yes) by the answerability prompt and P(grade 2) by the judge, read by the embedded model
    against its chunk (stored on the question)."""
    prompt = prompts.load(str(ROOT / "benchmarks" / "data" / "prompts" / "answerable.md"))
    requests = [
        prompt.request(
            "gemma-3-270m", passage=" ".join(clip(texts[q["chunk_id"]], 3000).split()), question=q["question"],
            temperature=0.0, max_tokens=2, top_logprobs=5,
        )
        for q in questions
    ]  # fmt: skip
    answers = await roles.generator.client.complete_many(requests)
    judge = Judge(roles.judge, config.judging)
    pairs = [JudgePair(key(q["question"]), q["question"], q["chunk_id"], texts[q["chunk_id"]]) for q in questions]
    judged = await judge.judge_many(pairs)
    for q, answer, judgment in zip(questions, answers, judged):
        q["p_yes"] = None if isinstance(answer, Exception) else p_yes(answer)
        q["p_grade_2"] = None if isinstance(judgment, Exception) else (judgment.grade_probs or {}).get(2, 0.0)


def corpus_questions(name: str, source: Path, count: int) -> tuple[list[dict], dict[str, str]]:
    root = CACHE / f"question-quality-{name}"
    config = api.load_config("quickstart", workspace=str(root))
    api.chunk(config, [source])
    with api.open_workspace(config) as workspace:
        live = [SourceChunk(*row) for row in rows.live_chunk_rows(workspace.db)]
        groups = {c: g for c, (g, _) in rows.live_duplicate_groups(workspace.db).items()}
        eligible, _ = eligible_chunks(live, groups, 200, corpus_store.boilerplate_chunks(workspace.db))
        picked = stratified_sample(eligible, count, 0)
        questions = asyncio.run(generate(config, workspace, picked))
    return questions, {c.chunk_id: c.text for c in picked}


def key(question: str) -> str:
    return hashlib.sha256(" ".join(question.lower().split()).encode()).hexdigest()[:12]


def figures(questions: list[dict], grades: dict) -> dict:
    """Per variant: share usable before and after the checks (graded questions only), and the checks' precision
    and recall on bad questions."""
    out = {}
    by_chunk: dict[str, list[dict]] = {}
    for q in questions:
        by_chunk.setdefault(q["chunk_id"], []).append(q)
    variants = {
        "one": [next(q for q in qs if q["variant"] == "sample" and q["n"] == 0) for qs in by_chunk.values()],
        "best-of-3": [
            next((q for q in qs if q["variant"] == "sample" and not q["problem"]), None) for qs in by_chunk.values()
        ],
        "span-first": [next(q for q in qs if q["variant"] == "span-first") for qs in by_chunk.values()],
    }
    for name, chosen in variants.items():
        chosen = [q for q in chosen if q is not None]
        graded = [q for q in chosen if key(q["question"]) in grades]
        kept = [q for q in graded if not q["problem"]]
        usable = [q for q in graded if grades[key(q["question"])]["usable"]]
        out[name] = {
            "chunks": len(by_chunk),
            "questions": len(chosen),
            "graded": len(graded),
            "usable_before_checks": len(usable),
            "kept_by_checks": len(kept),
            "usable_after_checks": sum(grades[key(q["question"])]["usable"] for q in kept),
        }
    every = [q for q in questions if key(q["question"]) in grades]
    bad = [q for q in every if not grades[key(q["question"])]["usable"]]
    flagged = [q for q in every if q["problem"]]
    caught = [q for q in bad if q["problem"]]
    out["checks_on_every_candidate"] = {
        "graded": len(every),
        "bad": len(bad),
        "flagged": len(flagged),
        "bad_flagged": len(caught),
        "precision": round(len(caught) / len(flagged), 3) if flagged else None,
        "recall": round(len(caught) / len(bad), 3) if bad else None,
        "by_rule": {r: sum(q["problem"] == r for q in flagged) for r in sorted({q["problem"] for q in flagged})},
    }
    read = [q for q in every if q.get("p_yes") is not None and q.get("p_grade_2") is not None]
    usable = [grades[key(q["question"])]["usable"] for q in read]
    if 0 < sum(usable) < len(usable):
        out["model_reads_chunk_auc"] = {
            "questions": len(read),
            "answerable_p_yes": round(roc_auc_score(usable, [q["p_yes"] for q in read]), 3),
            "judge_p_grade_2": round(roc_auc_score(usable, [q["p_grade_2"] for q in read]), 3),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--ungraded", action="store_true", help="print the candidates without a grade, with chunks")
    args = parser.parse_args()
    grades = json.loads(GRADES.read_text(encoding="utf-8"))["grades"] if GRADES.exists() else {}
    with tempfile.TemporaryDirectory() as tmp:
        corpora = {
            "sphinx-stdlib": sphinx_site(Path(tmp) / "site"),
            "scifact": scifact_subset(Path(tmp)),
            "python-help-topics": help_topics(Path(tmp)),
        }
        results, ungraded = {}, []
        for name, source in corpora.items():
            questions, texts = corpus_questions(name, source, args.chunks)
            results[name] = figures(questions, grades)
            for q in questions:
                if key(q["question"]) not in grades:
                    ungraded.append({"key": key(q["question"]), "corpus": name, **q, "chunk": texts[q["chunk_id"]]})
    if args.ungraded:
        for q in ungraded:
            print(json.dumps(q, ensure_ascii=False))
        return
    RESULTS.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
