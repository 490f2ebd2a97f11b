// The stage ops a manifest may name, each with its constructor (src/runtime/stages/<op>.cpp).
#include "runtime/stage.hpp"
#include "qhexrt/error.hpp"

namespace qhx {

std::unique_ptr<Stage> make_load_images_stage(const ManifestStage& stage, Resources& res);
std::unique_ptr<Stage> make_tokenize_stage(const ManifestStage& stage, Resources& res);
std::unique_ptr<Stage> make_patch_embed_stage(const ManifestStage& stage, Resources& res);
std::unique_ptr<Stage> make_vision_stage(const ManifestStage& stage, Resources& res);
std::unique_ptr<Stage> make_embed_stage(const ManifestStage& stage, Resources& res);
std::unique_ptr<Stage> make_prefill_stage(const ManifestStage& stage, Resources& res);
std::unique_ptr<Stage> make_decode_stage(const ManifestStage& stage, Resources& res);
std::unique_ptr<Stage> make_detokenize_stage(const ManifestStage& stage, Resources& res);

namespace {

constexpr StageOp kStageOps[] = {
    {"load_images", make_load_images_stage},
    {"tokenize", make_tokenize_stage},
    {"patch_embed", make_patch_embed_stage},
    {"vision", make_vision_stage},
    {"embed", make_embed_stage},
    {"prefill", make_prefill_stage},
    {"decode", make_decode_stage},
    {"detokenize", make_detokenize_stage},
};

}  // namespace

std::span<const StageOp> stage_ops() { return kStageOps; }

const std::vector<std::string>& known_stage_ops() {
  static const std::vector<std::string> ops = [] {
    std::vector<std::string> v;
    for (const StageOp& s : kStageOps) v.emplace_back(s.op);
    return v;
  }();
  return ops;
}

std::unique_ptr<Stage> make_stage(const ManifestStage& stage, Resources& res) {
  for (const StageOp& s : kStageOps)
    if (stage.op == s.op) return s.make(stage, res);
  fail(stage.path, ".op: unknown stage \"", stage.op, "\"");
}

}  // namespace qhx
