// serve/errors.hpp — errors in OpenAI's form: {"error": {"message", "type", "param", "code"}}
// with the HTTP status that goes with them.
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace qhx::serve {

struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // the request field at fault ("" = none: JSON null)
  std::string code;   // a machine-readable code ("" = none: JSON null)

  std::string type() const;  // OpenAI's error type for the status
  nlohmann::json to_json() const;
};

// Thrown by the request parser and the handlers; the server turns it into the response.
class ApiException : public std::runtime_error {
 public:
  explicit ApiException(ApiError e) : std::runtime_error(e.message), error(std::move(e)) {}
  ApiError error;
};

[[noreturn]] void bad_request(std::string message, std::string param = "", std::string code = "");

}  // namespace qhx::serve
