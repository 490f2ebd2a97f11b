// The CPU backend: the graph kinds it can build, and its one setting (threads).
#include "backends/cpu/models/qwen3vl/patch_embed.hpp"
#include "backends/cpu/models/qwen3vl/text_decoder.hpp"
#include "backends/cpu/models/qwen3vl/vision_encoder.hpp"
#include "backends/cpu/thread_pool.hpp"
#include "backends/delegate.hpp"
#include "qhexrt/error.hpp"

namespace qhx {
namespace cpu {
std::unique_ptr<Delegate> make_linear_graph();
std::unique_ptr<Delegate> make_gather_graph();
}  // namespace cpu

void register_cpu_backend() {
  register_delegate("cpu", "linear", cpu::make_linear_graph);
  register_delegate("cpu", "gather", cpu::make_gather_graph);
  register_delegate("cpu", "qwen3vl.text_decoder", qwen3vl::make_text_decoder);
  register_delegate("cpu", "qwen3vl.text_decoder_ar", qwen3vl::make_text_decoder_ar);
  register_delegate("cpu", "qwen3vl.vision_encoder", qwen3vl::make_vision_encoder);
  register_delegate("cpu", "qwen3vl.patch_embed", qwen3vl::make_patch_embed);
  register_backend_configurator("cpu", [](const nlohmann::json& settings) {
    for (const auto& [key, value] : settings.items()) {
      if (key != "threads") fail("backend \"cpu\" has no setting \"", key, "\" (it takes threads)");
      if (!value.is_number_integer() || value.get<int>() < 1)
        fail("backend \"cpu\": threads must be a positive integer");
      cpu::set_threads(value.get<int>());
    }
  });
}

}  // namespace qhx
