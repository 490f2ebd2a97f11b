// bench_kernels — the CPU backend's linear kernels on Qwen3-VL-2B's shapes,
// one matrix at a time, so a kernel's speed can be read without a model:
//
//   bench_kernels [--threads N] [--reps R] [--json]
//
// For each shape it prints ms per call, weight GB/s (decode, m = 1: the bound
// is memory bandwidth) and GOP/s (m > 1: the bound is compute), for the int8
// path (packed, the default for w8 bundles) and the f32-activation path.
#include "cli/cli.hpp"
#include <nlohmann/json.hpp>

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <new>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/int8_matmul.hpp"
#include "backends/cpu/kernel_set.hpp"
#include "backends/cpu/kv_cache_i8.hpp"
#include "backends/cpu/thread_pool.hpp"
#include "common/half.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// Allocations on 2 MiB pages, as the runtime's KV cache is.
template <class T>
struct HugeAlloc {
  using value_type = T;
  HugeAlloc() = default;
  template <class U>
  HugeAlloc(const HugeAlloc<U>&) {}
  T* allocate(std::size_t n) {
    const std::size_t bytes = (n * sizeof(T) + (2u << 20) - 1) / (2u << 20) * (2u << 20);
    void* p = std::aligned_alloc(2u << 20, bytes);
    if (p == nullptr) throw std::bad_alloc();
    madvise(p, bytes, MADV_HUGEPAGE);
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t) { std::free(p); }
  bool operator==(const HugeAlloc&) const { return true; }
};

struct Shape {
  const char* name;
  std::int64_t m, n, k;
};

}  // namespace

int main(int argc, char** argv) {
  qhx_cli::App app{"bench_kernels: linear kernels on Qwen3-VL-2B shapes"};
  int threads = 0, reps = 20;
  bool json = false;
  app.add_option("--threads", threads, "threads (0: default)")->check(qhx_cli::NonNegativeNumber);
  app.add_option("--reps", reps, "calls per figure (best of)")->check(qhx_cli::PositiveNumber);
  app.add_flag("--json", json, "one JSON object");
  std::string only;
  app.add_option("--only", only, "run only the figures whose name contains this text");
  QHX_CLI_PARSE(app, argc, argv);
  qhx::cpu::set_threads(threads);
  using namespace qhx::cpu;

  const Shape shapes[] = {
      {"decode mlp.up [6144x2048]", 1, 6144, 2048},      {"decode mlp.down [2048x6144]", 1, 2048, 6144},
      {"decode q_proj [2048x2048]", 1, 2048, 2048},      {"decode lm_head [151936x2048]", 1, 151936, 2048},
      {"prefill-320 mlp.up", 320, 6144, 2048},           {"prefill-320 mlp.down", 320, 2048, 6144},
      {"vision-1024 fc1 [4096x1024]", 1024, 4096, 1024}, {"vision-1024 qkv [3072x1024]", 1024, 3072, 1024}};
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> qd(-127, 127);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  nlohmann::json out = nlohmann::json::array();
  const auto wanted = [&](const std::string& name) {
    return name.find(only) != std::string::npos;
  };
  for (const Shape& s : shapes) {
    if (!wanted(s.name)) continue;
    std::vector<std::int8_t> q(static_cast<std::size_t>(s.n * s.k));
    for (auto& v : q) v = static_cast<std::int8_t>(qd(rng));
    std::vector<float> sw(static_cast<std::size_t>(s.n), 0.01f), x(static_cast<std::size_t>(s.m * s.k)),
        y(static_cast<std::size_t>(s.m * s.n));
    for (auto& v : x) v = nd(rng);
    for (const bool int8 : {true, false}) {
      if (!int8 && s.m > 1 && s.n * s.k > (std::int64_t{8} << 20)) continue;  // the slow path on big GEMMs: skip
      WeightMatrix w = WeightMatrix::w8(q.data(), sw.data(), s.n, s.k);
      w.int8_activations = int8;
      w.packed = active_kernels().pack(w);
      double best = 1e30;
      const int r = s.m > 1 ? std::max(1, reps / 5) : reps;
      for (int i = 0; i < r + 1; ++i) {
        const auto t0 = Clock::now();
        active_kernels().linear(x.data(), s.m, w, nullptr, y.data());
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (i > 0) best = std::min(best, ms);  // the first call warms caches and buffers
      }
      const double gbs = static_cast<double>(s.n * s.k) / (best * 1e6);
      const double gops = 2.0 * static_cast<double>(s.m * s.n * s.k) / (best * 1e6);
      const std::string path = int8 ? std::string("int8/") + int8_kernel_best().name : "f32-act";
      if (!json)
        std::printf("%-32s %-18s %9.3f ms  %7.1f GB/s weights  %7.1f GOP/s\n", s.name, path.c_str(), best, gbs, gops);
      out.push_back({{"shape", s.name}, {"path", path}, {"ms", best}, {"weight_gb_s", gbs}, {"gop_s", gops}});
    }
  }
  // One decode step's matrices, 8 layers of them (~400 MB as w8: far beyond any
  // cache, so the figure is the DRAM stream a real decode step sees), called
  // one after another as the decoder does: w8, w4 with bf16-valued scales (what
  // qhx_export writes: streamed in 16 bits) and w4 with f32 scales (older
  // bundles). Bytes are those streamed: weights and their scales as packed.
  struct Mat {
    std::int64_t n, k;
  };
  const Mat layer[] = {{2048, 2048}, {1024, 2048}, {1024, 2048}, {2048, 2048},
                       {6144, 2048}, {6144, 2048}, {2048, 6144}};
  constexpr int kStackLayers = 8;
  struct Variant {
    const char* name;
    int bits;
    float scale;  // 2^-7 is a bf16 value, 0.01 is not
  };
  // kStackLayers layers of `layer`, packed for decode with int8 activations; `bytes`
  // gains what a pass streams (weights and their scales as packed).
  const auto make_stack = [&](int bits, float scale, std::int64_t& bytes) {
    std::vector<WeightMatrix> stack;
    for (int l = 0; l < kStackLayers; ++l)
      for (const Mat& mt : layer) {
        std::vector<std::uint8_t> q(static_cast<std::size_t>(mt.n * mt.k * bits / 8));
        for (auto& e : q) e = static_cast<std::uint8_t>(qd(rng));
        std::vector<float> sw(static_cast<std::size_t>(bits == 8 ? mt.n : mt.n * mt.k / 32), scale);
        WeightMatrix w = bits == 8
                             ? WeightMatrix::w8(reinterpret_cast<const std::int8_t*>(q.data()), sw.data(), mt.n, mt.k)
                             : WeightMatrix::w4(q.data(), sw.data(), mt.n, mt.k);
        w.int8_activations = true;
        w.packed = active_kernels().pack(w);
        w.data = nullptr;  // decode reads the packed copy only
        w.scales = nullptr;
        stack.push_back(w);
        const std::size_t scale_bytes = w.packed->scales_bf16 ? 2 : 4;
        bytes += static_cast<std::int64_t>(q.size() + sw.size() * scale_bytes);
      }
    return stack;
  };
  const std::string stack_name = "decode stack, " + std::to_string(kStackLayers) + " layers";
  if (wanted(stack_name)) {
    const Variant variants[] = {{"w8", 8, 0x1p-7f}, {"w4", 4, 0x1p-7f}, {"w4 f32-scales", 4, 0.01f}};
    constexpr int kVariants = 3;
    std::vector<WeightMatrix> stacks[kVariants];
    std::int64_t bytes[kVariants] = {}, max_k = 0;
    for (int vi = 0; vi < kVariants; ++vi) {
      const Variant& v = variants[vi];
      stacks[vi] = make_stack(v.bits, v.scale, bytes[vi]);
      for (const Mat& mt : layer) max_k = std::max(max_k, mt.k);
    }
    std::vector<float> x(static_cast<std::size_t>(max_k)), y(6144);
    for (auto& e : x) e = nd(rng);
    // The variants take turns, so each sees the same memory bandwidth: on a shared
    // host it moves from one second to the next.
    std::vector<double> times[kVariants];
    for (int i = 0; i < reps + 1; ++i)
      for (int vi = 0; vi < kVariants; ++vi) {
        const auto t0 = Clock::now();
        for (const WeightMatrix& w : stacks[vi]) active_kernels().linear(x.data(), 1, w, nullptr, y.data());
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (i > 0) times[vi].push_back(ms);
      }
    for (int vi = 0; vi < kVariants; ++vi) {
      std::sort(times[vi].begin(), times[vi].end());
      const double med = times[vi][times[vi].size() / 2];
      const double gbs = static_cast<double>(bytes[vi]) / (med * 1e6);
      const std::string path = std::string(variants[vi].name) + "/" + int8_kernel_best().name;
      if (!json)
        std::printf("%-32s %-24s %9.3f ms  %7.1f GB/s weights (median)\n", stack_name.c_str(), path.c_str(), med, gbs);
      out.push_back({{"shape", stack_name}, {"path", path}, {"ms", med}, {"weight_gb_s", gbs}});
    }
  }

  // A speculation step's matrices: the w8 stack above with 1 + K rows (K drafts
  // verified in one pass, K = 2, 4, 8), each against the 1-row step measured in the
  // same round (the rows take turns, so each sees the same memory bandwidth). The
  // weights are read once per call whatever the rows; what more rows cost is compute.
  const std::string verify_name = "verify stack, " + std::to_string(kStackLayers) + " layers";
  if (wanted(verify_name)) {
    std::int64_t stack_bytes = 0;
    const std::vector<WeightMatrix> stack = make_stack(8, 0x1p-7f, stack_bytes);
    const std::int64_t rows[] = {1, 3, 5, 9};
    constexpr int kRows = 4;
    std::vector<float> x(static_cast<std::size_t>(9 * 6144)), y(static_cast<std::size_t>(9 * 6144));
    for (auto& e : x) e = nd(rng);
    std::vector<double> times[kRows];
    for (int i = 0; i < reps + 1; ++i)
      for (int ri = 0; ri < kRows; ++ri) {
        const auto t0 = Clock::now();
        for (const WeightMatrix& w : stack) active_kernels().linear(x.data(), rows[ri], w, nullptr, y.data());
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (i > 0) times[ri].push_back(ms);
      }
    std::vector<double> med(kRows);
    for (int ri = 0; ri < kRows; ++ri) {
      std::sort(times[ri].begin(), times[ri].end());
      med[static_cast<std::size_t>(ri)] = times[ri][times[ri].size() / 2];
    }
    for (int ri = 0; ri < kRows; ++ri) {
      const std::string path = std::to_string(rows[ri]) + " rows/" + int8_kernel_best().name;
      const double ratio = med[static_cast<std::size_t>(ri)] / med[0];
      if (!json)
        std::printf("%-32s %-24s %9.3f ms  %5.2fx the 1-row step (median)\n", verify_name.c_str(), path.c_str(),
                    med[static_cast<std::size_t>(ri)], ratio);
      out.push_back(
          {{"shape", verify_name}, {"path", path}, {"ms", med[static_cast<std::size_t>(ri)]}, {"vs_one_row", ratio}});
    }
  }

  // The vision encoder's four products as its 24 layers run them: distinct
  // weights per layer (288 MB as w8, so each layer's come from DRAM, not from a
  // cache a single matrix called again would sit in), each product's input the
  // output a layer leaves in its place (fc2 reads the 16 MB fc1 wrote). The
  // figure is each product's time summed over the layers (median of the passes).
  const std::string vstack_name = "vision stack, 24 layers";
  if (wanted(vstack_name)) {
    constexpr std::int64_t kRows = 1024, kH = 1024, kInter = 4096, kLayers = 24;
    const Mat vmats[] = {{3 * kH, kH}, {kH, kH}, {kInter, kH}, {kH, kInter}};
    const char* vnames[] = {"qkv", "proj", "fc1", "fc2"};
    std::vector<WeightMatrix> ws;
    std::vector<std::vector<std::int8_t>> wq;
    std::vector<float> vsw(static_cast<std::size_t>(kInter * 3), 0.01f);
    for (std::int64_t l = 0; l < kLayers; ++l)
      for (const Mat& mt : vmats) {
        wq.emplace_back(static_cast<std::size_t>(mt.n * mt.k));
        for (auto& e : wq.back()) e = static_cast<std::int8_t>(qd(rng));
        WeightMatrix w = WeightMatrix::w8(wq.back().data(), vsw.data(), mt.n, mt.k);
        w.int8_activations = true;
        w.packed = active_kernels().pack(w);
        w.data = nullptr;
        wq.back() = {};
        ws.push_back(w);
      }
    std::vector<float> x(static_cast<std::size_t>(kRows * kH)), qkv(static_cast<std::size_t>(kRows * 3 * kH)),
        attn(x.size()), mlp(static_cast<std::size_t>(kRows * kInter)), tmp(x.size());
    for (auto* vec : {&x, &qkv, &attn, &mlp, &tmp})
      for (auto& e : *vec) e = nd(rng);
    std::vector<double> times[4];
    for (int i = 0; i < std::max(2, reps / 5) + 1; ++i) {
      double t[4] = {};
      for (std::int64_t l = 0; l < kLayers; ++l) {
        const float* in[4] = {x.data(), attn.data(), x.data(), mlp.data()};
        float* outp[4] = {qkv.data(), tmp.data(), mlp.data(), tmp.data()};
        for (int j = 0; j < 4; ++j) {
          const auto t0 = Clock::now();
          active_kernels().linear(in[j], kRows, ws[static_cast<std::size_t>(l * 4 + j)], nullptr, outp[j]);
          t[j] += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        }
      }
      if (i > 0)
        for (int j = 0; j < 4; ++j) times[j].push_back(t[j]);
    }
    for (int j = 0; j < 4; ++j) {
      std::sort(times[j].begin(), times[j].end());
      const double med = times[j][times[j].size() / 2];
      const double gops = 2.0 * static_cast<double>(kLayers * kRows * vmats[j].n * vmats[j].k) / (med * 1e6);
      const std::string path = std::string(vnames[j]) + "/" + int8_kernel_best().name;
      if (!json)
        std::printf("%-32s %-24s %9.3f ms  %7.1f GOP/s (median)\n", vstack_name.c_str(), path.c_str(), med, gops);
      out.push_back({{"shape", vstack_name}, {"path", path}, {"ms", med}, {"gop_s", gops}});
    }
  }

  // Attention: the vision encoder's (1,024 patches, 16 heads of 64, non-causal) and a
  // decoder's prefill chunk and decode step (16 query heads over 8 KV heads of 128).
  struct Att {
    const char* name;
    std::int64_t t, n, hq, hkv, d, start;
    bool causal;
  };
  const Att atts[] = {{"attention vision 1024x1024 16x64", 1024, 1024, 16, 16, 64, 0, false},
                      {"attention prefill 320, causal", 320, 320, 16, 8, 128, 0, true},
                      {"attention decode at 1024 ctx", 1, 1024, 16, 8, 128, 1023, true}};
  for (const Att& a : atts) {
    if (!wanted(a.name)) continue;
    std::vector<float> q(static_cast<std::size_t>(a.t * a.hq * a.d)), k(static_cast<std::size_t>(a.n * a.hkv * a.d)),
        v(k.size()), o(q.size());
    for (auto* vec : {&q, &k, &v})
      for (auto& e : *vec) e = nd(rng);
    // The f32 kernel, and for the non-causal shape the int8 one (int8_attention.hpp).
    for (const bool int8 : {false, true}) {
      if (int8 && a.causal) continue;
      double best = 1e30;
      for (int i = 0; i < 6; ++i) {
        const auto t0 = Clock::now();
        if (int8)
          active_kernels().attention_i8(q.data(), k.data(), v.data(), a.t, a.n, a.hq, a.hkv, a.d, 0.125f, o.data());
        else
          active_kernels().attention(q.data(), k.data(), v.data(), a.t, a.n, a.hq, a.hkv, a.d, a.start, 0.125f,
                                     a.causal, o.data());
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (i > 0) best = std::min(best, ms);
      }
      const double t = static_cast<double>(a.t), start = static_cast<double>(a.start);
      const double pairs = a.causal ? t * (start + (t + 1) / 2.0) : t * static_cast<double>(a.n);
      const double gflops = 4.0 * pairs * static_cast<double>(a.hq * a.d) / (best * 1e6);
      const char* path = int8 ? "int8" : "f32";
      if (!json) std::printf("%-32s %-18s %9.3f ms  %7.1f G%s/s\n", a.name, path, best, gflops, int8 ? "OP" : "FLOP");
      out.push_back({{"shape", a.name}, {"path", path}, {"ms", best}, {"gflop_s", gflops}});
    }
  }
  // Decode attention over a whole model's KV cache (28 layers at 1,024 and 4,096
  // tokens of context; at 4,096: 940 MB in f32, 470 MB in f16, 242 MB in i8:
  // streamed from DRAM as in a real decode step), for each cache type.
  {
    constexpr std::int64_t kLayers = 28, kHq = 16, kHkv = 8, kD = 128;
    const std::string name = "decode attention, 28 layers";
    enum class Kv { F32, F16, I8 };
    for (const std::int64_t ctx : {std::int64_t{1024}, std::int64_t{4096}})
      for (const Kv kv : {Kv::F32, Kv::F16, Kv::I8}) {
        if (!wanted(name)) break;
        // Per layer: keys then values, [ctx, hkv, d] (f32), [hkv, ctx, d] (f16) or [hkv, ctx, d + 4]
        // bytes (i8); random values, so the f16 elements are simply written in order.
        const std::int64_t row = kv == Kv::I8 ? qhx::cpu::kv_i8_row_bytes(kD) : kD * (kv == Kv::F16 ? 2 : 4);
        const auto half = static_cast<std::size_t>(ctx * kHkv * row);
        std::vector<std::vector<std::uint8_t, HugeAlloc<std::uint8_t>>> cache(kLayers);
        std::vector<float> x(static_cast<std::size_t>(ctx * kHkv * kD));
        for (std::int64_t l = 0; l < kLayers; ++l) {
          cache[l].resize(2 * half);
          for (int part = 0; part < 2; ++part) {
            for (auto& e : x) e = nd(rng);
            std::uint8_t* dst = cache[l].data() + part * half;
            if (kv == Kv::I8)
              qhx::cpu::kv_i8_write(x.data(), ctx, kHkv, kD, ctx, 0, reinterpret_cast<std::int8_t*>(dst));
            else if (kv == Kv::F16)
              for (std::size_t i = 0; i < x.size(); ++i)
                reinterpret_cast<std::uint16_t*>(dst)[i] = qhx::f32_to_f16(x[i]);
            else
              std::memcpy(dst, x.data(), x.size() * sizeof(float));
          }
        }
        std::vector<float> q(kHq * kD), o(kHq * kD);
        for (auto& e : q) e = nd(rng);
        std::vector<double> times;
        for (int i = 0; i < reps + 1; ++i) {
          const auto t0 = Clock::now();
          for (std::int64_t l = 0; l < kLayers; ++l) {
            const std::uint8_t* k = cache[l].data();
            const std::uint8_t* v = k + half;
            if (kv == Kv::I8)
              active_kernels().attention_i8kv(q.data(), reinterpret_cast<const std::int8_t*>(k),
                                              reinterpret_cast<const std::int8_t*>(v), 1, ctx, ctx, kHq, kHkv, kD,
                                              ctx - 1, 0.088f, o.data());
            else if (kv == Kv::F16)
              active_kernels().attention_f16kv(q.data(), reinterpret_cast<const std::uint16_t*>(k),
                                               reinterpret_cast<const std::uint16_t*>(v), 1, ctx, ctx, kHq, kHkv, kD,
                                               ctx - 1, 0.088f, true, o.data());
            else
              active_kernels().attention(q.data(), reinterpret_cast<const float*>(k), reinterpret_cast<const float*>(v),
                                         1, ctx, kHq, kHkv, kD, ctx - 1, 0.088f, true, o.data());
          }
          const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
          if (i > 0) times.push_back(ms);
        }
        std::sort(times.begin(), times.end());
        const double med = times[times.size() / 2];
        const double gbs = 2.0 * kLayers * static_cast<double>(half) / (med * 1e6);
        const std::string path = std::string(kv == Kv::I8    ? "i8"
                                             : kv == Kv::F16 ? "f16"
                                                             : "f32") +
                                 " cache, ctx " + std::to_string(ctx);
        if (!json)
          std::printf("%-32s %-18s %9.3f ms  %7.1f GB/s K and V (median)\n", name.c_str(), path.c_str(), med, gbs);
        out.push_back({{"shape", name}, {"path", path}, {"ms", med}, {"kv_gb_s", gbs}});
      }
  }
  if (json) std::printf("%s\n", nlohmann::json{{"threads", num_threads()}, {"results", out}}.dump().c_str());
  return 0;
}
