#!/usr/bin/env bash
# Prints the index of design notes (`Note [Name]` blocks) as Markdown: one row per note,
# with the file that holds it. docs/architecture.md embeds this output between its
# NOTES-INDEX markers; `scripts/notes-index.sh --write` rewrites it there, and the CTest
# test `architecture_notes_index_is_current` fails when it is out of date.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

index() {
  echo "| note | file |"
  echo "|---|---|"
  # A note is defined where a comment line starts with its name, alone or followed by a
  # colon: "// Note [Chunk pool]", "// Note [Lane sums]: a sum in double ...".
  git ls-files -- common device allocator policy tracer runtime workloads integrations benchmarks include \
    | grep -E '\.(cpp|hpp|h|cu)$' \
    | xargs grep -HE '^[[:space:]]*//[[:space:]]*Note \[[^]]+\](:|[[:space:]]*$)' \
    | sed -E 's/^([^:]+):[[:space:]]*\/\/[[:space:]]*Note \[([^]]+)\].*/\2\t\1/' \
    | LC_ALL=C sort -f \
    | awk -F'\t' '{ printf "| %s | `%s` |\n", $1, $2 }'
}

if [ "${1:-}" = "--write" ]; then
  doc=docs/architecture.md
  tmp=$(mktemp)
  awk -v idx="$(index)" '
    /^<!-- NOTES-INDEX BEGIN -->$/ { print; print idx; skip = 1; next }
    /^<!-- NOTES-INDEX END -->$/ { skip = 0 }
    !skip { print }' "$doc" >"$tmp"
  mv "$tmp" "$doc"
elif [ "${1:-}" = "--check" ]; then
  expected=$(index)
  actual=$(awk '/^<!-- NOTES-INDEX BEGIN -->$/ { on = 1; next } /^<!-- NOTES-INDEX END -->$/ { on = 0 } on' docs/architecture.md)
  if [ "$expected" != "$actual" ]; then
    diff <(echo "$actual") <(echo "$expected") || true
    echo "docs/architecture.md: the notes index is out of date; run scripts/notes-index.sh --write" >&2
    exit 1
  fi
  echo "notes index: $(echo "$expected" | tail -n +3 | wc -l) notes, current"
else
  index
fi
