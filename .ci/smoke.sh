#!/usr/bin/env bash
# Smoke test of the wheel as a user gets it: built from this checkout, installed
# in a fresh venv outside it, used from another folder (no checkout on the path).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$repo/.venv/bin/python" -m pip wheel --quiet --no-deps --wheel-dir "$work/dist" "$repo"
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet "$work"/dist/stanflow-*.whl
cd "$work"

# `stanflow list` names every workflow of the checkout (`_*.py` are modules beside them).
listed="$("$work/venv/bin/stanflow" list | awk '{print $1}' | sort)"
expected="$(cd "$repo/workflows" && ls -- [!_]*.py | sed 's/\.py$//; s/_/-/g' | sort)"
if [ "$listed" != "$expected" ]; then
  echo "smoke: stanflow list printed"; echo "$listed"; echo "expected"; echo "$expected"
  exit 1
fi

for workflow in eight-schools custom-loss own-model; do
  "$work/venv/bin/stanflow" run "$workflow" --quick --out "$work/out/$workflow" > "$work/$workflow.log" 2>&1 \
    || { cat "$work/$workflow.log"; exit 1; }
  test -s "$work/out/$workflow/summary.json"
done
echo "smoke: wheel installed outside the checkout; list and quick runs passed"
