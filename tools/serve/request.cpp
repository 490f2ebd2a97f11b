#include "serve/request.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>

#include "common/json_limits.hpp"
#include "qhexrt/error.hpp"
#include "serve/crypto.hpp"
#include "serve/errors.hpp"

namespace qhx::serve {

namespace {

using nlohmann::json;

const char* type_name(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

[[noreturn]] void wrong_type(const std::string& param, const char* want, const json& got) {
  bad_request(cat("'", param, "' must be ", want, ", got ", type_name(got)), param, "invalid_type");
}

double number(const json& body, const char* key, double lo, double hi) {
  const json& v = body.at(key);
  if (!v.is_number()) wrong_type(key, "a number", v);
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi)
    bad_request(cat("'", key, "' is ", d, ", outside [", lo, ", ", hi, "]"), key, "invalid_value");
  return d;
}

std::int64_t integer(const json& body, const char* key, std::int64_t lo, std::int64_t hi) {
  const json& v = body.at(key);
  if (!v.is_number_integer()) wrong_type(key, "an integer", v);
  const std::int64_t i = v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)
                             ? INT64_MAX
                             : v.get<std::int64_t>();
  if (i < lo || i > hi) bad_request(cat("'", key, "' is ", i, ", outside [", lo, ", ", hi, "]"), key, "invalid_value");
  return i;
}

bool present(const json& body, const char* key) { return body.contains(key) && !body.at(key).is_null(); }

ImageSource image_from_url(const std::string& url, const std::string& param, const RequestLimits& limits) {
  if (url.rfind("data:", 0) == 0) {
    const auto comma = url.find(',');
    if (comma == std::string::npos) bad_request(cat(param, ": a data: URL without a ','"), param, "invalid_image_url");
    const std::string_view meta(url.data() + 5, comma - 5);
    if (meta.size() < 7 || meta.substr(meta.size() - 7) != ";base64")
      bad_request(cat(param, ": only base64 data: URLs are supported (data:image/png;base64,...)"), param,
                  "invalid_image_url");
    auto bytes = base64_decode(std::string_view(url).substr(comma + 1));
    if (!bytes) bad_request(cat(param, ": the data: URL's base64 is malformed"), param, "invalid_base64");
    if (bytes->empty()) bad_request(cat(param, ": the data: URL holds no bytes"), param, "invalid_image");
    if (sniff_image(*bytes).empty())
      bad_request(cat(param, ": the data is not an image (supported: JPEG, PNG, WebP, binary PGM/PPM)"), param,
                  "invalid_image");
    return ImageSource::encoded(std::move(*bytes), param);
  }
  if (url.rfind("file://", 0) == 0) {
    if (!limits.allow_file_dir)
      bad_request(cat(param, ": file:// image URLs are refused (the server was not started with --allow-file-dir)"),
                  param, "file_url_refused");
    std::string p = url.substr(7);
    if (p.rfind("localhost/", 0) == 0) p = p.substr(9);
    if (p.empty() || p[0] != '/')
      bad_request(cat(param, ": a file:// URL needs an absolute path"), param, "invalid_image_url");
    if (p.find('%') != std::string::npos)
      bad_request(cat(param, ": percent-encoded file:// URLs are not supported"), param, "invalid_image_url");
    std::error_code ec;
    const auto real = std::filesystem::canonical(p, ec);
    if (ec) bad_request(cat(param, ": ", p, ": no such file"), param, "invalid_image_url");
    const auto rel = real.lexically_relative(*limits.allow_file_dir);
    if (rel.empty() || *rel.begin() == "..")
      bad_request(cat(param, ": ", p, " is outside the directory the server allows (--allow-file-dir)"), param,
                  "file_url_refused");
    if (!std::filesystem::is_regular_file(real, ec))
      bad_request(cat(param, ": ", p, " is not a file"), param, "invalid_image_url");
    return ImageSource::file(real);
  }
  if (url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0)
    bad_request(cat(param,
                    ": this server does not fetch images from the network; send the image as a "
                    "data: URL (data:image/png;base64,...)"),
                param, "remote_image_refused");
  bad_request(cat(param, ": unsupported image URL (a data: URL with base64, or file:// under --allow-file-dir)"), param,
              "invalid_image_url");
}

Message parse_message(const json& m, const std::string& at, const RequestLimits& limits, std::int64_t& images) {
  if (!m.is_object()) wrong_type(at, "an object", m);
  if (!m.contains("role")) bad_request(cat(at, ": 'role' is missing"), at + ".role", "missing_required_parameter");
  const json& role = m.at("role");
  if (!role.is_string()) wrong_type(at + ".role", "a string", role);
  Message out;
  out.role = role.get<std::string>();
  if (out.role == "developer") out.role = "system";  // OpenAI's newer name for the system turn
  if (out.role != "system" && out.role != "user" && out.role != "assistant")
    bad_request(cat(at, ".role: \"", out.role, "\" is not supported (system, user, assistant)"), at + ".role",
                "invalid_value");
  if (!m.contains("content") || m.at("content").is_null()) {
    if (out.role == "assistant") return out;  // an assistant turn may have no content
    bad_request(cat(at, ": 'content' is missing"), at + ".content", "missing_required_parameter");
  }
  const json& content = m.at("content");
  if (content.is_string()) {
    out.content.push_back(ContentPart::text_part(content.get<std::string>()));
    return out;
  }
  if (!content.is_array()) wrong_type(at + ".content", "a string or an array of parts", content);
  for (std::size_t j = 0; j < content.size(); ++j) {
    const json& part = content[j];
    const std::string pat = cat(at, ".content[", j, "]");
    if (!part.is_object()) wrong_type(pat, "an object", part);
    if (!part.contains("type") || !part.at("type").is_string())
      bad_request(cat(pat, ": 'type' must be a string"), pat + ".type", "invalid_type");
    const std::string type = part.at("type").get<std::string>();
    if (type == "text") {
      if (!part.contains("text") || !part.at("text").is_string())
        wrong_type(pat + ".text", "a string", part.value("text", json()));
      out.content.push_back(ContentPart::text_part(part.at("text").get<std::string>()));
    } else if (type == "image_url") {
      if (out.role != "user") bad_request(cat(pat, ": images are taken in user messages only"), pat, "invalid_value");
      const json iu = part.value("image_url", json());
      std::string url;
      if (iu.is_string())
        url = iu.get<std::string>();
      else if (iu.is_object() && iu.contains("url") && iu.at("url").is_string())
        url = iu.at("url").get<std::string>();
      else
        wrong_type(pat + ".image_url", "an object with a string 'url'", iu);
      if (++images > limits.max_images)
        bad_request(cat("too many images: this server takes at most ", limits.max_images, " per request"), pat,
                    "too_many_images");
      out.content.push_back(ContentPart::image_part(image_from_url(url, pat + ".image_url.url", limits)));
    } else {
      bad_request(cat(pat, ".type: \"", type, "\" is not supported (text, image_url)"), pat + ".type",
                  "unsupported_content_type");
    }
  }
  return out;
}

}  // namespace

std::string sniff_image(const std::vector<std::uint8_t>& b) {
  auto starts = [&](const char* sig, std::size_t off = 0) {
    const std::size_t n = std::strlen(sig);
    return b.size() >= off + n && std::memcmp(b.data() + off, sig, n) == 0;
  };
  if (b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return "jpeg";
  if (starts("\x89PNG\r\n\x1a\n")) return "png";
  if (starts("RIFF") && starts("WEBP", 8)) return "webp";
  if (starts("P5") || starts("P6")) return "ppm";
  return "";
}

ChatRequest parse_chat_request(std::string_view body_text, const SamplingParams& defaults,
                               const RequestLimits& limits) {
  try {
    check_json_depth(body_text, "the request body");
  } catch (const Error& e) {
    bad_request(e.what(), "", "invalid_json");
  }
  json body = json::parse(body_text, nullptr, false);
  if (body.is_discarded()) bad_request("the request body is not valid JSON", "", "invalid_json");
  if (!body.is_object())
    bad_request(cat("the request body must be a JSON object, got ", type_name(body)), "", "invalid_type");
  ChatRequest r;
  if (present(body, "model")) {
    if (!body.at("model").is_string()) wrong_type("model", "a string", body.at("model"));
    r.model = body.at("model").get<std::string>();
  }
  if (!body.contains("messages")) bad_request("'messages' is required", "messages", "missing_required_parameter");
  const json& msgs = body.at("messages");
  if (!msgs.is_array()) wrong_type("messages", "an array", msgs);
  if (msgs.empty()) bad_request("'messages' is empty: give at least one user message", "messages", "empty_array");
  for (std::size_t i = 0; i < msgs.size(); ++i)
    r.messages.push_back(parse_message(msgs[i], cat("messages[", i, "]"), limits, r.images));
  if (r.messages.back().role != "user")
    bad_request(cat("the last message must be the user's (it is \"", r.messages.back().role, "\")"),
                cat("messages[", msgs.size() - 1, "].role"), "invalid_value");

  if (present(body, "n") && integer(body, "n", INT64_MIN, INT64_MAX) != 1)
    bad_request("'n' other than 1 is not supported", "n", "unsupported_value");
  if (present(body, "stream")) {
    if (!body.at("stream").is_boolean()) wrong_type("stream", "a boolean", body.at("stream"));
    r.stream = body.at("stream").get<bool>();
  }
  if (present(body, "stream_options")) {
    const json& so = body.at("stream_options");
    if (!so.is_object()) wrong_type("stream_options", "an object", so);
    if (present(so, "include_usage")) {
      if (!so.at("include_usage").is_boolean())
        wrong_type("stream_options.include_usage", "a boolean", so.at("include_usage"));
      r.include_usage = so.at("include_usage").get<bool>();
    }
  }
  const std::int64_t max_new_limit = std::max<std::int64_t>(1, limits.context_length - 1);
  for (const char* key : {"max_tokens", "max_completion_tokens"})
    if (present(body, key)) r.options.max_new_tokens = integer(body, key, 1, max_new_limit);

  SamplingParams s = defaults;
  if (present(body, "temperature")) {
    s.temperature = static_cast<float>(number(body, "temperature", 0, 2));
    s.greedy = s.temperature == 0.0f;
    if (s.greedy) s.temperature = 1.0f;
  }
  if (present(body, "top_p")) {
    s.top_p = static_cast<float>(number(body, "top_p", 0, 1));
    if (s.top_p == 0.0f) bad_request("'top_p' must be above 0", "top_p", "invalid_value");
  }
  if (present(body, "top_k")) {
    const auto k = integer(body, "top_k", -1, INT32_MAX);
    s.top_k = static_cast<std::int32_t>(k < 0 ? 0 : k);  // -1: off, as vLLM and llama.cpp take it
  }
  if (present(body, "min_p")) s.min_p = static_cast<float>(number(body, "min_p", 0, 1));
  if (present(body, "presence_penalty"))
    s.presence_penalty = static_cast<float>(number(body, "presence_penalty", -2, 2));
  if (present(body, "frequency_penalty"))
    s.frequency_penalty = static_cast<float>(number(body, "frequency_penalty", -2, 2));
  if (present(body, "repetition_penalty"))
    s.repetition_penalty = static_cast<float>(number(body, "repetition_penalty", 1e-3, 100));
  if (present(body, "seed")) s.seed = static_cast<std::uint64_t>(integer(body, "seed", INT64_MIN, INT64_MAX));
  try {
    s.validate();
  } catch (const Error& e) {
    bad_request(e.what(), "", "invalid_value");
  }
  r.options.sampling = s;

  if (present(body, "stop")) {
    const json& st = body.at("stop");
    if (st.is_string()) {
      r.options.stop.push_back(st.get<std::string>());
    } else if (st.is_array()) {
      if (st.size() > 4) bad_request("'stop' takes at most 4 strings", "stop", "invalid_value");
      for (const auto& x : st) {
        if (!x.is_string()) wrong_type("stop", "a string or an array of strings", x);
        r.options.stop.push_back(x.get<std::string>());
      }
    } else {
      wrong_type("stop", "a string or an array of strings", st);
    }
    for (const auto& x : r.options.stop)
      if (x.empty()) bad_request("'stop' strings must not be empty", "stop", "invalid_value");
  }
  return r;
}

}  // namespace qhx::serve
