#!/usr/bin/env bash
# Builds llama.cpp's Vulkan backend (the reference source, build 11434, that
# ../shared/tools/build-llama-cpp.sh fetches) as static `llama-bench` and `llama-batched-bench`
# to carry to the GPU machine (issue #19's side-by-side: scripts/bench-gpu.sh LLAMA_BIN=...).
# Debian 12's glslc (2023.2) lacks GL_KHR_cooperative_matrix and GL_NV_cooperative_matrix2,
# without which llama.cpp's prefill on an NVIDIA GPU would run its plain shaders; so glslc,
# its libraries and the Vulkan headers come from Debian 13 (trixie) packages, unpacked into a
# private folder (glslc runs through that folder's own loader). About 40 minutes on 2 cores.
#   usage: scripts/build-llama-vulkan.sh OUT_DIR   -> OUT_DIR/{llama-bench,llama-batched-bench}.xz
set -euo pipefail
OUT=$(realpath -m "$1")
SRC=$(dirname "$(../shared/tools/build-llama-cpp.sh)")/..   # .../src/llama.cpp (bin is build/bin)
SRC=$(realpath "$SRC")
W=${TMPDIR:-/tmp}/llama-vulkan
mkdir -p "$W/lists/partial" "$W/cache/archives/partial" "$W/debs" "$W/root" "$OUT"
cat > "$W/sources.list" <<'LIST'
deb http://deb.debian.org/debian trixie main
LIST
A=(-o "Dir::Etc::SourceList=$W/sources.list" -o Dir::Etc::SourceParts=/dev/null
   -o "Dir::State::Lists=$W/lists" -o "Dir::Cache=$W/cache")
apt-get "${A[@]}" update >/dev/null
(cd "$W/debs" && apt-get "${A[@]}" download glslc libshaderc1 libstdc++6 libgcc-s1 libc6 \
  libvulkan-dev libvulkan1 spirv-headers)
for f in "$W"/debs/*.deb; do dpkg -x "$f" "$W/root"; done
cat > "$W/glslc" <<WRAP
#!/bin/sh
R=$W/root
exec \$R/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 --library-path \$R/usr/lib/x86_64-linux-gnu \$R/usr/bin/glslc "\$@"
WRAP
chmod +x "$W/glslc"
"$W/glslc" --version | head -1
command -v cmake >/dev/null || python3 -m pip install cmake ninja >&2
# link against this system's loader (trixie's may need a newer glibc than the linker's);
# SPIRV-Headers' CMake config comes from the unpacked packages (CMAKE_PREFIX_PATH)
VK_LIB=$(ls /usr/lib/x86_64-linux-gnu/libvulkan.so.1 2>/dev/null || echo "$W/root/usr/lib/x86_64-linux-gnu/libvulkan.so.1")
cmake -S "$SRC" -B "$W/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_VULKAN=ON \
  -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DVulkan_INCLUDE_DIR="$W/root/usr/include" -DVulkan_GLSLC_EXECUTABLE="$W/glslc" \
  -DVulkan_LIBRARY="$VK_LIB" -DCMAKE_PREFIX_PATH="$W/root/usr" \
  | grep -Ei "cooperative|integer_dot|Vulkan found"
ninja -C "$W/build" llama-bench llama-batched-bench >/dev/null
for b in llama-bench llama-batched-bench; do
  strip -o "$W/$b" "$W/build/bin/$b"
  xz -9e -T2 -c "$W/$b" > "$OUT/$b.xz"
done
ls -la "$OUT"
