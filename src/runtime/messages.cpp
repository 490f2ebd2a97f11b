// Conversations: messages, their parts and images, and the JSON form a
// --messages file (or an HTTP client) gives them in.
#include <nlohmann/json.hpp>

#include "common/json_limits.hpp"
#include "qhexrt/error.hpp"
#include "qhexrt/session.hpp"
#include "runtime/run_context.hpp"

namespace qhx {

ImageSource ImageSource::file(std::filesystem::path path) {
  ImageSource s;
  s.path = std::move(path);
  return s;
}

ImageSource ImageSource::encoded(std::vector<std::uint8_t> bytes, std::string label) {
  ImageSource s;
  s.bytes = std::move(bytes);
  s.label = std::move(label);
  return s;
}

std::string ImageSource::name() const {
  if (!label.empty()) return label;
  return bytes.empty() ? path.string() : "image in memory";
}

ContentPart ContentPart::text_part(std::string text) {
  ContentPart p;
  p.text = std::move(text);
  return p;
}

ContentPart ContentPart::image_part(ImageSource image) {
  ContentPart p;
  p.kind = Kind::Image;
  p.image = std::move(image);
  return p;
}

Message Message::text(std::string role, std::string text) {
  return {std::move(role), {ContentPart::text_part(std::move(text))}};
}

std::vector<const ImageSource*> TurnInput::images() const {
  std::vector<const ImageSource*> out;
  if (raw) {
    for (const auto& im : raw_images) out.push_back(&im);
    return out;
  }
  for (const Message& m : *messages)
    for (const ContentPart& p : m.content)
      if (p.kind == ContentPart::Kind::Image) out.push_back(&p.image);
  return out;
}

namespace {

ContentPart parse_part(const nlohmann::json& j, const std::string& where, const std::filesystem::path& base) {
  if (!j.is_object()) fail(where, ": a content part must be an object {\"type\": ...}");
  const auto type = j.find("type");
  if (type == j.end() || !type->is_string()) fail(where, ".type: missing (\"text\" or \"image\")");
  if (*type == "text") {
    const auto text = j.find("text");
    if (text == j.end() || !text->is_string()) fail(where, ".text: missing or not a string");
    return ContentPart::text_part(text->get<std::string>());
  }
  if (*type == "image") {
    const auto path = j.find("path");
    if (path == j.end() || !path->is_string() || path->get<std::string>().empty())
      fail(where, ".path: missing or not a string (an image part names its file)");
    std::filesystem::path p = path->get<std::string>();
    if (p.is_relative()) p = base / p;
    ImageSource image = ImageSource::file(p);
    image.label = cat(p.string(), " (", where, ")");  // errors about the image say where it is in the conversation
    return ContentPart::image_part(std::move(image));
  }
  fail(where, ".type: \"", type->get<std::string>(), "\" is not a supported part (\"text\" or \"image\")");
}

}  // namespace

std::vector<Message> parse_messages(std::string_view json_text, const std::string& source,
                                    const std::filesystem::path& base) {
  check_json_depth(json_text, source);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number past double
    fail(source, ": not JSON (", e.what(), ")");
  }
  if (!doc.is_array()) fail(source, ": expected a JSON array of messages [{\"role\": ..., \"content\": ...}]");
  if (doc.empty()) fail(source, ": the conversation has no messages");
  std::vector<Message> out;
  for (std::size_t i = 0; i < doc.size(); ++i) {
    const std::string where = cat(source, ": [", i, "]");
    const auto& m = doc[i];
    if (!m.is_object()) fail(where, ": a message must be an object {\"role\": ..., \"content\": ...}");
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string()) fail(where, ".role: missing or not a string");
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant")
      fail(where, ".role: \"", r, "\" is not one of \"system\", \"user\", \"assistant\"");
    const auto content = m.find("content");
    if (content == m.end()) fail(where, ".content: missing");
    Message msg{r, {}};
    if (content->is_string()) {
      msg.content.push_back(ContentPart::text_part(content->get<std::string>()));
    } else if (content->is_array()) {
      for (std::size_t k = 0; k < content->size(); ++k)
        msg.content.push_back(parse_part((*content)[k], cat(where, ".content[", k, "]"), base));
    } else {
      fail(where, ".content: expected a string or a list of parts");
    }
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace qhx
