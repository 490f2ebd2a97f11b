# Sourced by the bench/peer scripts: llama.cpp's source from PyPI and a CPU build of the tools
# they run, each step skipped when done. Defines peer, llama (the source), build, bin, models,
# results; `build_llama_cpp TARGET...` builds the targets not built yet.
#
#   1. the llama-cpp-python sdist (pinned below) vendors llama.cpp; `pip download --no-binary
#      :all:` into $QHX_CACHE/peer/dl, unpacked under $QHX_CACHE/peer/src.
#   2. CMake build of only the requested tools (GGML_NATIVE=ON, CPU only, -j2, niced) into
#      $QHX_CACHE/peer/build-<version>.
# Nothing is written into the repository.

# 0.3.36 vendors llama.cpp commit 0c1e570 (llama-bench: "build 1"), with Qwen3-VL: converter
# conversion/qwen3vl.py (text arch qwen3vl, mmproj projector qwen3vl_merger with DeepStack).
LLAMA_CPP_PYTHON_VERSION=0.3.36
peer="$QHX_CACHE/peer"
src="$peer/src/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION"
llama="$src/vendor/llama.cpp"
build="$peer/build-$LLAMA_CPP_PYTHON_VERSION"
# -march=native turns on llama.cpp's AMX matmul on a CPU with AMX, and at 0c1e570 that path
# segfaults in ggml_backend_amx_mul_mat on the first prompt (seen on a 2-core Sapphire Rapids VM).
# There the build names the CPU's ISA itself, all but AMX (its best path with AVX-512 VNNI).
isa=(-DGGML_NATIVE=ON)
if grep -qw amx_int8 /proc/cpuinfo; then
  build="$build-noamx"
  isa=(-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_F16C=ON -DGGML_FMA=ON -DGGML_BMI2=ON -DGGML_AVX=ON -DGGML_AVX2=ON
       -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON
       -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
fi
bin="$build/bin"
models="$peer/models"
results="$peer/results"
mkdir -p "$peer/dl" "$peer/src" "$models" "$results"

sdist="$peer/dl/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"
if [ ! -f "$sdist" ]; then
  echo "== pip download llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION (sdist)"
  "$QHX_PY" -m pip download --no-binary :all: --no-deps "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$peer/dl"
fi
if [ ! -f "$llama/CMakeLists.txt" ]; then
  echo "== unpack $sdist"
  tar -xzf "$sdist" -C "$peer/src"
fi
if ! grep -q '"Qwen3VLForConditionalGeneration"' "$llama"/conversion/*.py "$llama"/convert_hf_to_gguf.py 2>/dev/null; then
  echo "llama_cpp_env.sh: llama-cpp-python $LLAMA_CPP_PYTHON_VERSION's llama.cpp cannot convert Qwen3VLForConditionalGeneration" >&2
  exit 1
fi

build_llama_cpp() {
  local missing=()
  for t in "$@"; do [ -x "$bin/$t" ] || missing+=("$t"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "== build ${missing[*]} (-j2, nice)"
  cmake -S "$llama" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${isa[@]}" -DGGML_CUDA=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DBUILD_SHARED_LIBS=OFF >/dev/null
  nice -n 10 cmake --build "$build" -j"${LLAMA_CPP_JOBS:-2}" --target "${missing[@]}"
}

# The converter's Qwen vocab path imports sentencepiece (not in the project venv): it goes
# into the cache, not into the venv.
ensure_converter_deps() {
  if ! PYTHONPATH="$peer/pydeps" "$QHX_PY" -c 'import sentencepiece' 2>/dev/null; then
    echo "== pip install --target $peer/pydeps sentencepiece (for convert_hf_to_gguf.py)"
    "$QHX_PY" -m pip install --target "$peer/pydeps" --no-deps sentencepiece
  fi
}

# gguf_convert CHECKPOINT OUT ARGS...: the vendored converter with the vendored gguf-py.
gguf_convert() {
  local ckpt="$1" out="$2"; shift 2
  [ -f "$out" ] && return 0
  ensure_converter_deps
  echo "== convert_hf_to_gguf.py $ckpt $* -> $out"
  PYTHONPATH="$llama/gguf-py:$peer/pydeps" NO_LOCAL_GGUF=1 nice -n 10 "$QHX_PY" "$llama/convert_hf_to_gguf.py" "$ckpt" \
    --outfile "$out.part" "$@"
  mv "$out.part" "$out"
}

# The sdist's own Python bindings (ctypes over libllama) on a shared-library build of the same
# source, laid out as its wheel would be: $peer/pylib/llama_cpp with lib/ holding the .so files.
# Prints the folder to put on PYTHONPATH. (pip would build the same source a second time.)
llama_cpp_python() {
  local shared="$build-shared" py="$peer/pylib"
  if [ ! -f "$shared/bin/libllama.so" ]; then
    echo "== build libllama.so, libggml*.so (-j${LLAMA_CPP_JOBS:-2}, nice)" >&2
    cmake -S "$llama" -B "$shared" -G Ninja -DCMAKE_BUILD_TYPE=Release "${isa[@]}" -DGGML_CUDA=OFF \
      -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
      -DLLAMA_BUILD_TOOLS=OFF -DBUILD_SHARED_LIBS=ON >/dev/null
    nice -n 10 cmake --build "$shared" -j"${LLAMA_CPP_JOBS:-2}" --target llama >&2
  fi
  if [ ! -d "$py/llama_cpp/lib" ]; then
    rm -rf "$py" && mkdir -p "$py"
    cp -r "$src/llama_cpp" "$py/llama_cpp"
    mkdir -p "$py/llama_cpp/lib"
    for so in "$shared"/bin/lib*.so; do ln -s "$so" "$py/llama_cpp/lib/$(basename "$so")"; done
    # The one dependency of the bindings the project venv lacks (its prompt cache imports it).
    "$QHX_PY" -m pip install --quiet --target "$py" --no-deps diskcache==5.6.3 >&2
  fi
  echo "$py"
}
