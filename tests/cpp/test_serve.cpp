// qhx_serve's pure parts (tools/serve): the chat request parser, base64 and the key
// comparison, the error JSON, the response objects and /metrics. The HTTP side is
// tested end to end by tests/python/test_serve.py.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "serve/crypto.hpp"
#include "serve/errors.hpp"
#include "serve/metrics.hpp"
#include "serve/request.hpp"
#include "serve/response.hpp"

namespace {

using nlohmann::json;
using qhx::serve::ApiException;
using qhx::serve::parse_chat_request;

const qhx::serve::RequestLimits kLimits{std::nullopt, 2, 4096};

qhx::serve::ChatRequest parse(const json& body) {
  return parse_chat_request(body.dump(), qhx::SamplingParams{}, kLimits);
}

// The ApiError a body raises (the test fails if it parses).
qhx::serve::ApiError error_of(const std::string& body) {
  try {
    parse_chat_request(body, qhx::SamplingParams{}, kLimits);
  } catch (const ApiException& e) {
    return e.error;
  }
  ADD_FAILURE() << "parsed: " << body;
  return {};
}

// "data:image/png;base64," + the PNG signature and a few bytes, base64.
const std::string kPngUrl = "data:image/png;base64,iVBORw0KGgoAAAAN";

TEST(ServeRequest, TextAndImagePartsBecomeMessages) {
  const auto r = parse({{"messages",
                         {{{"role", "system"}, {"content", "Be brief."}},
                          {{"role", "user"},
                           {"content",
                            {{{"type", "image_url"}, {"image_url", {{"url", kPngUrl}}}},
                             {{"type", "text"}, {"text", "What is it?"}}}}}}},
                        {"stream", true},
                        {"stream_options", {{"include_usage", true}}},
                        {"max_completion_tokens", 12},
                        {"temperature", 0},
                        {"stop", "END"}});
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  ASSERT_EQ(r.messages[1].content.size(), 2u);
  EXPECT_EQ(r.messages[1].content[0].kind, qhx::ContentPart::Kind::Image);
  EXPECT_EQ(r.messages[1].content[0].image.bytes.size(), 12u);
  EXPECT_EQ(r.messages[1].content[1].text, "What is it?");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.images, 1);
  EXPECT_EQ(r.options.max_new_tokens, 12);
  ASSERT_TRUE(r.options.sampling);
  EXPECT_TRUE(r.options.sampling->greedy);
  EXPECT_EQ(r.options.stop, std::vector<std::string>{"END"});
}

TEST(ServeRequest, SamplingFieldsOverrideTheDefaults) {
  const auto r = parse({{"messages", {{{"role", "user"}, {"content", "x"}}}},
                        {"temperature", 0.5},
                        {"top_p", 0.9},
                        {"top_k", 20},
                        {"min_p", 0.05},
                        {"presence_penalty", 0.25},
                        {"repetition_penalty", 1.1},
                        {"frequency_penalty", -0.5},
                        {"seed", 7},
                        {"n", 1}});
  const auto& s = *r.options.sampling;
  EXPECT_FALSE(s.greedy);
  EXPECT_FLOAT_EQ(s.temperature, 0.5f);
  EXPECT_FLOAT_EQ(s.top_p, 0.9f);
  EXPECT_EQ(s.top_k, 20);
  EXPECT_FLOAT_EQ(s.min_p, 0.05f);
  EXPECT_FLOAT_EQ(s.presence_penalty, 0.25f);
  EXPECT_FLOAT_EQ(s.repetition_penalty, 1.1f);
  EXPECT_FLOAT_EQ(s.frequency_penalty, -0.5f);
  EXPECT_EQ(s.seed, 7u);
  EXPECT_FALSE(r.options.max_new_tokens);
}

TEST(ServeRequest, BadRequestsNameTheField) {
  struct Case {
    std::string body, code, param;
  };
  const std::vector<Case> cases = {
      {"{", "invalid_json", ""},
      {"[]", "invalid_type", ""},
      {R"({"messages": []})", "empty_array", "messages"},
      {R"({"messages": [{"role": "user", "content": 3}]})", "invalid_type", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "video"}]}]})", "unsupported_content_type",
       "messages[0].content[0].type"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@"}}]}]})",
       "invalid_base64", "messages[0].content[0].image_url.url"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}}]}]})",
       "invalid_image", "messages[0].content[0].image_url.url"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]})",
       "remote_image_refused", "messages[0].content[0].image_url.url"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]}]})",
       "file_url_refused", "messages[0].content[0].image_url.url"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 3})", "unsupported_value", "n"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 5000})", "invalid_value", "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_p": 0})", "invalid_value", "top_p"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": ["a", 1]})", "invalid_type", "stop"},
      {R"({"messages": [{"role": "user", "content": "x"}], "frequency_penalty": 2.5})", "invalid_value",
       "frequency_penalty"},
      {R"({"messages": [{"role": "user", "content": "x"}], "frequency_penalty": "1"})", "invalid_type",
       "frequency_penalty"},
      {R"({"messages": [{"role": "assistant", "content": "x"}]})", "invalid_value", "messages[0].role"},
  };
  for (const auto& c : cases) {
    const auto e = error_of(c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.code, c.code) << c.body << ": " << e.message;
    EXPECT_EQ(e.param, c.param) << c.body << ": " << e.message;
    EXPECT_FALSE(e.message.empty());
  }
}

TEST(ServeRequest, TooManyImages) {
  json part = {{"type", "image_url"}, {"image_url", {{"url", kPngUrl}}}};
  const auto e = error_of(json({{"messages", {{{"role", "user"}, {"content", {part, part, part}}}}}}).dump());
  EXPECT_EQ(e.code, "too_many_images");
}

TEST(ServeRequest, JsonNestedTooDeep) {
  // limits::kJsonDepth (64), docs/limits.md: refused before the body becomes a tree.
  const std::string deep = std::string(65, '[') + std::string(65, ']');
  const auto e = error_of("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\", \"x\": " + deep + "}]}");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "invalid_json");
  EXPECT_NE(e.message.find("limits::kJsonDepth"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("the request body"), std::string::npos) << e.message;
}

TEST(ServeRequest, SniffsTheImageFormats) {
  using qhx::serve::sniff_image;
  EXPECT_EQ(sniff_image({0xFF, 0xD8, 0xFF, 0xE0}), "jpeg");
  EXPECT_EQ(sniff_image({0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'}), "png");
  EXPECT_EQ(sniff_image({'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'E', 'B', 'P'}), "webp");
  EXPECT_EQ(sniff_image({'P', '6', '\n'}), "ppm");
  EXPECT_EQ(sniff_image({'G', 'I', 'F', '8', '9', 'a'}), "");
  EXPECT_EQ(sniff_image({}), "");
}

TEST(ServeCrypto, Base64) {
  using qhx::serve::base64_decode;
  const auto hello = base64_decode("aGVsbG8gd29ybGQ=");
  ASSERT_TRUE(hello);
  EXPECT_EQ(std::string(hello->begin(), hello->end()), "hello world");
  const auto wrapped = base64_decode("aGVs\nbG8=");
  ASSERT_TRUE(wrapped);
  EXPECT_EQ(std::string(wrapped->begin(), wrapped->end()), "hello");
  EXPECT_FALSE(base64_decode("a$b%"));
  EXPECT_FALSE(base64_decode("aGVsbG8=aGVs"));  // data after the padding
}

TEST(ServeCrypto, SecretsEqual) {
  EXPECT_TRUE(qhx::serve::secrets_equal("key-1", "key-1"));
  EXPECT_FALSE(qhx::serve::secrets_equal("key-1", "key-2"));
  EXPECT_FALSE(qhx::serve::secrets_equal("key-1", "key-10"));
  EXPECT_FALSE(qhx::serve::secrets_equal("", "x"));
}

TEST(ServeErrors, OpenAiShape) {
  const json j = qhx::serve::ApiError{401, "incorrect API key", "", "invalid_api_key"}.to_json();
  EXPECT_EQ(j.at("error").at("type"), "authentication_error");
  EXPECT_TRUE(j.at("error").at("param").is_null());
  EXPECT_EQ(j.at("error").at("code"), "invalid_api_key");
  const qhx::serve::ApiError busy{503, "busy", "", ""}, bad{400, "x", "", ""};
  EXPECT_EQ(busy.to_json().at("error").at("type"), "server_error");
  EXPECT_TRUE(bad.to_json().at("error").at("code").is_null());
}

TEST(ServeResponse, CompletionAndChunks) {
  qhx::GenerationResult r;
  r.prompt_tokens = {1, 2, 3, 4};
  r.tokens = {5, 6};
  r.text = "hi";
  r.stop_reason = "max_new_tokens";
  r.cached_tokens = 3;
  r.timings.prefill_ms = 2;
  r.timings.decode_ms_per_token = 4;
  r.timings.decode_steps = 1;
  const qhx::serve::Completion c{"chatcmpl-1", 1700000000, "m"};
  const json j = qhx::serve::completion_json(c, r, 1.5);
  EXPECT_EQ(j.at("object"), "chat.completion");
  EXPECT_EQ(j.at("choices")[0].at("finish_reason"), "length");
  EXPECT_EQ(j.at("choices")[0].at("message").at("content"), "hi");
  EXPECT_EQ(j.at("usage").at("prompt_tokens"), 4);
  EXPECT_EQ(j.at("usage").at("completion_tokens"), 2);
  EXPECT_EQ(j.at("usage").at("prompt_tokens_details").at("cached_tokens"), 3);
  EXPECT_DOUBLE_EQ(j.at("usage").at("timings").at("decode_per_second").get<double>(), 250.0);
  EXPECT_DOUBLE_EQ(j.at("usage").at("timings").at("prompt_per_second").get<double>(), 500.0);
  const json chunk = qhx::serve::chunk_json(c, {{"content", "x"}});
  EXPECT_TRUE(chunk.at("choices")[0].at("finish_reason").is_null());
  EXPECT_EQ(qhx::serve::sse(chunk).rfind("data: {", 0), 0u);
  EXPECT_EQ(qhx::serve::sse_data("[DONE]"), "data: [DONE]\n\n");
  EXPECT_TRUE(qhx::serve::usage_chunk_json(c, r, 0).at("choices").empty());
}

TEST(ServeMetrics, PrometheusText) {
  qhx::serve::Metrics m;
  m.response("/v1/chat/completions", 200);
  m.response("/v1/chat/completions", 400);
  m.response("other", 404);
  m.completion(10, 6, 3, false);
  m.rejected_queue_full();
  const std::string t = m.render(2, true, qhx::ImageCacheStats{4, 1, 1, 100, 1000});
  EXPECT_NE(t.find("qhx_http_requests_total{route=\"/v1/chat/completions\",status=\"200\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("qhx_http_errors_total{status=\"400\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("qhx_http_errors_total{status=\"404\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("qhx_prompt_cached_tokens_total 6\n"), std::string::npos);
  EXPECT_NE(t.find("qhx_queue_depth 2\n"), std::string::npos);
  EXPECT_NE(t.find("qhx_queue_full_total 1\n"), std::string::npos);
  EXPECT_NE(t.find("qhx_image_cache_hits_total 4\n"), std::string::npos);
  EXPECT_NE(t.find("# TYPE qhx_queue_depth gauge\n"), std::string::npos);
}

}  // namespace
