// qhx_serve's POST /v1/chat/completions body parser: any body is a request or an
// ApiException (a 400 naming the field); anything else escaping would be a 500.
#include <cstdint>

#include "fuzz_support.hpp"
#include "serve/errors.hpp"
#include "serve/request.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  qhx::serve::RequestLimits limits;
  limits.context_length = 4096;
  try {
    const auto r = qhx::serve::parse_chat_request(qhx::fuzz::as_text(data, size), qhx::SamplingParams{}, limits);
    QHX_FUZZ_CHECK(!r.messages.empty() && r.messages.back().role == "user");
    QHX_FUZZ_CHECK(r.images <= limits.max_images);
    for (const auto& m : r.messages)
      for (const auto& p : m.content)
        if (p.kind == qhx::ContentPart::Kind::Image) QHX_FUZZ_CHECK(!qhx::serve::sniff_image(p.image.bytes).empty());
  } catch (const qhx::serve::ApiException& e) {
    QHX_FUZZ_CHECK(e.error.status == 400);
  }
  return 0;
}
