#!/usr/bin/env bash
# The demo `make demo` runs: score the bundled example (the course's five-query labelled set) and compare two runs.
set -euo pipefail
cli=${1:-testset-builder}
here=$(cd "$(dirname "$0")" && pwd)
echo "== score: one run against the example qrels =="
"$cli" score --qrels "$here/qrels.tsv" --run "$here/bm25.trec" --metrics recall@5,recall@10,precision@5,precision@10,mrr,ndcg@5,ndcg@10,hit_rate@5,map
echo
echo "== compare: dense vs bm25 (paired tests, Holm-corrected) =="
"$cli" compare --qrels "$here/qrels.tsv" "$here/bm25.trec" "$here/dense.trec" --metrics ndcg@10,recall@5,mrr
