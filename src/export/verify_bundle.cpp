#include "qhexrt/export.hpp"

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

// A deterministic 512x512 test picture as binary PPM (which the image loader reads).
std::filesystem::path write_test_image(const std::filesystem::path& dir, std::int64_t size) {
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

VerifyCase compare(const std::string& name, Pipeline& bundle, Pipeline& source, GenerationRequest req) {
  req.max_new_tokens = 1;
  req.sampling = SamplingParams{};
  req.sampling->greedy = true;
  req.keep_step_logits = true;
  const GenerationResult a = bundle.generate(req);
  const GenerationResult b = source.generate(req);
  if (a.step_logits.size() != b.step_logits.size())
    fail("verify: the bundle and the source disagree on the vocabulary");
  double dot = 0, na = 0, nb = 0, max_abs = 0;
  for (std::size_t i = 0; i < a.step_logits.size(); ++i) {
    const double x = a.step_logits[i], y = b.step_logits[i];
    dot += x * y, na += x * x, nb += y * y;
    max_abs = std::max(max_abs, std::abs(x - y));
  }
  return {name, dot / std::sqrt(na * nb), max_abs, a.tokens.at(0), b.tokens.at(0)};
}

}  // namespace

double cosine_bound(const std::string& weights) {
  if (weights == "w8") return 0.999;
  if (weights == "w4") return 0.99;
  if (weights == "f16") return 0.9999;
  return 0.99999;
}

VerifyReport verify_bundle(const ExportSummary& s, const ExportOptions& o) {
  VerifyReport r;
  r.cosine_bound = cosine_bound(o.weights);
  Pipeline source = Pipeline::open(o.hf_dir);
  {
    Pipeline text = Pipeline::open(s.text_manifest);
    GenerationRequest req;
    req.prompt = "What is the capital of France?";
    r.cases.push_back(compare("text", text, source, req));
  }
  {
    Pipeline vlm = Pipeline::open(s.vlm_manifest);
    GenerationRequest req;
    req.prompt = "Describe this image.";
    // A picture of the bundle's image size, taken as it is by both sides (the native resize
    // keeps a size that is a multiple of 32 within the pixel limits): the bundle's fixed size,
    // which the source's own default plan (512) would not give.
    // Written outside the bundle: a kill here must not leave a stray file in it.
    std::string tmpl = (std::filesystem::temp_directory_path() / "qhx_verify_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) fail("verify: cannot create a folder in ", tmpl, ": ", std::strerror(errno));
    const std::filesystem::path tmp = tmpl;
    req.images.push_back(write_test_image(tmp, o.image_size));
    req.resize = "native";
    try {
      r.cases.push_back(compare("image", vlm, source, req));
    } catch (...) {
      std::filesystem::remove_all(tmp);
      throw;
    }
    std::filesystem::remove_all(tmp);
  }
  r.passed = true;
  for (const auto& c : r.cases) r.passed &= c.bundle_token == c.source_token && c.cosine >= r.cosine_bound;
  return r;
}

}  // namespace qhx
