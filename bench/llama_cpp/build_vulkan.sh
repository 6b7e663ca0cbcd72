#!/bin/bash
# Builds llama.cpp's Vulkan backend for bench/llama_cpp/edge_vs_llama.sh, on this (GPU-less)
# host: llama-bench and llama-quantize, Release, statically linked against ggml, no tests,
# examples or server. The result is WORK/vulkan (the two binaries, stripped, and the libraries
# they need in WORK/vulkan/lib, the Vulkan loader excepted) and WORK/llama-vulkan.tar.xz, which
# bench/llama_cpp/gpu_call.sh unpacks as .device/llama/llama-vulkan.tar.xz.
#
#   bench/llama_cpp/build_vulkan.sh LLAMA_SRC WORK
#
# LLAMA_SRC is a llama.cpp source tree, or llama-cpp-python's sdist (a .tar.gz that vendors
# llama.cpp under vendor/llama.cpp; bench/RESULTS.md names the version measured).
#
# Why a glslc of its own: llama.cpp's configure tests its shader compiler for each cooperative-
# matrix path (GL_KHR_cooperative_matrix, GL_NV_cooperative_matrix2, GL_EXT_integer_dot_product,
# GL_EXT_bfloat16) and builds only the paths it accepts. Debian 12's glslc (shaderc 2023.2)
# rejects coopmat2, so a build with it would leave out the matrix path llama.cpp runs on NVIDIA
# and make a weaker peer. This script first builds shaderc's glslc, with the glslang,
# SPIRV-Tools and SPIRV-Headers revisions that shaderc's DEPS pins, and Vulkan headers newer
# than Debian's 1.3.239 (ggml-vulkan reads VK_NV_cooperative_matrix2's properties through
# vulkan.hpp). The C++ headers are generated from the registry's vk.xml by Vulkan-Hpp's
# generator, so they match the C headers by construction (vulkan.hpp asserts the version) and
# no large generated file has to come from a mirror. Sources, as git folders (a bare mirror
# will do; nothing is fetched from the network):
#   SHADERC_GIT  SHADERC_REV (default HEAD)
#   GLSLANG_GIT  SPIRV_TOOLS_GIT  SPIRV_HEADERS_GIT   (at the revisions of shaderc's DEPS)
#   VULKAN_HEADERS_GIT  VULKAN_HEADERS_REV (default HEAD): the C headers and vk.xml
#   VULKAN_HPP_GIT  VULKAN_HPP_REV (default HEAD)  TINYXML2_GIT (at the revision Vulkan-Hpp pins)
# Each stage is skipped when its output exists, so a build cut short resumes. JOBS (default:
# the core count). Debian packages needed: cmake, ninja-build, g++, python3, libvulkan-dev.
set -euo pipefail
usage="usage: build_vulkan.sh LLAMA_SRC WORK (see the header for the git folders it needs)"
src=${1:?$usage}
work=${2:?$usage}
jobs=${JOBS:-$(nproc)}
die() { echo "build_vulkan.sh: $*" >&2; exit 2; }
for var in SHADERC_GIT GLSLANG_GIT SPIRV_TOOLS_GIT SPIRV_HEADERS_GIT VULKAN_HEADERS_GIT \
  VULKAN_HPP_GIT TINYXML2_GIT; do
  [ -n "${!var:-}" ] || die "set $var to a git folder of that project ($usage)"
  git -C "${!var}" rev-parse --git-dir >/dev/null 2>&1 || die "$var=${!var} is not a git folder"
done
mkdir -p "$work"
work=$(cd "$work" && pwd)
start=$(date +%s)
say() { echo "== build_vulkan.sh $(($(date +%s) - start)) s: $*"; }

# checkout GIT REV DEST [PATH...]: the tree of GIT at REV (or those paths of it) in DEST, once.
checkout() {
  [ -f "$3/.done" ] && return
  rm -rf "$3" && mkdir -p "$3"
  git -C "$1" archive --format=tar "$2" "${@:4}" | tar -xf - -C "$3"
  echo "$2" >"$3/.done"
}
# present GIT REV PATH...: the files under PATHs whose contents GIT holds (a mirror may list a
# large file it does not hold; every file this script needs from such a tree is small).
present() {
  git -C "$1" ls-tree -r "$2" -- "${@:3}" | while read -r _ type object path; do
    [ "$type" = blob ] && git -C "$1" cat-file -e "$object" 2>/dev/null && echo "$path"
  done
}
# pinned NAME: the revision shaderc's DEPS gives for NAME_revision.
pinned() {
  sed -n "s/^ *'$1_revision': *'\([0-9a-f]*\)'.*/\1/p" "$work/src/shaderc/DEPS"
}

say "sources"
checkout "$SHADERC_GIT" "${SHADERC_REV:-HEAD}" "$work/src/shaderc"
tp=$work/src/shaderc/third_party
for dep in glslang:GLSLANG_GIT:glslang spirv_tools:SPIRV_TOOLS_GIT:spirv-tools \
  spirv_headers:SPIRV_HEADERS_GIT:spirv-headers; do
  IFS=: read -r name var folder <<<"$dep"
  rev=$(pinned "$name")
  [ -n "$rev" ] || die "shaderc's DEPS pins no ${name}_revision"
  git -C "${!var}" cat-file -e "$rev^{commit}" 2>/dev/null ||
    die "${!var} lacks $rev, the $name revision shaderc's DEPS pins"
  checkout "${!var}" "$rev" "$tp/$folder"
done
vk_rev=${VULKAN_HEADERS_REV:-HEAD}
mapfile -t vk_files < <(present "$VULKAN_HEADERS_GIT" "$vk_rev" include registry | grep -v '\.hpp$')
checkout "$VULKAN_HEADERS_GIT" "$vk_rev" "$work/src/vulkan-headers" "${vk_files[@]}"
hpp_rev=${VULKAN_HPP_REV:-HEAD}
mapfile -t hpp_files < <(present "$VULKAN_HPP_GIT" "$hpp_rev" generator)
checkout "$VULKAN_HPP_GIT" "$hpp_rev" "$work/src/vulkan-hpp" "${hpp_files[@]}"
xml_rev=$(git -C "$VULKAN_HPP_GIT" ls-tree "$hpp_rev" tinyxml2 | awk '{print $3}')
[ -n "$xml_rev" ] || die "Vulkan-Hpp at $hpp_rev pins no tinyxml2"
checkout "$TINYXML2_GIT" "$xml_rev" "$work/src/tinyxml2" tinyxml2.cpp tinyxml2.h

vk_include=$work/src/vulkan-headers/include
if [ ! -f "$vk_include/vulkan/vulkan_structs.hpp" ]; then
  say "vulkan.hpp from vk.xml"
  hpp=$work/src/vulkan-hpp
  g++ -std=c++20 -O1 -pthread -DBASE_PATH="\"$hpp\"" \
    -DVK_SPEC="\"$work/src/vulkan-headers/registry/vk.xml\"" -I"$work/src/tinyxml2" \
    "$hpp/generator/VulkanHppGenerator.cpp" "$hpp/generator/VkXMLParser.cpp" \
    "$hpp/generator/DependencyParser.cpp" "$work/src/tinyxml2/tinyxml2.cpp" -o "$hpp/generate"
  mkdir -p "$hpp/vulkan"
  (cd "$hpp" && ./generate >"$work/vulkan_hpp.log" 2>&1) ||
    { tail -5 "$work/vulkan_hpp.log"; die "Vulkan-Hpp's generator failed"; }
  cp "$hpp"/vulkan/*.hpp "$vk_include/vulkan/"
fi

glslc=$work/shaderc-build/glslc/glslc
if [ ! -x "$glslc" ]; then
  say "glslc"
  cmake -S "$work/src/shaderc" -B "$work/shaderc-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DSHADERC_SKIP_TESTS=ON -DSHADERC_SKIP_EXAMPLES=ON -DSHADERC_SKIP_COPYRIGHT_CHECK=ON \
    -DSPIRV_SKIP_TESTS=ON -DSPIRV_SKIP_EXECUTABLES=ON -DSKIP_GLSLANG_INSTALL=ON \
    -DENABLE_GLSLANG_BINARIES=OFF -DGLSLANG_TESTS=OFF -DSPIRV_WERROR=OFF >/dev/null
  ninja -C "$work/shaderc-build" -j "$jobs" glslc_exe
fi
"$glslc" --version | sed -n 1,2p  # (sed reads on: no SIGPIPE)

if [ -f "$src" ]; then  # the sdist: llama.cpp from its vendor folder
  if [ ! -f "$work/src/llama.cpp/CMakeLists.txt" ]; then
    top=$(tar -tzf "$src" | awk -F/ 'NR == 1 {print $1}')
    tar -xzf "$src" -C "$work/src" "$top/vendor/llama.cpp"
    rm -rf "$work/src/llama.cpp"
    mv "$work/src/$top/vendor/llama.cpp" "$work/src/llama.cpp"
    rm -rf "${work:?}/src/$top"
  fi
  src=$work/src/llama.cpp
fi
[ -f "$src/ggml/src/ggml-vulkan/CMakeLists.txt" ] ||
  die "$src is not a llama.cpp source tree with ggml-vulkan"

# ggml-vulkan asks for SPIRV-Headers' CMake package and then includes spirv.hpp from the
# include path (where a Vulkan SDK puts it): the pinned ones, installed, on both.
prefix=$work/prefix
if [ ! -d "$prefix/share/cmake/SPIRV-Headers" ]; then
  cmake -S "$tp/spirv-headers" -B "$work/spirv-headers-build" -DCMAKE_INSTALL_PREFIX="$prefix" \
    -DSPIRV_HEADERS_ENABLE_TESTS=OFF >/dev/null
  cmake --install "$work/spirv-headers-build" >/dev/null
fi

build=$work/llama-build
if [ ! -f "$build/build.ninja" ]; then
  say "llama.cpp configure"
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_CXX_FLAGS="-isystem $prefix/include" \
    -DGGML_VULKAN=ON -DVulkan_GLSLC_EXECUTABLE="$glslc" \
    -DVulkan_INCLUDE_DIR="$vk_include" \
    -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF >"$work/configure.log" 2>&1 ||
    {
      grep -A5 "CMake Error" "$work/configure.log"
      rm -f "$build/build.ninja"
      die "configure failed"
    }
  grep -iE "glslc|coopmat|cooperative|integer_dot|bfloat16" "$work/configure.log" || true
fi
say "llama.cpp build"
ninja -C "$build" -j "$jobs" llama-bench llama-quantize

# Which shader paths the configure's tests of glslc accepted ("GL_… supported by glslc").
grep -E "supported by glslc" "$work/configure.log" | sed 's/^-- //' |
  tee "$work/shader_paths.txt" ||
  echo "build_vulkan.sh: the configure log names no shader path glslc supports" >&2

out=$work/vulkan
rm -rf "$out" && mkdir -p "$out/lib"
cp "$build/bin/llama-bench" "$build/bin/llama-quantize" "$out/"
strip "$out/llama-bench" "$out/llama-quantize"
skip='libvulkan|libc\.so|libm\.so|libstdc\+\+|libgcc_s|ld-linux|libpthread|libdl\.|librt\.'
skip+='|linux-vdso'
for binary in "$out/llama-bench" "$out/llama-quantize"; do
  ldd "$binary" | awk '/=>/ && $3 ~ /^\// {print $3}'
done | sort -u | { grep -vE "$skip" || true; } | while read -r lib; do
  cp -Lu "$lib" "$out/lib/"
done
cp "$work/shader_paths.txt" "$out/"
(cd "$work" && tar -cf - vulkan | xz -T"$jobs" -6 >llama-vulkan.tar.xz)
say "done: $out, $work/llama-vulkan.tar.xz ($(du -h "$work/llama-vulkan.tar.xz" | cut -f1))"
