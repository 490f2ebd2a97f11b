// serve/crypto.hpp — the two things the server takes from OpenSSL's libcrypto (which
// cpp-httplib links anyway): base64 decoding and a constant-time comparison.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace qhx::serve {

// Standard base64 (RFC 4648, padding optional, line breaks allowed); nullopt if malformed.
std::optional<std::vector<std::uint8_t>> base64_decode(std::string_view text);

// Equality of two secrets in a time that depends on neither their contents nor
// where they differ (their SHA-256 digests compared with CRYPTO_memcmp).
bool secrets_equal(std::string_view a, std::string_view b);

}  // namespace qhx::serve
