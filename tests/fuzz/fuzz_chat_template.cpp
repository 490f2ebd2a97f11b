// The chat-template renderer on arbitrary conversations: the Qwen3-VL Instruct
// template (the tiny checkpoint's, as a checkpoint directory supplies it), the
// Thinking-style one of the parity tests and the Qwen3 text template of the real
// tokenizer package, each rendered by the Jinja engine.
//
// Structured inputs are message lists as every entry point delivers them (roles
// system/user/assistant, valid UTF-8 text, image parts); for those the Instruct
// template must also agree with the built-in renderer that "chat_template":
// "qwen3vl" plans use. JSON inputs go through parse_messages (the --messages
// file) and, unvalidated, straight into the template's context.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/utf8.hpp"
#include "fuzz_support.hpp"
#include "qhexrt/chat_template.hpp"
#include "qhexrt/session.hpp"
#include "qwen3vl/chat_template.hpp"

namespace {

std::vector<qhx::ChatTemplate> g_templates;  // [0] is the Instruct template

std::string builtin_render(const std::vector<qhx::Message>& messages, bool gen) {
  std::vector<qhx::qwen3vl::ChatMessage> out;
  for (const auto& m : messages) {
    qhx::qwen3vl::ChatMessage cm{m.role, {}};
    for (const auto& p : m.content)
      cm.content.push_back(p.kind == qhx::ContentPart::Kind::Image
                               ? qhx::qwen3vl::ContentItem{qhx::qwen3vl::ContentItem::Kind::Image, ""}
                               : qhx::qwen3vl::ContentItem{qhx::qwen3vl::ContentItem::Kind::Text, p.text});
    out.push_back(std::move(cm));
  }
  return qhx::qwen3vl::render_chat(out, gen);
}

void render_all(const std::vector<qhx::Message>& messages, bool gen) {
  for (std::size_t i = 0; i < g_templates.size(); ++i) {
    qhx::fuzz::expect_only_qhx_errors([&] {
      const std::string text = g_templates[i].render(messages, gen);
      if (i == 0) QHX_FUZZ_CHECK(text == builtin_render(messages, gen));
    });
  }
}

std::vector<qhx::Message> decode_messages(FuzzedDataProvider& fdp) {
  static const char* const kRoles[] = {"system", "user", "assistant"};
  std::vector<qhx::Message> out(fdp.ConsumeIntegralInRange<std::size_t>(1, 8));
  for (auto& m : out) {
    m.role = kRoles[fdp.ConsumeIntegralInRange(0, 2)];
    const auto parts = fdp.ConsumeIntegralInRange(0, 4);
    for (int k = 0; k < parts; ++k) {
      if (fdp.ConsumeBool())
        m.content.push_back(qhx::ContentPart::image_part(qhx::ImageSource::file("x.png")));
      else
        m.content.push_back(qhx::ContentPart::text_part(qhx::utf8::to_valid_lossy(fdp.ConsumeRandomLengthString(256))));
    }
  }
  return out;
}

qhx::ChatTemplate load_or_die(const std::filesystem::path& p) {
  try {
    return qhx::ChatTemplate::load(p);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_chat_template: %s (the tiny checkpoint and the tokenizer come from scripts/test.sh)\n",
                 e.what());
    std::exit(1);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const auto cache = qhx::fuzz::cache_dir();
  g_templates.push_back(load_or_die(cache / "reference" / "tiny_a" / "checkpoint"));
  g_templates.push_back(
      load_or_die(std::filesystem::path(QHX_FUZZ_TEST_DATA) / "chat_templates" / "qwen3vl_thinking.jinja"));
  g_templates.push_back(load_or_die(qhx::fuzz::tokenizer_json().parent_path() / "tokenizer_config.json"));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider fdp(data, size);
  const auto mode = fdp.ConsumeIntegral<std::uint8_t>();
  const bool gen = (mode & 1) != 0;
  if ((mode & 0x80) == 0) {
    render_all(decode_messages(fdp), gen);
    return 0;
  }
  const std::string json = fdp.ConsumeRemainingBytesAsString();
  std::optional<std::vector<qhx::Message>> parsed;
  qhx::fuzz::expect_only_qhx_errors([&] { parsed = qhx::parse_messages(json, "messages.json", "/nonexistent"); });
  if (parsed) render_all(*parsed, gen);
  const std::string context = std::string(R"({"messages": )") + json + R"(, "tools": null, "add_generation_prompt": )" +
                              (gen ? "true}" : "false}");
  for (const auto& t : g_templates) qhx::fuzz::expect_only_qhx_errors([&] { (void)t.render_json(context); });
  return 0;
}
