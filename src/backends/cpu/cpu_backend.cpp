// The CPU backend: the graph kinds it can build.
#include "backends/delegate.hpp"
#include "qwen3vl/text_decoder.hpp"
#include "qwen3vl/vision_encoder.hpp"

namespace qhx {
namespace cpu {
std::unique_ptr<Delegate> make_linear_graph();
}

void register_cpu_backend() {
  register_delegate("cpu", "linear", cpu::make_linear_graph);
  register_delegate("cpu", "qwen3vl.text_decoder", qwen3vl::make_text_decoder);
  register_delegate("cpu", "qwen3vl.text_decoder_ar", qwen3vl::make_text_decoder_ar);
  register_delegate("cpu", "qwen3vl.vision_encoder", qwen3vl::make_vision_encoder);
}

}  // namespace qhx
