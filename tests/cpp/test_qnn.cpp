// The qnn-htp backend against the real QAIRT libraries (x86-64 HTP emulation) and the
// context binaries tools/qnn/make_qnn_graphs.py prepares for HTP v79 (scripts/setup_qnn.sh
// installs the libraries and builds the binaries). Their absence is a failure, not a skip.
//
// Layouts: our declarations of the QNN C API (src/backends/qnn/qnn_abi.hpp) are checked by
// reading what the libraries return through them and comparing with facts from elsewhere:
// the QAIRT version of the wheel, and the graph names and tensors that ONNX Runtime's
// EPContext node and the ONNX graph declare (the generator's .json sidecars).
//
// Numerics: the qnn-htp graphs against the CPU backend on the same int8 weights (dequantized
// exactly to f32 by the generator), with bounds derived from fp16 rounding (below).
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <functional>
#include <cstring>
#include <fstream>
#include <random>

#include "backends/cpu/checkpoint_weights.hpp"
#include "backends/cpu/kernel_set.hpp"
#include "backends/delegate.hpp"
#include "backends/qnn/qnn_runtime.hpp"
#include "backends/cpu/nn/attention.hpp"
#include "backends/cpu/nn/mlp.hpp"
#include "models/rope.hpp"
#include "qhexrt/error.hpp"
#include "qhexrt/pipeline.hpp"
#include "test_support.hpp"
#include "text_plan.hpp"

namespace qhx {
namespace {

namespace fs = std::filesystem;

fs::path graphs_dir() {
  const fs::path d = test::cache_dir() / "qnn/graphs/tiny_a";
  if (!fs::exists(d / "qhx_stamp.json"))
    ADD_FAILURE() << d << " has no complete set of QNN graphs: run scripts/setup_qnn.sh";
  return d;
}
fs::path checkpoint_dir() { return test::cache_dir() / "reference/tiny_a/checkpoint"; }

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  if (!f) throw Error(cat("cannot read ", p.string()));
  return nlohmann::json::parse(f);
}

std::vector<std::byte> read_bytes(const fs::path& p) {
  const std::string s = test::read_file(p);
  std::vector<std::byte> b(s.size());
  std::memcpy(b.data(), s.data(), s.size());
  return b;
}

GraphBlob qnn_blob(const std::string& name, const fs::path& bin, nlohmann::json extra = nlohmann::json::object()) {
  GraphBlob b;
  b.name = name;
  b.kind = "qnn.context_graph";
  b.dir = bin.parent_path();
  b.spec = {{"backend", "qnn-htp"}, {"kind", "qnn.context_graph"}, {"context_binary", bin.filename().string()}};
  b.spec.update(extra);
  return b;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The unit roundoff of fp16 (binary16, 11-bit significand).
constexpr double kU = 0x1p-11;

struct Compare {
  double max_abs = 0, max_rel = 0, cosine = 0, rel_l2 = 0;
};
Compare compare(const std::vector<float>& got, const std::vector<float>& ref) {
  Compare c;
  double dot = 0, ng = 0, nr = 0, nd = 0, ref_max = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) ref_max = std::max(ref_max, std::abs(static_cast<double>(ref[i])));
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double g = got[i], r = ref[i], d = g - r;
    c.max_abs = std::max(c.max_abs, std::abs(d));
    // relative to the element, floored at 1% of the tensor's scale (tiny elements have no
    // meaningful relative error in fp16)
    c.max_rel = std::max(c.max_rel, std::abs(d) / std::max(std::abs(r), 0.01 * ref_max));
    dot += g * r, ng += g * g, nr += r * r, nd += d * d;
  }
  c.cosine = dot / std::sqrt(ng * nr);
  c.rel_l2 = std::sqrt(nd / nr);
  return c;
}
void report(const char* what, const Compare& c) {
  std::printf("%s: max abs err %.3g, max rel err %.3g, rel L2 %.3g, cosine %.9f\n", what, c.max_abs, c.max_rel,
              c.rel_l2, c.cosine);
}

// --- what QHexRT keeps of a binary's metadata (no libraries needed) -------------------------

// Found by fuzz_qnn_binary_info: the System API's answer carries what the binary says, so a
// graph may list tensors without an array, or dims whose byte size wraps the 32-bit client
// buffer the backend hands QNN (and the size_t product it allocates).
TEST(QnnBinaryInfo, CountsWithoutArraysAndOversizedTensorsAreRefused) {
  std::uint32_t dims[2] = {2, 3};
  qnn::abi::Tensor t{};
  t.version = 2;
  t.v1.name = "x";
  t.v1.data_type = qnn::abi::DataType::Float32;
  t.v1.rank = 2;
  t.v1.dims = dims;
  qnn::abi::GraphInfo g{};
  g.version = 1;
  g.v1.name = "g";
  g.v1.num_inputs = 1;
  g.v1.inputs = &t;
  qnn::abi::BinaryInfo bi{};
  bi.version = 3;
  bi.v3 = {};
  bi.v3.build_id = "v2.40.0.250101";
  bi.v3.soc_model = 69;
  bi.v3.num_graphs = 1;
  bi.v3.graphs = &g;
  const qnn::BinaryInfo ok = qnn::binary_info_from(bi, "a.bin");
  ASSERT_EQ(ok.graphs.size(), 1u);
  EXPECT_EQ(ok.graphs[0].inputs[0].dims, (std::vector<std::uint32_t>{2, 3}));
  EXPECT_EQ(ok.soc_model, 69u);

  g.v1.inputs = nullptr;
  test::expect_error([&] { qnn::binary_info_from(bi, "b.bin"); }, {"b.bin", "graph \"g\"", "no array"});
  g.v1.inputs = &t;
  dims[0] = 1u << 16;
  dims[1] = 1u << 14;  // 2^30 elements of 4 bytes: 4 GiB, one byte over
  test::expect_error([&] { qnn::binary_info_from(bi, "c.bin"); }, {"c.bin", "tensor \"x\"", "4 GiB"});
  dims[1] = (1u << 14) - 1;
  EXPECT_NO_THROW(qnn::binary_info_from(bi, "d.bin"));
}

// --- the libraries and the declared layouts --------------------------------------------------

TEST(QnnRuntime, LoadsTheQairtLibrariesAndReportsTheirVersion) {
  const auto stamp = read_json(graphs_dir() / "qhx_stamp.json");
  auto& rt = qnn::Runtime::get();
  const auto v = rt.api_version();
  EXPECT_EQ(v.core.major, 2u);
  EXPECT_EQ(v.core.major, rt.core().api_version.core.major);  // the provider record and the call agree
  EXPECT_EQ(v.core.minor, rt.core().api_version.core.minor);
  EXPECT_EQ(rt.system().system_api_version.major, 1u);
  // The build id comes through the function table (slot 4); the wheel's own metadata says
  // which QAIRT it bundles, so a wrong slot or struct offset shows here.
  const std::string qairt = stamp["qairt"];
  EXPECT_EQ(rt.build_id().rfind("v" + qairt + ".", 0), 0u) << rt.build_id() << " vs QAIRT " << qairt;
  std::printf("QAIRT %s: core API %u.%u.%u, HTP backend API %u.%u.%u, system API %u.%u.%u, provider %s\n",
              rt.build_id().c_str(), v.core.major, v.core.minor, v.core.patch, v.backend.major, v.backend.minor,
              v.backend.patch, rt.system().system_api_version.major, rt.system().system_api_version.minor,
              rt.system().system_api_version.patch, rt.core().provider_name);
}

void expect_binary_matches_onnx(const std::string& name) {
  const fs::path dir = graphs_dir();
  const auto meta = read_json(dir / (name + ".json"));
  const auto bin = read_bytes(dir / (name + ".bin"));
  const auto info = qnn::Runtime::get().read_binary_info(bin, name);
  EXPECT_EQ(info.build_id, meta["ep_sdk_version"].get<std::string>());  // ORT recorded the same build
  ASSERT_EQ(info.graphs.size(), 1u);
  const auto& g = info.graphs[0];
  EXPECT_EQ(g.name, meta["graph"].get<std::string>());
  auto check = [&](const std::vector<qnn::TensorInfo>& ts, const nlohmann::json& want, const char* what) {
    ASSERT_EQ(ts.size(), want.size()) << what;
    for (std::size_t i = 0; i < ts.size(); ++i) {
      EXPECT_EQ(ts[i].name, want[i]["name"].get<std::string>()) << what << " " << i;
      EXPECT_EQ(qnn::dtype_label(ts[i].dtype), want[i]["dtype"].get<std::string>()) << what << " " << i;
      std::vector<std::uint32_t> dims;
      for (const auto& d : want[i]["shape"]) dims.push_back(d.get<std::uint32_t>());
      EXPECT_EQ(ts[i].dims, dims) << what << " " << ts[i].name;
    }
  };
  check(g.inputs, meta["inputs"], "input");
  check(g.outputs, meta["outputs"], "output");
}

// One input and one output: the binary-info and graph-info records.
TEST(QnnRuntime, SystemApiReadsTheLmHeadBinaryAsOnnxDeclaredIt) { expect_binary_matches_onnx("lm_head"); }
// Three inputs and three outputs: also the stride of the tensor arrays (sizeof(Qnn_Tensor_t)).
TEST(QnnRuntime, SystemApiReadsTheLayerBinaryAsOnnxDeclaredIt) { expect_binary_matches_onnx("layer0"); }

// --- numerics against the CPU backend ----------------------------------------------------------

TEST(QnnHtp, LmHeadMatchesTheCpuBackendWithinFp16Rounding) {
  const fs::path dir = graphs_dir();
  const auto meta = read_json(dir / "lm_head.json");
  const auto qnn = create_delegate("qnn-htp", qnn_blob("lm_head", dir / "lm_head.bin", {{"row_blocks", true}}));
  GraphBlob cb;
  cb.name = "lm_head_cpu";
  cb.kind = "linear";
  cb.dir = dir;
  cb.spec = {{"backend", "cpu"}, {"kind", "linear"}, {"weights", "weights_dq.safetensors"}, {"tensor", "lm_head"}};
  const auto cpu = create_delegate("cpu", cb);
  const std::int64_t H = meta["inputs"][0]["shape"][1], V = meta["outputs"][0]["shape"][1], R = 3;
  ASSERT_EQ(qnn->input_specs()[0].shape, (std::vector<std::int64_t>{-1, H}));
  ASSERT_EQ(qnn->output_specs()[0].shape, (std::vector<std::int64_t>{-1, V}));

  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(static_cast<std::size_t>(R * H));
  for (auto& v : x) v = nd(rng);
  std::vector<float> y_qnn(static_cast<std::size_t>(R * V)), y_cpu(y_qnn.size());
  const TensorRef in[] = {{DType::F32, {R, H}, x.data()}};
  const TensorRef oq[] = {{DType::F32, {R, V}, y_qnn.data()}};
  const TensorRef oc[] = {{DType::F32, {R, V}, y_cpu.data()}};
  const auto t0 = std::chrono::steady_clock::now();
  qnn->execute(in, oq);
  const auto t1 = std::chrono::steady_clock::now();
  cpu->execute(in, oc);
  const auto t2 = std::chrono::steady_clock::now();

  // Bound per output n: y = sum_i x_i W_in. The HTP path rounds x_i to fp16 (rel u), the
  // weights carry the fp16 rounding of s0 and of s_n / s0 (rel u each, so ~2u per weight),
  // and the product is rounded to fp16 twice (the Gemm's output, then the scale Mul: u each).
  // With accumulation in at least fp32 (HMX accumulates wide; its error is << u over 64
  // terms) that is |err_n| <= 3u * sum_i |x_i W_in| + 2u * |y_n| (+ higher-order terms),
  // which we take with a factor 1.5 for those terms and the float32 reference's own rounding.
  std::vector<float> absx(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) absx[i] = std::abs(x[i]);
  // sum_i |x_i| |W_in| from the CPU backend on |x| and |W|: the file holds W, so take it row by row.
  const Checkpoint w = Checkpoint::open(dir / "weights_dq.safetensors");
  const TensorView* tv = w.find("lm_head");
  ASSERT_NE(tv, nullptr);
  const auto* W = reinterpret_cast<const float*>(tv->data);
  std::size_t violations = 0;
  double worst = 0;
  for (std::int64_t r = 0; r < R; ++r)
    for (std::int64_t n = 0; n < V; ++n) {
      double mag = 0;
      for (std::int64_t i = 0; i < H; ++i) mag += std::abs(x[r * H + i] * W[n * H + i]);
      const double bound = 1.5 * (3 * kU * mag + 2 * kU * std::abs(y_cpu[r * V + n]));
      const double err = std::abs(static_cast<double>(y_qnn[r * V + n]) - y_cpu[r * V + n]);
      worst = std::max(worst, err / bound);
      violations += err > bound;
    }
  const auto c = compare(y_qnn, y_cpu);
  report("lm-head (qnn-htp vs cpu)", c);
  std::printf("lm-head: worst error / bound %.3f; qnn-htp %.2f ms for %lld rows, cpu %.2f ms\n", worst,
              std::chrono::duration<double, std::milli>(t1 - t0).count(), static_cast<long long>(R),
              std::chrono::duration<double, std::milli>(t2 - t1).count());
  EXPECT_EQ(violations, 0u) << "worst error / bound " << worst;
  EXPECT_GT(c.cosine, 1 - 1e-5);
}

TEST(QnnHtp, DecoderLayerMatchesTheCpuBackendBlocksWithinFp16Rounding) {
  const fs::path dir = graphs_dir();
  const auto meta = read_json(dir / "layer0.json");
  const auto cfg_all = read_json(checkpoint_dir() / "config.json");
  const auto& cfg = cfg_all["text_config"];
  const std::int64_t T = meta["inputs"][0]["shape"][0], H = cfg["hidden_size"], D = cfg["head_dim"];
  const std::int64_t nh = cfg["num_attention_heads"], nkv = cfg["num_key_value_heads"], I = cfg["intermediate_size"];
  const float eps = cfg["rms_norm_eps"];
  const auto qnn = create_delegate("qnn-htp", qnn_blob("layer0", dir / "layer0.bin"));

  // Inputs: a random hidden block and the rope tables of positions 0..T-1 (text: the three
  // mrope axes share the position), computed by the CPU backend's rope code.
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(static_cast<std::size_t>(T * H)), cos(static_cast<std::size_t>(T * D)), sin(cos.size());
  for (auto& v : x) v = nd(rng);
  std::vector<std::int32_t> pos(static_cast<std::size_t>(3 * T));
  for (std::int64_t a = 0; a < 3; ++a)
    for (std::int64_t t = 0; t < T; ++t) pos[static_cast<std::size_t>(a * T + t)] = static_cast<std::int32_t>(t);
  std::vector<std::int64_t> section;
  for (const auto& s : cfg["rope_scaling"]["mrope_section"]) section.push_back(s);
  const auto inv = nn::rope_inv_freq(cfg["rope_theta"].get<double>(), D);
  nn::mrope_cos_sin(pos.data(), T, inv, nn::mrope_interleaved_axes(section, D / 2), cos.data(), sin.data());

  // The CPU backend's blocks on the same int8 weights (dequantized) and norm weights.
  const Checkpoint wq = Checkpoint::open(dir / "weights_dq.safetensors");
  const Checkpoint ck = Checkpoint::open(checkpoint_dir() / "model.safetensors");
  const std::string p = "model.language_model.layers.0.";
  auto lin = [&](const char* n) {
    return cpu::Linear{cpu::matrix_weight(wq, p + n), {}};
  };
  nn::AttentionWeights aw{lin("self_attn.q_proj.weight"),
                          lin("self_attn.k_proj.weight"),
                          lin("self_attn.v_proj.weight"),
                          lin("self_attn.o_proj.weight"),
                          cpu::vector_weight(ck, p + "self_attn.q_norm.weight", D),
                          cpu::vector_weight(ck, p + "self_attn.k_norm.weight", D)};
  nn::SwiGluWeights mw{lin("mlp.gate_proj.weight"), lin("mlp.up_proj.weight"), lin("mlp.down_proj.weight")};
  const auto in_norm = cpu::vector_weight(ck, p + "input_layernorm.weight", H);
  const auto post_norm = cpu::vector_weight(ck, p + "post_attention_layernorm.weight", H);
  const auto& k = cpu::active_kernels();
  std::vector<float> y_cpu = x, h(x.size()), kc(static_cast<std::size_t>(T * nkv * D)), vc(kc.size());
  nn::AttentionScratch as(T, nh, nkv, D);
  nn::SwiGluScratch ms(T, I);
  const auto t0 = std::chrono::steady_clock::now();
  k.rms_norm(x.data(), in_norm.data(), T, H, eps, h.data());
  nn::self_attention(k, aw, {nh, nkv, D, eps}, h.data(), T, 0, cos.data(), sin.data(),
                     {kc.data(), vc.data(), nn::KvStore::F32, T}, as, y_cpu.data());
  k.rms_norm(y_cpu.data(), post_norm.data(), T, H, eps, h.data());
  nn::swiglu_mlp(k, mw, h.data(), T, ms, y_cpu.data());
  const auto t1 = std::chrono::steady_clock::now();

  std::vector<float> y(x.size()), kq(kc.size()), vq(vc.size());
  const TensorRef in[] = {
      {DType::F32, {T, H}, x.data()}, {DType::F32, {T, D}, cos.data()}, {DType::F32, {T, D}, sin.data()}};
  const TensorRef out[] = {
      {DType::F32, {T, H}, y.data()}, {DType::F32, {T, nkv, D}, kq.data()}, {DType::F32, {T, nkv, D}, vq.data()}};
  const auto t2 = std::chrono::steady_clock::now();
  qnn->execute(in, out);
  const auto t3 = std::chrono::steady_clock::now();

  const auto cy = compare(y, y_cpu), ck_ = compare(kq, kc), cv = compare(vq, vc);
  report("layer0 hidden out", cy);
  report("layer0 K (normed, roped)", ck_);
  report("layer0 V", cv);
  std::printf("layer0 (T=%lld): qnn-htp %.2f ms, cpu %.2f ms\n", static_cast<long long>(T),
              std::chrono::duration<double, std::milli>(t3 - t2).count(),
              std::chrono::duration<double, std::milli>(t1 - t0).count());
  // Bounds, as relative L2 errors (an elementwise bound through attention and two norms is
  // not tractable; the relative L2 of a chain of roundings is). Each fp16 rounding of a
  // tensor adds at most u (rel L2 <= u); V is one projection of a normed input: input,
  // norm output, weight scales (2), product, scale Mul -> 6 roundings, bound 6u. K adds
  // the k-norm (2: mean square, output) and rope (3: two products and the sum) -> 11u.
  // The hidden output passes ~30 such roundings on its longest path (norms, q/k, scores,
  // softmax, attn . V, o-proj, residual, post-norm, gate/up/silu/product, down, residual),
  // but the residual carries x itself (exact up to its fp16 rounding) and dominates the
  // norm; we bound it by 30u on the whole, which is what an independent-rounding worst
  // case allows for the branches added to the residual.
  EXPECT_LT(cv.rel_l2, 6 * kU);
  EXPECT_LT(ck_.rel_l2, 11 * kU);
  EXPECT_LT(cy.rel_l2, 30 * kU);
  EXPECT_GT(cy.cosine, 1 - 1e-5);
}

// The run plan selects qnn-htp for the lm-head by manifest alone: two text plans that differ
// only in the lm_head entry (CPU linear on the same int8 weights vs the v79 context binary)
// produce the same greedy tokens and prompt logits within the lm-head's fp16 bound.
TEST(QnnHtp, ManifestSelectsQnnHtpForTheLmHead) {
  const fs::path dir = graphs_dir();
  const fs::path ck = checkpoint_dir();
  test::TempDir tmp;
  auto plan = [&](const nlohmann::json& lm_head) {
    const nlohmann::json j = test::text_plan(ck, lm_head);
    const fs::path p = tmp.path() / (lm_head["backend"].get<std::string>() + ".json");
    std::ofstream(p) << j.dump(1);
    return p;
  };
  const fs::path cpu_plan = plan({{"backend", "cpu"},
                                  {"kind", "linear"},
                                  {"weights", (dir / "weights_dq.safetensors").string()},
                                  {"tensor", "lm_head"}});
  const fs::path qnn_plan = plan({{"backend", "qnn-htp"},
                                  {"kind", "qnn.context_graph"},
                                  {"context_binary", (dir / "lm_head.bin").string()},
                                  {"soc_model", 69},
                                  {"row_blocks", true}});
  GenerationRequest req;
  req.prompt = "Describe the NPU.";
  req.max_new_tokens = 4;
  SamplingParams greedy;
  greedy.greedy = true;
  req.sampling = greedy;
  req.keep_step_logits = true;
  auto cpu = Pipeline::open(cpu_plan).generate(req);
  auto qnn = Pipeline::open(qnn_plan).generate(req);
  EXPECT_EQ(qnn.tokens, cpu.tokens);
  ASSERT_EQ(qnn.step_logits.size(), cpu.step_logits.size());
  const auto c = compare(qnn.step_logits, cpu.step_logits);
  report("generate, step logits (qnn-htp lm-head vs cpu)", c);
  std::printf("generate: qnn-htp plan decode %.1f ms/token, cpu plan %.1f ms/token\n", qnn.timings.decode_ms_per_token,
              cpu.timings.decode_ms_per_token);
  EXPECT_GT(c.cosine, 1 - 1e-5);
}

// --- the manifest route and errors ------------------------------------------------------------

TEST(QnnHtp, MissingLibrariesNameThePathAndTheVariable) {
  const std::string msg = error_of([] { qnn::Runtime::load({"/nonexistent/qnn-libs"}); });
  EXPECT_NE(msg.find("/nonexistent/qnn-libs/libQnnHtp.so"), std::string::npos) << msg;
  EXPECT_NE(msg.find("QHX_QNN_LIB_DIR"), std::string::npos) << msg;
}

TEST(QnnHtp, AbsentGraphNameListsTheGraphsPresent) {
  const fs::path dir = graphs_dir();
  const std::string real = read_json(dir / "lm_head.json")["graph"];
  const std::string msg = error_of([&] {
    create_delegate("qnn-htp", qnn_blob("lm_head", dir / "lm_head.bin", {{"graph", "no_such_graph"}}));
  });
  EXPECT_NE(msg.find("no graph \"no_such_graph\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"" + real + "\""), std::string::npos) << msg;
}

TEST(QnnHtp, CorruptBinaryNamesTheQnnCallAndItsErrorCode) {
  const fs::path dir = graphs_dir();
  test::TempDir tmp;
  // A real binary with its body overwritten past the header: still looks like a binary to a
  // casual reader, but is not one.
  auto bytes = read_bytes(dir / "layer0.bin");
  ASSERT_GT(bytes.size(), 4096u);
  for (std::size_t i = 64; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 131);
  const fs::path bad = tmp.path() / "corrupt.bin";
  std::ofstream(bad, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  const std::string msg = error_of([&] { create_delegate("qnn-htp", qnn_blob("layer0", bad)); });
  EXPECT_NE(msg.find("failed: error "), std::string::npos) << msg;
  EXPECT_TRUE(msg.find("QnnSystemContext_getBinaryInfo") != std::string::npos ||
              msg.find("QnnContext_createFromBinary") != std::string::npos)
      << msg;
  EXPECT_NE(msg.find("corrupt.bin"), std::string::npos) << msg;
}

// The x86-64 emulator runs a binary of any HTP arch (it loads this v75 binary too), so the
// arch pin is checked from the binary's recorded SoC model against the plan's "soc_model".
TEST(QnnHtp, BinaryForAnotherHtpArchIsRefused) {
  const fs::path dir = graphs_dir();
  EXPECT_EQ(qnn::Runtime::get().read_binary_info(read_bytes(dir / "lm_head.bin"), "v79").soc_model, 69u);
  EXPECT_EQ(qnn::Runtime::get().read_binary_info(read_bytes(dir / "lm_head_v75.bin"), "v75").soc_model, 57u);
  const std::string msg = error_of([&] {
    create_delegate("qnn-htp", qnn_blob("lm_head", dir / "lm_head_v75.bin", {{"soc_model", 69}}));
  });
  EXPECT_NE(msg.find("prepared for SoC model 57 (SM8650, HTP v75)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("targets 69 (SM8750, HTP v79)"), std::string::npos) << msg;
  EXPECT_NO_THROW(create_delegate("qnn-htp", qnn_blob("lm_head", dir / "lm_head.bin", {{"soc_model", 69}})));
}

TEST(QnnHtp, UnknownManifestKeyIsAnError) {
  const fs::path dir = graphs_dir();
  const std::string msg = error_of([&] {
    create_delegate("qnn-htp", qnn_blob("lm_head", dir / "lm_head.bin", {{"tensor", "x"}}));
  });
  EXPECT_NE(msg.find("unknown key \"tensor\""), std::string::npos) << msg;
}

}  // namespace
}  // namespace qhx

// --- the exported qnn-htp bundle (scripts/qnn_bundles.sh) -------------------------------------

namespace qhx {
namespace {

fs::path qnn_bundle_dir(const std::string& cfg) {
  const fs::path d = test::cache_dir() / "qnn/bundles" / cfg;
  if (!fs::exists(d / "qnn_graphs.json")) ADD_FAILURE() << d << " holds no qnn-htp bundle: run scripts/qnn_bundles.sh";
  return d;
}

void expect_same_tensors(const std::vector<qnn::TensorInfo>& a, const std::vector<qnn::TensorInfo>& b,
                         const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name) << what;
    EXPECT_EQ(a[i].dims, b[i].dims) << what << " " << a[i].name;
    EXPECT_EQ(a[i].dtype, b[i].dtype) << what << " " << a[i].name;
  }
}

// The device's binary: the block graphs (prefill, short, verify, decode) in one context over
// one weight set. Its size proves the sharing: N separate graphs would cost all N twins'
// bytes; sharing saves (about) N - 1 copies of the part's quantized weights. Its graphs are
// the twins' graphs, tensor for tensor, so executing the twins (tests/python/test_qnn_bundle.py)
// checks its numerics.
TEST(QnnBundle, SharedBinaryHoldsEveryBlockGraphOverOneWeightSet) {
  for (const char* cfg : {"tiny_a", "tiny_b"}) {
    const fs::path dir = qnn_bundle_dir(cfg);
    const auto desc = read_json(dir / "qnn_graphs.json");
    const auto& rt = qnn::Runtime::get();
    for (const auto& part : desc["llm_parts"]) {
      const auto shared_bytes = read_bytes(dir / part["shared"]["file"].get<std::string>());
      const qnn::BinaryInfo shared = rt.read_binary_info(shared_bytes, "shared");
      std::vector<std::string> roles;
      for (const auto& [role, name] : part["shared"]["graphs"].items()) roles.push_back(role);
      EXPECT_EQ(roles.size(), 4u) << cfg;  // prefill, short, verify, decode
      ASSERT_EQ(shared.graphs.size(), roles.size()) << cfg;
      EXPECT_EQ(shared.soc_model, 69u);
      std::uint64_t twin_bytes = 0;
      for (const std::string& which_s : roles) {
        const char* which = which_s.c_str();
        const std::string name = part["shared"]["graphs"][which];
        const auto twin_file = read_bytes(dir / part["twins"][which]["file"].get<std::string>());
        twin_bytes += twin_file.size();
        const qnn::BinaryInfo twin = rt.read_binary_info(twin_file, which);
        ASSERT_EQ(twin.graphs.size(), 1u);
        EXPECT_EQ(twin.graphs[0].name, part["twins"][which]["graph"].get<std::string>());
        const auto it = std::find_if(shared.graphs.begin(), shared.graphs.end(),
                                     [&](const qnn::GraphInfo& g) { return g.name == name; });
        ASSERT_NE(it, shared.graphs.end()) << cfg << ": no graph " << name << " in the shared binary";
        expect_same_tensors(it->inputs, twin.graphs[0].inputs, std::string(cfg) + " " + which + " inputs");
        expect_same_tensors(it->outputs, twin.graphs[0].outputs, std::string(cfg) + " " + which + " outputs");
      }
      const auto weights = part["int8_weight_bytes"].get<std::uint64_t>();
      std::printf("%s part %s: shared %zu bytes, twins %llu bytes, int8 weights %llu bytes\n", cfg,
                  part["layers"].dump().c_str(), shared_bytes.size(), static_cast<unsigned long long>(twin_bytes),
                  static_cast<unsigned long long>(weights));
      const double copies = static_cast<double>(roles.size() - 1);
      EXPECT_LE(static_cast<double>(shared_bytes.size()),
                static_cast<double>(twin_bytes) - 0.9 * copies * static_cast<double>(weights))
          << cfg << ": the shared binary is not smaller than its graphs by all weight sets but one";
    }
  }
}

// A prefill graph's names are the contract's: the runtime binds them by name.
TEST(QnnBundle, DecoderGraphsCarryTheBlockContractsNames) {
  const fs::path dir = qnn_bundle_dir("tiny_a");
  const auto desc = read_json(dir / "qnn_graphs.json");
  const auto& rt = qnn::Runtime::get();
  const auto& part0 = desc["llm_parts"][0];
  const auto bin = read_bytes(dir / part0["twins"]["prefill"]["file"].get<std::string>());
  const qnn::BinaryInfo info = rt.read_binary_info(bin, "prefill");
  std::vector<std::string> in, out;
  for (const auto& t : info.graphs[0].inputs) in.push_back(t.name);
  for (const auto& t : info.graphs[0].outputs) out.push_back(t.name);
  for (const char* n :
       {"inputs_embeds", "attention_mask", "rope_cos", "rope_sin", "past_key", "past_value", "deepstack"})
    EXPECT_NE(std::find(in.begin(), in.end(), n), in.end()) << n;
  for (const char* n : {"hidden", "new_key", "new_value"})
    EXPECT_NE(std::find(out.begin(), out.end(), n), out.end()) << n;
}

}  // namespace
}  // namespace qhx
