#include "qhexrt/pipeline.hpp"
#include "runtime/manifest.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>

#include "backends/cpu/checkpoint_weights.hpp"
#include "qhexrt/error.hpp"
#include "runtime/run_context.hpp"
#include "runtime/stage.hpp"

namespace qhx {

Graph& Resources::graph(const std::string& name) {
  const auto it = graphs.find(name);
  if (it == graphs.end()) fail(manifest.source, ": no graph named \"", name, "\"");
  return it->second;
}

const Table& Resources::table(const std::string& name) const {
  const auto it = tables.find(name);
  if (it == tables.end()) fail(manifest.source, ": no table named \"", name, "\"");
  return it->second;
}

const Table& Resources::matrix_table(const std::string& name) const {
  const Table& t = table(name);
  if (t.matrix.data == nullptr) fail(manifest.source, ": table \"", name, "\" (", t.tensor, ") is not a matrix");
  return t;
}

std::unique_ptr<Stage> make_stage(const ManifestStage& stage, Resources& res) {
  if (stage.op == "load_images") return make_load_images_stage(stage, res);
  if (stage.op == "patch_embed") return make_patch_embed_stage(stage, res);
  if (stage.op == "vision") return make_vision_stage(stage, res);
  if (stage.op == "tokenize") return make_tokenize_stage(stage, res);
  if (stage.op == "embed") return make_embed_stage(stage, res);
  if (stage.op == "prefill") return make_prefill_stage(stage, res);
  if (stage.op == "decode") return make_decode_stage(stage, res);
  if (stage.op == "detokenize") return make_detokenize_stage(stage, res);
  fail(stage.path, ".op: unknown stage \"", stage.op, "\"");
}

struct Pipeline::Impl {
  Resources res;
  std::vector<std::unique_ptr<Stage>> stages;
  double load_ms = 0;
};

namespace {

// Wraps errors from loading a part of the plan with the manifest's name.
template <typename Fn>
auto in_manifest(const Manifest& m, const std::string& what, Fn&& fn) {
  try {
    return fn();
  } catch (const Error& e) {
    fail(m.source, ": ", what, ": ", e.what());
  }
}

}  // namespace

StateBuffer make_state_buffer(std::size_t bytes) {
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  const std::size_t rounded = std::max<std::size_t>((bytes + kHuge - 1) / kHuge * kHuge, kHuge);
  void* p = std::aligned_alloc(kHuge, rounded);
  if (p == nullptr) fail("out of memory: a graph's state needs ", rounded, " bytes");
#ifdef MADV_HUGEPAGE
  madvise(p, rounded, MADV_HUGEPAGE);  // advisory: failure is harmless
#endif
  return StateBuffer(static_cast<std::byte*>(p));
}

namespace {

void load_graph(Resources& res, const std::string& name, const ManifestGraph& mg) {
  GraphBlob blob{name,           mg.kind, res.manifest.dir, mg.spec, res.manifest.context_length,
                 res.manifest.prefill_chunk, res.manifest.version};
  if (res.manifest.image.resize == "fixed" && res.config.vision.patch_size > 0) {
    const std::int64_t side = res.manifest.image.size / res.config.vision.patch_size;
    blob.image_patches = side * side;
  }
  Graph g;
  g.name = name;
  g.delegate = create_delegate(mg.backend, blob);
  g.inputs = g.delegate->input_specs();
  g.outputs = g.delegate->output_specs();
  // State inputs (fixed shapes, named like "*_cache") live as long as the pipeline.
  for (const IoSpec& s : g.inputs) {
    if (s.name.find("cache") == std::string::npos) continue;
    std::int64_t n = 1;
    for (const auto d : s.shape) n *= d;
    // Left uninitialized: only positions already written are ever read, and
    // untouched pages of a long context cost no memory.
    g.state.emplace(s.name, make_state_buffer(static_cast<std::size_t>(n) * dtype_size(s.dtype)));
  }
  res.graphs.emplace(name, std::move(g));
}

}  // namespace

Pipeline::Pipeline(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Pipeline::Pipeline(Pipeline&&) noexcept = default;
Pipeline& Pipeline::operator=(Pipeline&&) noexcept = default;
Pipeline::~Pipeline() = default;

Pipeline Pipeline::open(const std::filesystem::path& path) {
  const auto t0 = Clock::now();
  auto impl = std::make_unique<Impl>();
  Resources& res = impl->res;
  if (std::filesystem::is_directory(path)) {
    if (!std::filesystem::exists(path / "config.json"))
      fail(path.string(), ": not a manifest and not a Hugging Face checkpoint directory (no config.json)");
    res.manifest = default_manifest_for_hf_dir(path);
  } else {
    res.manifest = load_manifest(path);
  }
  const Manifest& m = res.manifest;
  res.config = in_manifest(m, "config", [&] { return load_qwen3vl_config(m.dir / m.config); });
  res.tokenizer.emplace(in_manifest(m, "tokenizer", [&] { return Tokenizer::load(m.dir / m.tokenizer); }));
  for (const auto& stop : m.stop_tokens) {
    const auto id = res.tokenizer->token_to_id(stop);
    if (!id) fail(m.source, ": stop_tokens: \"", stop, "\" is not a token of the tokenizer");
    res.stop_ids.push_back(*id);
  }
  for (std::size_t i = 0; i < m.stop_token_ids.size(); ++i) {
    const std::int64_t id = m.stop_token_ids[i];
    if (id >= res.config.text.vocab_size)
      fail(m.source, ": stop_token_ids[", i, "]: ", id, " is outside the vocabulary [0, ", res.config.text.vocab_size,
           ")");
    if (std::find(res.stop_ids.begin(), res.stop_ids.end(), id) == res.stop_ids.end())
      res.stop_ids.push_back(static_cast<std::int32_t>(id));
  }
  for (const auto& [name, mt] : m.tables) {
    in_manifest(m, "tables." + name, [&] {
      Table t;
      t.file.emplace(Checkpoint::open(m.dir / mt.file));
      t.tensor = mt.tensor;
      const TensorView& v = t.file->get(mt.tensor);
      if (v.shape.size() == 2) t.matrix = cpu::matrix_weight(*t.file, mt.tensor);  // any stored format
      res.tables.emplace(name, std::move(t));
      return 0;
    });
  }
  for (const auto& [name, mg] : m.graphs)
    in_manifest(m, "graphs." + name, [&] {
      load_graph(res, name, mg);
      return 0;
    });
  for (const auto& st : m.stages) impl->stages.push_back(in_manifest(m, st.path, [&] { return make_stage(st, res); }));
  impl->load_ms = ms_since(t0);
  return Pipeline(std::move(impl));
}

const Manifest& Pipeline::manifest() const { return impl_->res.manifest; }
const Tokenizer& Pipeline::tokenizer() const { return *impl_->res.tokenizer; }
double Pipeline::load_ms() const { return impl_->load_ms; }

GenerationResult Pipeline::generate(const GenerationRequest& request) {
  GenerationResult result;
  RunContext ctx{request, result, impl_->res};
  const Manifest& m = impl_->res.manifest;
  ctx.max_new_tokens = request.max_new_tokens.value_or(m.max_new_tokens);
  if (ctx.max_new_tokens < 1) fail("max new tokens must be >= 1, got ", ctx.max_new_tokens);
  if (ctx.max_new_tokens >= m.context_length)
    fail("max new tokens (", ctx.max_new_tokens, ") must be below the context length (", m.context_length, ")");
  if (!request.images.empty() &&
      std::none_of(m.stages.begin(), m.stages.end(), [](const ManifestStage& s) { return s.op == "load_images"; }))
    fail(m.source, ": this plan has no image stages (a text-only manifest); it cannot take an image");
  ctx.sampling = request.sampling.value_or(m.sampling);
  ctx.sampling.validate();
  for (const auto& stage : impl_->stages) stage->run(ctx);
  result.timings.load_ms = impl_->load_ms;
  return result;
}

}  // namespace qhx
