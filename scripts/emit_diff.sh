#!/usr/bin/env bash
# Shows what a change to the emitter does to emitted code: emits every example with two kiln
# binaries (or two commits, each built in a temporary worktree) and diffs the results.
#
#   scripts/emit_diff.sh OLD NEW [OUTDIR [GRAPH.json...]]
#
# OLD and NEW are kiln binaries or git commits (built with cmake + ninja, ccache when present,
# in a worktree under OUTDIR). For every examples/*.json (specs and μGraphs; plus any GRAPH given,
# e.g. tests/data/cost_fit/*/*.mugraph.json) and both targets it writes
# OUTDIR/{old,new}/<target>/<file>.cu with the same file name (the header comment names it), then
# OUTDIR/emit.diff (diff -r) and prints every changed line once with the number of files it
# changed in, the file's name replaced by FILE and the graph's by NAME, so a change that should
# touch only some lines shows whether it did. Exit status: 0 identical, 1 different, 2 usage or
# build error.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 2 ] || { sed -n '2,14p' "$0" >&2; exit 2; }
OUT=${3:-emit_diff}
EXTRA=("${@:4}")
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

# A kiln binary for OLD/NEW: the file itself, or the commit built in a worktree.
binary() {  # binary REF TAG
  if [ -f "$1" ] && [ -x "$1" ]; then
    (cd "$(dirname "$1")" && echo "$(pwd)/$(basename "$1")")
    return
  fi
  local commit wt
  commit=$(git -C "$ROOT" rev-parse --verify "$1^{commit}" 2>/dev/null) ||
    { echo "emit_diff: $1 is neither a kiln binary nor a commit" >&2; exit 2; }
  wt="$OUT/worktree_$2"
  [ -d "$wt" ] || git -C "$ROOT" worktree add --detach "$wt" "$commit" >&2
  git -C "$wt" checkout -q --detach "$commit"
  local launcher=""
  command -v ccache >/dev/null && launcher="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
  cmake -S "$wt" -B "$wt/build" -G Ninja $launcher >&2
  cmake --build "$wt/build" --target kiln -j "${JOBS:-2}" >&2
  echo "$wt/build/kiln"
}
OLD_BIN=$(binary "$1" old)
NEW_BIN=$(binary "$2" new)

emit_all() {  # emit_all KILN DIR
  local f rel
  for target in sm_90a sm_80; do
    mkdir -p "$2/$target"
    for f in "$ROOT"/examples/*.json "${EXTRA[@]}"; do
      rel=$(realpath --relative-to="$ROOT" "$f")
      "$1" emit "$f" --target "$target" -o "$2/$target/$(echo "${rel%.json}" | tr / _).cu" \
        2>/dev/null || echo "emit_diff: $1 failed on $f ($target)" >&2
    done
  done
}
rm -rf "$OUT/old" "$OUT/new"
emit_all "$OLD_BIN" "$OUT/old"
emit_all "$NEW_BIN" "$OUT/new"

status=0
(cd "$OUT" && diff -r old new >emit.diff) || status=1
files=$(cd "$OUT" && find old -name '*.cu' | wc -l)
changed=$(grep -c '^diff ' "$OUT/emit.diff" || true)
echo "emit_diff: $files files per binary ($OLD_BIN vs $NEW_BIN), $changed differ; $OUT/emit.diff"
[ "$status" = 0 ] && exit 0
# Every changed line once, with its count of files, file and graph names as FILE and NAME.
(cd "$OUT" && find old -name '*.cu' | sort | while read -r a; do
  b="new/${a#old/}"
  name=$(sed -n 's/.*size_t kiln_\([A-Za-z0-9_]*\)_workspace_bytes(void);.*/\1/p' "$a" | head -1)
  stem=$(basename "$a" .cu | sed 's/\./\\./g')
  diff "$a" "$b" | grep '^[<>]' | sed "s/$stem/FILE/g; s/$name/NAME/g" | sort -u || true
done) | sort | uniq -c | sort -k1,1nr -k2
exit 1
