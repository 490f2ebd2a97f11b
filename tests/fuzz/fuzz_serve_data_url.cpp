// Image data: URLs as qhx_serve receives them: the URL (any bytes) in an
// image_url part of an otherwise valid request, and the base64 decoder on its
// own, which must invert an encoder (RFC 4648) and accept its line-broken form.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_support.hpp"
#include "serve/crypto.hpp"
#include "serve/errors.hpp"
#include "serve/request.hpp"

namespace {

std::string base64(const std::uint8_t* p, std::size_t n) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < n; i += 3) {
    const std::uint32_t v =
        (std::uint32_t{p[i]} << 16) | (i + 1 < n ? std::uint32_t{p[i + 1]} << 8 : 0) | (i + 2 < n ? p[i + 2] : 0u);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < n ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < n ? kAlphabet[v & 63] : '=';
  }
  return out;
}

// MIME's and PEM's form: a line break after every 64 characters.
std::string wrapped(const std::string& b64) {
  std::string out;
  for (std::size_t i = 0; i < b64.size(); i += 64) out += b64.substr(i, 64) + "\n";
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = qhx::fuzz::as_text(data, size);
  (void)qhx::serve::base64_decode(text);
  const std::string encoded = base64(data, size);
  for (const std::string& form : {encoded, wrapped(encoded)}) {
    const auto back = qhx::serve::base64_decode(form);
    QHX_FUZZ_CHECK(back && back->size() == size && std::equal(back->begin(), back->end(), data));
  }

  // The URL as a client sends it; invalid UTF-8 never reaches the parser as a
  // string (the body would not be JSON), so such bytes are replaced first.
  nlohmann::json body = {
      {"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}, {"image_url", {{"url", ""}}}}}}}}}};
  std::string url(text);
  for (char& c : url)
    if (static_cast<unsigned char>(c) >= 0x80) c = '?';
  body["messages"][0]["content"][0]["image_url"]["url"] = url;
  try {
    const auto r = qhx::serve::parse_chat_request(body.dump(), qhx::SamplingParams{}, qhx::serve::RequestLimits{});
    QHX_FUZZ_CHECK(r.images == 1 && !qhx::serve::sniff_image(r.messages[0].content[0].image.bytes).empty());
  } catch (const qhx::serve::ApiException& e) {
    QHX_FUZZ_CHECK(e.error.status == 400);
  }
  return 0;
}
