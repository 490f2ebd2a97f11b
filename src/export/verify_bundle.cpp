#include "qhexrt/export.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "qhexrt/error.hpp"
#include "qhexrt/pipeline.hpp"
#include "runtime/manifest.hpp"

namespace qhx {
namespace {

namespace fs = std::filesystem;

// A deterministic 512x512 test picture as binary PPM (which the image loader reads).
fs::path write_test_image(const fs::path& dir, std::int64_t size) {
  const auto n = static_cast<int>(size);
  const auto path = dir / "verify_image.ppm";
  std::ofstream f(path, std::ios::binary);
  f << "P6\n" << n << " " << n << "\n255\n";
  for (int y = 0; y < n; ++y)
    for (int x = 0; x < n; ++x) {
      const int u = x * 512 / n, v = y * 512 / n;  // the same picture at any size
      const bool disc = (u - 320) * (u - 320) + (v - 180) * (v - 180) < 70 * 70;
      const char px[3] = {static_cast<char>(disc ? 250 : u / 2), static_cast<char>(disc ? 200 : v / 2),
                          static_cast<char>((u ^ v) & 0xFF)};
      f.write(px, 3);
    }
  if (!f) fail(path.string(), ": cannot write the verification image");
  return path;
}

// KL(p || q) of softmax(a) and softmax(b) (p the source's), in nats, in double.
double kl_divergence(const float* p_logits, const float* q_logits, std::size_t n) {
  const double pm = *std::max_element(p_logits, p_logits + n), qm = *std::max_element(q_logits, q_logits + n);
  double ps = 0, qs = 0;
  for (std::size_t i = 0; i < n; ++i) ps += std::exp(p_logits[i] - pm), qs += std::exp(q_logits[i] - qm);
  const double plog = std::log(ps), qlog = std::log(qs);
  double kl = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double lp = p_logits[i] - pm - plog, lq = q_logits[i] - qm - qlog;
    kl += std::exp(lp) * (lp - lq);
  }
  return std::max(kl, 0.0);
}

// The bundle and the source on one request: the cosine and largest difference of the logits
// that choose the first token, and the mean KL divergence over every prompt position
// (`all_rows`; else of the first token's logits alone).
VerifyCase compare(const std::string& name, Pipeline& bundle, Pipeline& source, GenerationRequest req, bool all_rows) {
  req.max_new_tokens = 1;
  req.sampling = SamplingParams{};
  req.sampling->greedy = true;
  req.keep_prompt_logits = all_rows;
  req.keep_step_logits = !all_rows;
  const GenerationResult a = bundle.generate(req);
  const GenerationResult b = source.generate(req);
  const std::vector<float>& la = all_rows ? a.prompt_logits : a.step_logits;
  const std::vector<float>& lb = all_rows ? b.prompt_logits : b.step_logits;
  if (a.vocab != b.vocab || la.size() != lb.size() || a.vocab <= 0 || la.empty())
    fail("verify: the bundle and the source disagree on the vocabulary or the prompt");
  const auto vocab = static_cast<std::size_t>(a.vocab);
  const std::size_t rows = la.size() / vocab;
  VerifyCase c{.name = name, .bundle_token = a.tokens.at(0), .source_token = b.tokens.at(0)};
  const float* x = la.data() + (rows - 1) * vocab;
  const float* y = lb.data() + (rows - 1) * vocab;
  double dot = 0, na = 0, nb = 0;
  for (std::size_t i = 0; i < vocab; ++i) {
    dot += static_cast<double>(x[i]) * y[i], na += static_cast<double>(x[i]) * x[i];
    nb += static_cast<double>(y[i]) * y[i];
    c.max_abs = std::max(c.max_abs, static_cast<double>(std::abs(x[i] - y[i])));
  }
  c.cosine = dot / std::sqrt(na * nb);
  for (std::size_t r = 0; r < rows; ++r)
    c.kl_divergence += kl_divergence(lb.data() + r * vocab, la.data() + r * vocab, vocab);
  c.kl_divergence /= static_cast<double>(rows);
  return c;
}

// A folder outside the bundle for the test picture: a kill meanwhile leaves no stray file in it.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "qhx_verify_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) fail("verify: cannot create a folder in ", tmpl, ": ", std::strerror(errno));
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

// The gate's two prompts on the bundle's manifests, opened with `options`. Every prompt
// position is compared on the CPU; a qnn-htp bundle's lm-head, seconds a row in emulation,
// only at the last.
std::vector<VerifyCase> run_cases(const ExportSummary& s, const PipelineOptions& options, Pipeline& source,
                                  const ExportOptions& o) {
  const bool all_rows = o.target != "qnn-htp";
  std::vector<VerifyCase> cases;
  {
    Pipeline text = Pipeline::open(s.text_manifest, options);
    GenerationRequest req;
    req.prompt = "What is the capital of France?";
    cases.push_back(compare("text", text, source, req, all_rows));
  }
  Pipeline vlm = Pipeline::open(s.vlm_manifest, options);
  GenerationRequest req;
  req.prompt = "Describe this image.";
  // A picture of the bundle's image size, taken as it is by both sides (the native resize
  // keeps a size that is a multiple of 32 within the pixel limits): the bundle's fixed size,
  // which the source's own default plan (512) would not give.
  const TempDir tmp;
  req.images.push_back(write_test_image(tmp.path, o.image_size));
  req.resize = "native";
  cases.push_back(compare("image", vlm, source, req, all_rows));
  return cases;
}

bool passes(const std::vector<VerifyCase>& cases, const GateBounds& b) {
  return std::all_of(cases.begin(), cases.end(), [&](const VerifyCase& c) {
    return c.bundle_token == c.source_token && c.cosine >= b.cosine && c.kl_divergence <= b.kld;
  });
}

std::string figures(const std::vector<VerifyCase>& cases) {
  std::string s;
  for (const auto& c : cases)
    s += cat(s.empty() ? "" : ", ", c.name, " cosine ", std::round(c.cosine * 1e6) / 1e6, " KLD ",
             std::round(c.kl_divergence * 1e6) / 1e6);
  return s;
}

// What to try when the bundle failed: the same weights with f32 activations (measured here,
// on the staged bundle), else weights of more bits.
std::vector<std::string> advise(const ExportSummary& s, const ExportOptions& o, Pipeline& source, const GateBounds& b) {
  std::vector<std::string> advice;
  const bool int8 = (o.weights == "w8" || o.weights == "w4") && (o.activations.empty() || o.activations == "int8");
  if (int8 && o.target == "cpu") {
    PipelineOptions f32_activations;
    f32_activations.activations = "f32";
    const std::vector<VerifyCase> f32 = run_cases(s, f32_activations, source, o);
    const bool pass = passes(f32, b);
    advice.push_back(cat("the same ", o.weights, " weights with --activations f32 give ", figures(f32), ": ",
                         pass ? "they pass (float arithmetic: slower prefill and vision)" : "they fail too"));
    if (pass) return advice;
  }
  if (o.weights == "w4") advice.push_back("try --weights w8 (int8 weights: twice the bytes, closer to the source)");
  if (o.weights == "w4" || o.weights == "w8")
    advice.push_back(cat("try --weights f16 (bound cosine ", gate_bounds("f16").cosine, ", KLD ",
                         gate_bounds("f16").kld,
                         ": twice w8's bytes), or export without --verify to use this bundle as it is"));
  return advice;
}

}  // namespace

GateBounds gate_bounds(const std::string& weights) {
  if (weights == "w8") return {0.999, 0.01};
  if (weights == "w4") return {0.99, 0.05};
  if (weights == "f16") return {0.9999, 1e-3};
  return {0.99999, 1e-5};
}

VerifyReport verify_bundle(const ExportSummary& s, const ExportOptions& o) {
  VerifyReport r;
  const GateBounds b = gate_bounds(o.weights);
  r.cosine_bound = b.cosine;
  r.kld_bound = b.kld;
  Pipeline source = Pipeline::open(o.hf_dir);
  r.cases = run_cases(s, {}, source, o);
  r.passed = passes(r.cases, b);
  if (!r.passed) r.advice = advise(s, o, source, b);
  return r;
}

}  // namespace qhx
