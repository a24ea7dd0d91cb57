#!/usr/bin/env bash
# Pins the code Kiln emits for every example and stored winner: emits each examples/*.json and
# tests/regression/*.json (specs and μGraphs) for
# both targets with KILN and compares the files' SHA-256 with tests/data/emitted.sha256. CTest runs
# it (`emitted_code_pinned`), so a change meant to leave emitted code alone (a refactor) is checked
# on every run; a change that alters it on purpose rewrites the list with --update, and the list's
# diff in the commit shows which files changed (scripts/emit_diff.sh shows how).
#
#   scripts/emit_hashes.sh KILN [--update]
# Exit status: 0 same (or updated), 1 different, 2 usage or emit error.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { sed -n '2,10p' "$0" >&2; exit 2; }
KILN=$1
UPDATE=${2:-}
LIST="$ROOT/tests/data/emitted.sha256"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
KILN=$(cd "$(dirname "$KILN")" && pwd)/$(basename "$KILN")
# From the repository root with relative paths: the files name their source, which must not
# depend on where the checkout is.
cd "$ROOT"
for target in sm_90a sm_80; do
  mkdir -p "$TMP/$target"
  # The examples, and the stored winners under regression test (tests/regression: the shipped
  # μGraphs of the suite and their specs; their names are prefixed, they repeat examples' names).
  for f in examples/*.json tests/regression/*.json; do
    case $f in */manifest.json) continue ;; esac
    name=$(basename "$f" .json)
    case $f in tests/regression/*) name="regression_$name" ;; esac
    if ! "$KILN" emit "$f" --target "$target" -o "$TMP/$target/$name.cu" >/dev/null 2>"$TMP/err"; then
      echo "emit_hashes: kiln emit failed on $f ($target):" >&2
      cat "$TMP/err" >&2
      exit 2
    fi
  done
done
(cd "$TMP" && find . -name '*.cu' | sort | xargs sha256sum) > "$TMP/now.sha256"
if [ "$UPDATE" = --update ]; then
  cp "$TMP/now.sha256" "$LIST"
  echo "emit_hashes: wrote $(wc -l < "$LIST") hashes to $LIST"
  exit 0
fi
if [ ! -f "$LIST" ]; then
  echo "emit_hashes: $LIST is missing; create it with --update" >&2
  exit 2
fi
if diff -u "$LIST" "$TMP/now.sha256" > "$TMP/diff"; then
  echo "emit_hashes: $(wc -l < "$LIST") emitted files as pinned"
  exit 0
fi
echo "emit_hashes: emitted code differs from tests/data/emitted.sha256:" >&2
grep '^[-+][0-9a-f]' "$TMP/diff" | sed 's/^/  /' >&2
echo "If the change is meant to alter emitted code, review it (scripts/emit_diff.sh OLD NEW)" \
  "and rerun: scripts/emit_hashes.sh $KILN --update" >&2
exit 1
