#include "serve/crypto.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <memory>

namespace qhx::serve {

std::optional<std::vector<std::uint8_t>> base64_decode(std::string_view text) {
  if (text.empty()) return std::vector<std::uint8_t>{};
  std::unique_ptr<EVP_ENCODE_CTX, decltype(&EVP_ENCODE_CTX_free)> ctx(EVP_ENCODE_CTX_new(), EVP_ENCODE_CTX_free);
  if (!ctx) return std::nullopt;
  EVP_DecodeInit(ctx.get());
  std::vector<std::uint8_t> out(text.size() / 4 * 3 + 3 + 64);
  std::size_t done = 0;
  // EVP_DecodeUpdate takes an int length: feed large inputs in pieces.
  constexpr std::size_t piece = 1 << 20;
  for (std::size_t at = 0; at < text.size(); at += piece) {
    const std::size_t n = std::min(piece, text.size() - at);
    int wrote = 0;
    if (EVP_DecodeUpdate(ctx.get(), out.data() + done, &wrote, reinterpret_cast<const unsigned char*>(text.data() + at),
                         static_cast<int>(n)) < 0)
      return std::nullopt;
    done += static_cast<std::size_t>(wrote);
  }
  int wrote = 0;
  if (EVP_DecodeFinal(ctx.get(), out.data() + done, &wrote) != 1) return std::nullopt;
  done += static_cast<std::size_t>(wrote);
  out.resize(done);
  return out;
}

bool secrets_equal(std::string_view a, std::string_view b) {
  unsigned char da[EVP_MAX_MD_SIZE], db[EVP_MAX_MD_SIZE];
  unsigned int la = 0, lb = 0;
  if (EVP_Digest(a.data(), a.size(), da, &la, EVP_sha256(), nullptr) != 1) return false;
  if (EVP_Digest(b.data(), b.size(), db, &lb, EVP_sha256(), nullptr) != 1) return false;
  return la == lb && CRYPTO_memcmp(da, db, la) == 0;
}

}  // namespace qhx::serve
