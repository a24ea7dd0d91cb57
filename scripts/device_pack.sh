#!/usr/bin/env bash
# Packs build/kiln for a machine that has the CUDA toolkit but none of Kiln's build dependencies
# (the GPU machine): DIR/bin/kiln, the non-system shared libraries it links (z3, fmt, tbb, ...,
# found with ldd; the C/C++ runtime and loader are left to the target) in DIR/lib, and a wrapper
# DIR/kiln that sets LD_LIBRARY_PATH and runs bin/kiln. The device headers are embedded in the
# binary, so no source tree is needed. Prints the total size.
#
#   scripts/device_pack.sh DIR [KILN_BINARY]      (default binary: build/kiln)
# Then on the GPU machine: DIR/kiln optimize examples/lora.json -o OUT --profile 8
set -euo pipefail
if [ $# -lt 1 ]; then
  sed -n '2,10p' "$0"
  exit 2
fi
DIR=$1
BIN=${2:-$(cd "$(dirname "$0")/.." && pwd)/build/kiln}
[ -x "$BIN" ] || { echo "device_pack: no executable $BIN (build it first)" >&2; exit 1; }
rm -rf "$DIR/bin" "$DIR/lib" "$DIR/kiln"
mkdir -p "$DIR/bin" "$DIR/lib"
cp "$BIN" "$DIR/bin/kiln"
# Debug info is most of a RelWithDebInfo binary (80 of 84 MB); the device call carries 64 MiB.
strip --strip-debug "$DIR/bin/kiln" 2>/dev/null || true
# Every resolved dependency except the C/C++ runtime, which the target provides (and must match
# its kernel and loader).
ldd "$BIN" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libpthread.so*|libdl.so*|librt.so*) ;;
    *) cp -L "$lib" "$DIR/lib/" ;;
  esac
done
cat > "$DIR/kiln" <<'WRAP'
#!/bin/sh
# Runs the packed kiln with its own shared libraries.
here=$(cd "$(dirname "$0")" && pwd)
LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/bin/kiln" "$@"
WRAP
chmod +x "$DIR/kiln"
echo "device_pack: $DIR: bin/kiln + $(ls "$DIR/lib" | wc -l) libraries ($(ls "$DIR/lib" | tr '\n' ' '))"
echo "device_pack: total $(du -sh "$DIR" | cut -f1)"
