#!/usr/bin/env bash
# Prints the Kiln runtime as one text, the way the emitter inlines it into a standalone .cu: each
# header named by runtime/kiln_runtime.cuh, in that order, then the umbrella itself. Sibling
# includes inside the headers sit behind the siblings' include guards, so the text compiles
# without runtime/ on the include path. Usage: scripts/runtime_amalgamate.sh > kiln_runtime_all.cuh
set -euo pipefail
dir="$(cd "$(dirname "$0")/../runtime" && pwd)"
for f in $(sed -n 's/^#include "\([a-z0-9_]*\.cuh\)"$/\1/p' "$dir/kiln_runtime.cuh"); do
  echo "// ==== runtime/$f ===="
  cat "$dir/$f"
done
echo "// ==== runtime/kiln_runtime.cuh ===="
cat "$dir/kiln_runtime.cuh"
