#include "serve/errors.hpp"

namespace qhx::serve {

std::string ApiError::type() const {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

nlohmann::json ApiError::to_json() const {
  nlohmann::json e = {{"message", message}, {"type", type()}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return {{"error", e}};
}

void bad_request(std::string message, std::string param, std::string code) {
  throw ApiException(ApiError{400, std::move(message), std::move(param), std::move(code)});
}

}  // namespace qhx::serve
