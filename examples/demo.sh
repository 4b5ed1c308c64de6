#!/usr/bin/env bash
# What `make demo` runs: chunk the project's own docs into a workspace, synthesize questions from them and propose
# candidates for a few real-looking queries, with the embedded local model as writer and judge; score and compare
# the bundled example runs (the course's five-query labelled set); and end with a release of the demo set and a
# BM25 baseline scored against it.
set -euo pipefail
cli=${1:-testset-builder}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
workspace=${DEMO_WORKSPACE:-$root/demo-workspace}
echo "== chunk: the project's docs into $workspace (markdown-aware, 600 characters, 60 overlap) =="
"$cli" chunk "$here/../docs" --workspace "$workspace" --chunker markdown --size 600 --overlap 60
echo "   (run it again: unchanged documents are skipped)"
"$cli" chunk "$here/../docs" --workspace "$workspace" --chunker markdown --size 600 --overlap 60
echo
echo "== synthesize: six questions from the docs, written by the local model; each labels its source chunk, and the relevance estimate finds other chunks that answer it =="
# exit code 3 means it finished with fewer questions than asked and said why: the demo goes on
"$cli" synthesize --workspace "$workspace" --config quickstart --questions 6 || [ $? -eq 3 ]
echo
echo "== propose: pool candidates (BM25, plus dense if installed) for five real-looking queries; the local model grades them (no key, no network) =="
"$cli" propose --queries "$here/queries.txt" --workspace "$workspace" --config quickstart --depth 5
echo "   (run it again: every pair is already judged, nothing is paid twice)"
"$cli" propose --queries "$here/queries.txt" --workspace "$workspace" --config quickstart --depth 5
echo
echo "== estimate and select: P(relevant) for every pooled pair from dense, BM25 and the judge (no LLM call), then a draw of pairs for review with known probabilities =="
"$cli" estimate --workspace "$workspace"
"$cli" select --workspace "$workspace" --budget 5
echo "   (what a reviewer would look at first)"
"$cli" queue --workspace "$workspace" --limit 5
echo
echo "== score: one run against the example qrels (the course's five-query labelled set) =="
"$cli" score --qrels "$here/qrels.tsv" --run "$here/bm25.trec" --metrics recall@5,recall@10,precision@5,precision@10,mrr,ndcg@5,ndcg@10,hit_rate@5,map
echo
echo "== compare: dense vs bm25 (paired tests, Holm-corrected) =="
"$cli" compare --qrels "$here/qrels.tsv" "$here/bm25.trec" "$here/dense.trec" --metrics ndcg@10,recall@5,mrr
echo
echo "== release: the synthetic labels (unverified LLM proposals stay out) as the next minor version, then a BM25 baseline scored against it =="
"$cli" release --workspace "$workspace" --bump minor --name "testset-builder docs" --notes "make demo"
"$cli" baseline --release "$workspace@latest" --out "$workspace/bm25-baseline.trec"
"$cli" score --release "$workspace@latest" --run "$workspace/bm25-baseline.trec" --metrics recall@5,mrr,ndcg@10
echo
echo "== review: the queue's proposals are waiting for a human; to review them in a browser, run =="
echo "   $cli serve --workspace $workspace      (or, in the terminal: $cli review --reviewer YOUR-NAME --workspace $workspace)"
