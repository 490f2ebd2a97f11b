// Sessions on the tiny checkpoints transformers wrote (tests/reference): a
// conversation run through one Session must give, at every generated step,
// logits equal bit for bit to a fresh single run of the whole conversation so
// far (a second pipeline with the image cache off, so nothing is shared).
// Parity of those fresh runs with transformers is tests/python/test_session_parity.py.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/cpu/nn/kv_touch.hpp"
#include "qhexrt/error.hpp"
#include "qhexrt/session.hpp"
#include "runtime/manifest.hpp"
#include "test_support.hpp"

namespace qhx {
namespace {

std::filesystem::path checkpoint(const std::string& config) {
  return test::cache_dir() / "reference" / config / "checkpoint";
}
std::filesystem::path image(const char* name) { return test::cache_dir() / "reference" / "images" / name; }

Message user(std::vector<ContentPart> parts) { return {"user", std::move(parts)}; }
ContentPart text(std::string t) { return ContentPart::text_part(std::move(t)); }
ContentPart picture(const char* name) { return ContentPart::image_part(ImageSource::file(image(name))); }

GenerationOptions greedy(std::int64_t n = 6) {
  GenerationOptions o;
  o.max_new_tokens = n;
  SamplingParams s;
  s.greedy = true;
  o.sampling = s;
  o.keep_step_logits = true;
  return o;
}

// The three user turns of the conversation: images in turns 1 and 3.
std::vector<Message> user_turns() {
  return {user({picture("img256x320.png"), text("Describe the picture.")}),
          user({text("What colour is the largest shape?")}),
          user({picture("img300x200.png"), text("And in this one?")})};
}

class SessionTest : public ::testing::TestWithParam<std::string> {
 protected:
  static PipelineOptions no_cache() {
    PipelineOptions o;
    o.image_cache_mb = 0;
    return o;
  }
  SessionTest()
      : pipe_(Pipeline::open(checkpoint(GetParam()))),
        fresh_pipe_(Pipeline::open(checkpoint(GetParam()), no_cache())) {}

  // The same conversation answered from nothing.
  GenerationResult fresh(const std::vector<Message>& history, const GenerationOptions& o = greedy()) {
    Session s(fresh_pipe_);
    return s.respond(history, o);
  }

  static void expect_same(const GenerationResult& a, const GenerationResult& b, const std::string& what) {
    EXPECT_EQ(a.prompt_tokens, b.prompt_tokens) << what;
    EXPECT_EQ(a.tokens, b.tokens) << what;
    ASSERT_EQ(a.step_logits.size(), b.step_logits.size()) << what;
    EXPECT_TRUE(a.step_logits == b.step_logits) << what << ": step logits differ";
    EXPECT_FALSE(a.step_logits.empty()) << what;
  }

  Pipeline pipe_, fresh_pipe_;
};

TEST_P(SessionTest, ThreeTurnsWithImagesEqualFreshRunsBitForBit) {
  Session s(pipe_);
  std::int64_t previous_prompt = 0;
  int turn = 0;
  for (Message& m : user_turns()) {
    ++turn;
    const GenerationResult r = s.send(m, greedy());
    const std::vector<Message> history(s.messages().begin(), s.messages().end() - 1);  // without the answer
    expect_same(r, fresh(history), "turn " + std::to_string(turn));
    // Only the new turn was prefilled: everything the last request's prompt held was reused.
    EXPECT_GE(r.cached_tokens, previous_prompt) << "turn " << turn;
    EXPECT_LT(r.cached_tokens, static_cast<std::int64_t>(r.prompt_tokens.size()));
    EXPECT_EQ(r.timings.images_encoded, turn == 2 ? 0 : 1) << "turn " << turn << ": only the new image is encoded";
    previous_prompt = static_cast<std::int64_t>(r.prompt_tokens.size());
  }
  EXPECT_EQ(s.messages().size(), 6u);
  EXPECT_EQ(s.messages()[5].role, "assistant");
}

TEST_P(SessionTest, EditingTurnTwoRewindsTheCacheAndStillMatches) {
  Session s(pipe_);
  GenerationResult last;
  for (Message& m : user_turns()) last = s.send(m, greedy());
  std::vector<Message> edited(s.messages().begin(), s.messages().begin() + 5);  // u1 a1 u2 a2 u3
  edited[2] = user({text("Which shape is on the left?")});
  const GenerationResult r = s.respond(edited, greedy());
  const GenerationResult f = fresh(edited);
  expect_same(r, f, "edited turn 2");
  // The cache was rewound to where the edited prompt departs from the last one: inside turn 2.
  const auto departs = std::mismatch(f.prompt_tokens.begin(), f.prompt_tokens.end(), last.prompt_tokens.begin(),
                                     last.prompt_tokens.end())
                           .first -
                       f.prompt_tokens.begin();
  EXPECT_EQ(r.cached_tokens, departs);
  EXPECT_GT(r.cached_tokens, static_cast<std::int64_t>(fresh({edited[0]}).prompt_tokens.size()));
  EXPECT_EQ(r.timings.image_cache_hits, 1) << "image 2 comes from the feature cache";
  EXPECT_EQ(r.timings.images_encoded, 0);
}

TEST_P(SessionTest, CancelledAnswerLeavesTheSessionConsistent) {
  Session s(pipe_);
  const auto turns = user_turns();
  s.send(turns[0], greedy());
  GenerationOptions cancel = greedy(12);
  int pieces = 0;
  cancel.on_text = [&](std::string_view) {
    return ++pieces < 2;
  };
  const GenerationResult c = s.send(turns[1], cancel);
  EXPECT_EQ(c.stop_reason, "cancelled");
  EXPECT_LT(c.tokens.size(), 12u);
  EXPECT_EQ(s.messages().size(), 4u);  // the partial answer joined the conversation
  const GenerationResult r = s.send(turns[2], greedy());
  const std::vector<Message> history(s.messages().begin(), s.messages().end() - 1);
  expect_same(r, fresh(history), "turn after a cancelled answer");
}

TEST_P(SessionTest, UnreadableImageInTurnThreeKeepsTurnsOneAndTwo) {
  Session s(pipe_);
  const auto turns = user_turns();
  s.send(turns[0], greedy());
  s.send(turns[1], greedy());
  const auto before = s.messages();
  const std::int64_t cached = s.cached_tokens();
  test::TempDir dir;
  const auto bad = dir.write("broken.png", "\x89PNG\r\n\x1a\n not really");
  test::expect_error(
      [&] {
        s.send(user({ContentPart::image_part(ImageSource::file(bad)), text("Look.")}), greedy());
      },
      {"broken.png"});
  test::expect_error(
      [&] {
        s.send(user({ContentPart::image_part(ImageSource::file(dir.path() / "absent.png")), text("x")}), greedy());
      },
      {"absent.png"});
  ASSERT_EQ(s.messages().size(), before.size());
  EXPECT_EQ(s.cached_tokens(), cached);
  const GenerationResult r = s.send(turns[2], greedy());
  const std::vector<Message> history(s.messages().begin(), s.messages().end() - 1);
  expect_same(r, fresh(history), "turn 3 after the failed one");
}

TEST_P(SessionTest, SameImageInANewSessionSkipsTheVisionEncoder) {
  Session first(pipe_);
  const auto turns = user_turns();
  const GenerationResult a = first.send(turns[0], greedy());
  EXPECT_EQ(a.timings.images_encoded, 1);
  EXPECT_GT(a.timings.vision_ms, 0.0);
  Session second(pipe_);
  const GenerationResult b = second.send(turns[0], greedy());
  EXPECT_EQ(b.timings.images_encoded, 0);
  EXPECT_EQ(b.timings.image_cache_hits, 1);
  EXPECT_EQ(b.timings.vision_ms, 0.0);
  EXPECT_EQ(b.cached_tokens, 0);
  expect_same(a, b, "cache hit");
  // The same picture as encoded bytes in memory hits too (the key is the pixels).
  const std::string png = test::read_file(image("img256x320.png"));
  Session third(pipe_);
  const GenerationResult c = third.send(
      user({ContentPart::image_part(ImageSource::encoded({png.begin(), png.end()})), text("Describe the picture.")}),
      greedy());
  EXPECT_EQ(c.timings.image_cache_hits, 1);
  expect_same(a, c, "image from memory");
  const auto stats = pipe_.image_cache_stats();
  EXPECT_EQ(stats.entries, 1);
  EXPECT_GE(stats.hits, 2);
}

TEST_P(SessionTest, StopStringEndsTheAnswerBeforeIt) {
  Session s(pipe_);
  const GenerationResult full = s.send(Message::text("user", "Count to ten."), greedy(16));
  ASSERT_GE(full.text.size(), 4u) << "the tiny model should say something";
  const std::string stop = full.text.substr(full.text.size() / 2, 2);
  GenerationOptions o = greedy(16);
  o.stop = {stop};
  std::string streamed;
  o.on_text = [&](std::string_view t) {
    streamed += t;
    return true;
  };
  Session t(pipe_);
  const GenerationResult r = t.send(Message::text("user", "Count to ten."), o);
  EXPECT_EQ(r.stop_reason, "stop_string");
  EXPECT_EQ(r.text, full.text.substr(0, full.text.find(stop)));
  EXPECT_EQ(streamed, r.text);
}

TEST_P(SessionTest, ConversationLongerThanTheContextIsRefusedAndNothingIsLost) {
  Session s(pipe_);
  s.send(Message::text("user", "Hello."), greedy());
  const auto before = s.messages();
  std::string huge;
  for (int i = 0; i < 5000; ++i) huge += "word ";
  test::expect_error([&] { s.send(Message::text("user", huge), greedy()); }, {"does not fit the context"});
  EXPECT_EQ(s.messages().size(), before.size());
  const GenerationResult r = s.send(Message::text("user", "Again."), greedy());
  const std::vector<Message> history(s.messages().begin(), s.messages().end() - 1);
  expect_same(r, fresh(history), "after the refused turn");
}

TEST_P(SessionTest, ResentHistoryOfAStatelessClientReusesTheCache) {
  Session s(pipe_);
  const GenerationResult a = s.send(Message::text("user", "Name a colour."), greedy());
  std::vector<Message> resent = s.messages();
  resent.push_back(Message::text("user", "Another one."));
  const GenerationResult b = s.respond(resent, greedy());
  EXPECT_GE(b.cached_tokens, static_cast<std::int64_t>(a.prompt_tokens.size()));
  expect_same(b, fresh(resent), "resent history");
  // The exact same request again: all but the last prompt token come from the cache.
  const GenerationResult c = s.respond(resent, greedy());
  EXPECT_EQ(c.cached_tokens, static_cast<std::int64_t>(c.prompt_tokens.size()) - 1);
  expect_same(c, b, "repeated request");
}

TEST_P(SessionTest, BadConversationsAreRefused) {
  Session s(pipe_);
  test::expect_error([&] { s.respond({}, greedy()); }, {"no messages"});
  test::expect_error([&] { s.respond({Message::text("assistant", "hi")}, greedy()); },
                     {"must end with a user message"});
  test::expect_error(
      [&] {
        s.respond({Message::text("robot", "x"), Message::text("user", "y")}, greedy());
      },
      {"role \"robot\""});
  EXPECT_TRUE(s.messages().empty());
  EXPECT_EQ(s.cached_tokens(), 0);
}

// The default plan with the language model as the block contract's CPU reference kind:
// a prefill graph of `prefill_block` tokens and a decode graph of one, over a context of 600.
nlohmann::json block_plan(const std::string& cfg, std::int64_t prefill_block) {
  nlohmann::json plan = default_manifest_for_hf_dir(checkpoint(cfg)).json;
  plan["context_length"] = 600;
  nlohmann::json llm = plan["graphs"]["llm"];
  llm["kind"] = "qwen3vl.text_decoder_ar";
  plan["graphs"]["llm_prefill"] = llm;
  plan["graphs"]["llm_prefill"]["block"] = prefill_block;
  plan["graphs"]["llm_decode"] = llm;
  plan["graphs"]["llm_decode"]["block"] = 1;
  plan["graphs"].erase("llm");
  for (auto& st : plan["stages"]) {
    if (st["op"] == "prefill") st["graph"] = "llm_prefill";
    if (st["op"] == "decode") st["graph"] = "llm_decode";
  }
  return plan;
}

// The NPU graphs' contract (a fixed block over a host-kept KV cache, host mask
// and rope tables), run by its CPU reference kind: the same stages drive it,
// padding the last block, and every turn equals the state graph's bit for bit.
TEST_P(SessionTest, BlockContractGraphsEqualTheStateGraph) {
  test::TempDir dir;
  const nlohmann::json plan = block_plan(GetParam(), 7);  // prompts are not multiples of 7: the last block is padded
  Pipeline block = Pipeline::open(dir.write("block.json", plan.dump()));
  Session a(pipe_), b(block);
  int turn = 0;
  for (Message& m : user_turns()) {
    ++turn;
    const GenerationResult x = a.send(m, greedy());
    const GenerationResult y = b.send(m, greedy());
    expect_same(x, y, "block contract, turn " + std::to_string(turn));
    EXPECT_EQ(x.cached_tokens, y.cached_tokens);
  }
}

// A prefill block graph whose past input is short (a block of 590 in a context of 600
// leaves room for 10 past rows): from the second turn on the prompt starts past that room,
// and the prefill stage's tail graph (the decode graph) takes it token by token. Without a
// tail graph the same turn is refused, naming the limit.
TEST_P(SessionTest, PromptPastTheBlockGraphsRoomGoesThroughTheTailGraph) {
  test::TempDir dir;
  nlohmann::json plan = block_plan(GetParam(), 590);
  const auto no_tail = dir.write("no_tail.json", plan.dump());
  for (auto& st : plan["stages"])
    if (st["op"] == "prefill") st["tail_graph"] = "llm_decode";
  Pipeline block = Pipeline::open(dir.write("tail.json", plan.dump()));
  Session a(pipe_), b(block);
  int turn = 0;
  for (Message& m : user_turns()) {
    ++turn;
    const GenerationResult x = a.send(m, greedy());
    const GenerationResult y = b.send(m, greedy());
    expect_same(x, y, "tail graph, turn " + std::to_string(turn));
  }
  Pipeline refusing = Pipeline::open(no_tail);
  Session c(refusing);
  auto turns = user_turns();
  (void)c.send(turns[0], greedy());
  test::expect_error([&] { c.send(turns[1], greedy()); }, {"llm_prefill", "room for a past of 10"});
}

INSTANTIATE_TEST_SUITE_P(TinyConfigs, SessionTest, ::testing::Values("tiny_a", "tiny_b"));

TEST(Session, ImageForATextOnlyPlanIsRefused) {
  test::TempDir dir;
  nlohmann::json plan = default_manifest_for_hf_dir(checkpoint("tiny_a")).json;
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& st : plan["stages"])
    if (st["op"] != "load_images" && st["op"] != "patch_embed" && st["op"] != "vision") stages.push_back(st);
  plan["stages"] = stages;
  plan["graphs"].erase("vision");
  const auto path = dir.write("text.json", plan.dump());
  Pipeline pipe = Pipeline::open(path);
  EXPECT_FALSE(pipe.takes_images());
  Session s(pipe);
  test::expect_error(
      [&] {
        s.send(user({picture("img256x320.png"), text("What is it?")}), greedy());
      },
      {"no image stages", "cannot take an image"});
  EXPECT_TRUE(s.messages().empty());
}

// A checkpoint directory like tiny_a's, with another chat template in chat_template.jinja.
std::filesystem::path checkpoint_with_template(const test::TempDir& dir, const std::string& jinja) {
  const auto src = checkpoint("tiny_a");
  for (const auto& e : std::filesystem::directory_iterator(src)) {
    const auto name = e.path().filename().string();
    if (name == "chat_template.json" || name == "tokenizer_config.json") continue;  // they would take precedence
    std::filesystem::create_symlink(e.path(), dir.path() / name);
  }
  dir.write("chat_template.jinja", jinja);
  return dir.path();
}

TEST(Session, ThinkingTemplateOpensWithThinkAndReturnsTheReasoningApart) {
  test::TempDir dir;
  const std::string tmpl =
      test::read_file(std::filesystem::path(QHX_DEFAULT_TEST_DATA) / "chat_templates" / "qwen3vl_thinking.jinja");
  Pipeline pipe = Pipeline::open(checkpoint_with_template(dir, tmpl));
  const Tokenizer& tok = pipe.tokenizer();
  GenerationOptions o = greedy(32);
  const std::vector<std::int32_t> said = tok.encode("The picture is dark.\n</think>\n\nIt is dark.");
  o.forced_tokens = said;
  o.forced_tokens.push_back(*tok.token_to_id("<|im_end|>"));
  Session s(pipe);
  const GenerationResult r = s.send(Message::text("user", "Is it dark?"), o);
  // The Thinking generation prompt: the prompt ends "<|im_start|>assistant\n<think>\n".
  const auto tail = tok.encode("<|im_start|>assistant\n<think>\n");
  ASSERT_GE(r.prompt_tokens.size(), tail.size());
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), r.prompt_tokens.end() - static_cast<std::ptrdiff_t>(tail.size())));
  EXPECT_EQ(r.stop_reason, "stop_token");
  EXPECT_EQ(r.reasoning, "The picture is dark.");
  EXPECT_EQ(r.text, "It is dark.");
  // The next turn renders the history through the same template (which drops past reasoning).
  const GenerationResult next = s.send(Message::text("user", "Why?"), greedy(2));
  EXPECT_EQ(next.prompt_tokens,
            tok.encode("<|im_start|>user\nIs it dark?<|im_end|>\n<|im_start|>assistant\nIt is dark.<|im_end|>\n"
                       "<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n<think>\n"));
}

TEST(Session, UnsupportedTemplateConstructIsNamedWhenThePlanOpens) {
  test::TempDir dir;
  const auto ckpt = checkpoint_with_template(dir, "{% for m in messages %}\n{% include 'turn.jinja' %}{% endfor %}");
  test::expect_error([&] { Pipeline::open(ckpt); },
                     {"chat_template", "chat_template.jinja:2:", "unsupported Jinja construct 'include'"});
}

// The KV cache's pages are faulted in ahead of the writes, one region's row per token
// (nn/kv_touch.hpp), and the cache's bytes stay as they were.
TEST(KvTouch, FaultsInTheRowAheadOfEachTokenInTurnAndChangesNoByte) {
  const auto page = static_cast<std::int64_t>(::sysconf(_SC_PAGESIZE));
  const std::int64_t regions = 3, ctx = 64, ahead = 8;  // a row a page: residency tells which rows were touched
  const auto bytes = static_cast<std::size_t>(regions * ctx * page);
  void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  ::madvise(map, bytes, MADV_NOHUGEPAGE);
  const nn::KvRegions kv{static_cast<std::byte*>(map), regions, ctx, page};
  nn::touch_ahead(kv, 10, 5, ahead);  // tokens 10..14: region t mod 3, row t + 8
  std::vector<unsigned char> resident(static_cast<std::size_t>(regions * ctx));
  ASSERT_EQ(::mincore(map, bytes, resident.data()), 0);
  for (std::int64_t r = 0; r < regions; ++r)
    for (std::int64_t row = 0; row < ctx; ++row) {
      const bool want = row >= 18 && row <= 22 && (row - ahead) % regions == r;
      EXPECT_EQ((resident[static_cast<std::size_t>(r * ctx + row)] & 1) != 0, want) << "region " << r << " row " << row;
    }
  // Rows past the context are left alone; what was there stays (the tests' NaN poison included).
  std::memset(map, 0xA5, bytes);
  static_cast<std::byte*>(map)[(2 * ctx + 63) * page] = std::byte{0x7F};
  nn::touch_ahead(kv, 50, 14, ahead);  // rows 58..71: 58..63 exist, the rest are past ctx
  EXPECT_EQ(static_cast<std::byte*>(map)[(2 * ctx + 63) * page], std::byte{0x7F});
  const auto* b = static_cast<const unsigned char*>(map);
  EXPECT_EQ(std::count(b, b + bytes, 0xA5), static_cast<std::ptrdiff_t>(bytes) - 1);
  ::munmap(map, bytes);
}

TEST(Messages, ParsesStringsAndParts) {
  const auto m = parse_messages(
      R"([{"role":"system","content":"Be brief."},
          {"role":"user","content":[{"type":"image","path":"a.png"},{"type":"text","text":"What?"}]}])",
      "conv.json", "/base");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].role, "system");
  ASSERT_EQ(m[0].content.size(), 1u);
  EXPECT_EQ(m[0].content[0].text, "Be brief.");
  ASSERT_EQ(m[1].content.size(), 2u);
  EXPECT_EQ(m[1].content[0].kind, ContentPart::Kind::Image);
  EXPECT_EQ(m[1].content[0].image.path, std::filesystem::path("/base/a.png"));
  EXPECT_EQ(m[1].content[1].text, "What?");
}

TEST(Messages, BadFilesNameTheElement) {
  auto parse = [](const char* j) {
    return parse_messages(j, "conv.json", ".");
  };
  test::expect_error([&] { parse("{\"role\":\"user\"}"); }, {"conv.json", "JSON array of messages"});
  test::expect_error([&] { parse("[1]"); }, {"conv.json: [0]", "must be an object"});
  test::expect_error([&] { parse("[{\"role\":\"user\"}]"); }, {"[0].content: missing"});
  test::expect_error([&] { parse("[{\"role\":\"user\",\"content\":5}]"); }, {"[0].content", "string or a list"});
  test::expect_error([&] { parse("[{\"role\":\"bot\",\"content\":\"x\"}]"); }, {"[0].role", "\"bot\""});
  test::expect_error([&] { parse("[{\"role\":\"user\",\"content\":[{\"type\":\"audio\"}]}]"); },
                     {"[0].content[0].type", "\"audio\""});
  test::expect_error([&] { parse("[{\"role\":\"user\",\"content\":[{\"type\":\"image\"}]}]"); },
                     {"[0].content[0].path"});
  test::expect_error([&] { parse("[]"); }, {"no messages"});
  test::expect_error([&] { parse("[{"); }, {"conv.json", "not JSON"});
  // A number past double's range is nlohmann's out_of_range, not parse_error (fuzz_manifest's finding).
  test::expect_error([&] { parse("[{\"role\":\"user\",\"content\":\"x\",\"n\":-1e400}]"); },
                     {"conv.json", "not JSON", "number overflow"});
}

}  // namespace
}  // namespace qhx
