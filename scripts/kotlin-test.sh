#!/usr/bin/env bash
# The Kotlin bindings from a clean checkout: installs a JDK and JNA (Debian) and a current
# Kotlin compiler (npm's `kotlin-compiler`; Debian's is too old for the generated code), builds
# libcera_ffi, generates the Kotlin and Swift sources with the crate's own uniffi-bindgen,
# compiles the Kotlin into a jar with the Flow wrappers, and runs tests/kotlin/bindings.kts
# with `kotlinc -script` against it. Swift is generated only: this machine has no Swift
# toolchain, and the script says so rather than pretending.
#
# Usage: scripts/kotlin-test.sh [MODEL [TOOL_MODEL]] (defaults: the SmolLM2 and Qwen2.5
# catalog models). Writes the Kotlin run's greedy tokens to target/parity/kotlin.txt for
# scripts/parity.sh. `--install-only` installs the JDK, JNA and the compiler and stops.
# CERA_PROFILE (default release) names the cargo profile whose target folder holds the library
# and the binaries; CERA_BUILT=1 says they are built already (scripts/test.sh built them).
set -euo pipefail
cd "$(dirname "$0")/.."
INSTALL_ONLY=""
[ "${1:-}" = --install-only ] && { INSTALL_ONLY=1; shift; }
PROFILE=${CERA_PROFILE:-release}
BIN=target/$PROFILE
LIB=${CERA_FFI_LIB:-$BIN/libcera_ffi.so}
MODEL=${1:-smollm2-135m-instruct-q4_1}
TOOL_MODEL=${2:-qwen2.5-coder-0.5b-instruct-q4_k_m}
PROMPT="Once upon a time"
N=48
KOTLIN_VERSION=2.4.20

need=()
command -v javac >/dev/null || need+=(default-jdk-headless)
[ -f /usr/share/java/jna.jar ] || need+=(libjna-java)
if ((${#need[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "${need[@]}"
fi
kroot=target/kotlin-compiler
kotlinc=$kroot/node_modules/kotlin-compiler/bin/kotlinc
if ! "$kotlinc" -version 2>&1 | grep -q "$KOTLIN_VERSION"; then
  npm install --silent --no-audit --no-fund --prefix "$kroot" "kotlin-compiler@$KOTLIN_VERSION"
fi
# the coroutines library the generated `suspend` functions and our Flow wrappers need ships
# with the compiler
coroutines=$kroot/node_modules/kotlin-compiler/lib/kotlinx-coroutines-core-jvm.jar
[ -f "$coroutines" ] || { echo "error: $coroutines missing from the Kotlin compiler" >&2; exit 1; }
[ -n "$INSTALL_ONLY" ] && exit 0

[ -n "${CERA_BUILT:-}" ] || cargo build --profile "$PROFILE" --locked -p cera-ffi -p cera-cli
out=target/bindings
rm -rf "$out" && mkdir -p "$out/kotlin" "$out/swift" target/parity
./$BIN/uniffi-bindgen generate --library "$LIB" \
  --language kotlin --out-dir "$out/kotlin" --no-format
./$BIN/uniffi-bindgen generate --library "$LIB" \
  --language swift --out-dir "$out/swift" --no-format
cp crates/cera-ffi/swift/CeraAsync.swift "$out/swift/"
ls "$out/swift"
if command -v swiftc >/dev/null; then
  (cd "$out/swift" && swiftc -parse-as-library -emit-module -module-name Cera \
    -Xcc -fmodule-map-file=CeraFFI.modulemap Cera.swift CeraAsync.swift -o /dev/null)
  echo "swift: bindings compiled"
else
  echo "swift: no Swift toolchain on this machine: bindings generated in $out/swift, not compiled"
fi

cp=/usr/share/java/jna.jar:$coroutines
echo "-- kotlinc: bindings + Flow wrappers -> $out/cera-kotlin.jar"
"$kotlinc" -nowarn -cp "$cp" -d "$out/cera-kotlin.jar" \
  "$out/kotlin/dev/cera/cera_ffi.kt" crates/cera-ffi/kotlin/dev/cera/Flows.kt
./$BIN/cera run -m "$MODEL" --raw --temp 0 -n "$N" -t 2 -p "$PROMPT" > target/parity/cli.txt
# the GPU backend's greedy text (Mesa's lavapipe where there is no hardware GPU; scripts/test.sh
# installs it), for the bindings' `device = "gpu"`
./$BIN/cera run -m "$MODEL" --raw --temp 0 -n 16 -t 2 --device gpu -p "$PROMPT" > target/parity/cli-gpu.txt
# an image for the vision checks: a random mmproj as wide as SmolLM2 with both halves
# (scripts/test.sh makes it for the server tests too) and llama.cpp's test image
MMPROJ=${CERA_MMPROJ:-target/pytest-mmproj.gguf}
[ -f "$MMPROJ" ] || cargo run -q --profile "$PROFILE" --locked -p cera --example make_mmproj -- "$MMPROJ" 576 f16 tiny+audio >/dev/null
DATA=${CERA_TEST_DATA:-$(cargo run -q --profile "$PROFILE" --locked -p cera --example fetch_test_data)}
IMAGE=$DATA/tools/mtmd/test-1.jpeg
./$BIN/cera run -m "$MODEL" --mmproj "$MMPROJ" --image "$IMAGE" --raw --temp 0 -n 12 -t 2 \
  -p "<__media__>Describe the image." > target/parity/cli-image.txt
# and a clip for the audio checks: 0.5 s of a 16 kHz tone, 16-bit WAV
WAV=target/parity/tone.wav
python3 -c "
import math, struct, sys, wave
w = wave.open(sys.argv[1], 'wb'); w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000)
w.writeframes(b''.join(struct.pack('<h', int(8000 * math.sin(2 * math.pi * 523 * i / 16000))) for i in range(8000)))
" "$WAV"
./$BIN/cera run -m "$MODEL" --mmproj "$MMPROJ" --audio "$WAV" --raw --temp 0 -n 12 -t 2 \
  -p "<__media__>Transcribe." > target/parity/cli-audio.txt
# speech: whisper.cpp's jfk.wav through the catalog's Whisper tiny.en, text and SRT
SPEECH=crates/cera/tests/fixtures/whisper/jfk.wav
./$BIN/cera transcribe -m whisper-tiny.en -t 2 "$SPEECH" > target/parity/cli-speech.txt
./$BIN/cera transcribe -m whisper-tiny.en -t 2 -o srt "$SPEECH" > target/parity/cli-speech.srt
echo "-- kotlinc -script tests/kotlin/bindings.kts"
LD_LIBRARY_PATH="$(cd "$(dirname "$LIB")" && pwd)" "$kotlinc" -cp "$cp:$out/cera-kotlin.jar" \
  -script tests/kotlin/bindings.kts "$MODEL" "$TOOL_MODEL" "$PROMPT" "$N" target/parity/cli.txt target/parity/kotlin.txt target/parity/cli-gpu.txt \
  "$MMPROJ" "$IMAGE" target/parity/cli-image.txt "$WAV" target/parity/cli-audio.txt \
  "$SPEECH" target/parity/cli-speech.txt target/parity/cli-speech.srt
