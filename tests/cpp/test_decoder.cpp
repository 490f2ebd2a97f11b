// The KV manager, the two decoder contracts and the stages that drive them, against fake
// delegates (a backend "fake" this file registers): no model arithmetic, so every
// expectation below follows from the contracts alone.
//
// The fake language models write each token's embedding as its key and value, and report in
// hidden[t][0] which sequence index the row is, as they see it: a state graph from its `start`
// input, a block graph by counting the mask's open columns (start past rows plus r + 1 block
// rows). Both check that the past they are handed holds exactly the rows they wrote for that
// conversation, so a lost, shared or misplaced KV cache throws. The fake lm-head turns row p
// into logits whose argmax is token (7p + 3) mod V, so greedy decoding's tokens name the
// positions the stages ran.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/delegate.hpp"
#include "models/model_family.hpp"
#include "qhexrt/error.hpp"
#include "qhexrt/hf_config.hpp"
#include "qhexrt/safetensors.hpp"
#include "qhexrt/session.hpp"
#include "runtime/decoder.hpp"
#include "common/half.hpp"
#include "runtime/kv_manager.hpp"
#include "runtime/manifest.hpp"
#include "runtime/run_context.hpp"
#include "test_support.hpp"

namespace qhx {
namespace {

// --- fake graphs ---------------------------------------------------------------------------

struct Call {
  std::int64_t tokens, start;
  bool operator==(const Call&) const = default;
};
std::vector<Call>& calls() {
  static std::vector<Call> c;
  return c;
}

std::int64_t spec_int(const GraphBlob& b, const char* key) { return b.spec.at(key).get<std::int64_t>(); }

// The rows a conversation's cache must hold: by the address of its key buffer.
std::map<const void*, std::vector<std::vector<float>>>& written() {
  static std::map<const void*, std::vector<std::vector<float>>> w;
  return w;
}

// Checks that cache rows [0, n) (row floats each, at `rows`) are what was written there.
void check_past(const void* key, const float* rows, std::int64_t n, std::int64_t row) {
  const auto& w = written()[key];
  if (static_cast<std::int64_t>(w.size()) < n)
    fail("fake: the past holds ", n, " rows, but ", w.size(), " were written");
  for (std::int64_t j = 0; j < n; ++j)
    if (std::memcmp(w[static_cast<std::size_t>(j)].data(), rows + j * row, static_cast<std::size_t>(row) * 4) != 0)
      fail("fake: past row ", j, " is not the row written there");
}

void record(const void* key, std::int64_t start, const float* embeds, std::int64_t T, std::int64_t H) {
  auto& w = written()[key];
  w.resize(static_cast<std::size_t>(start));  // a rewound conversation rewrites from start
  for (std::int64_t t = 0; t < T; ++t) w.emplace_back(embeds + t * H, embeds + (t + 1) * H);
}

class FakeStateLm final : public Delegate {
 public:
  void init(const GraphBlob& b) override {
    H_ = spec_int(b, "hidden");
    ctx_ = b.context_length;
  }
  std::vector<IoSpec> input_specs() const override {
    return {{"embeds", DType::F32, {-1, H_}},
            {"positions", DType::I32, {3, -1}},
            {"start", DType::I64, {1}},
            {"cache", DType::F32, {ctx_, H_}, IoRole::State},
            {"deepstack", DType::F32, {-1, -1, H_}},
            {"image_mask", DType::U8, {-1}}};
  }
  std::vector<IoSpec> output_specs() const override { return {{"hidden", DType::F32, {-1, H_}}}; }
  GraphContract contract() const override { return GraphContract::DecoderState; }
  void execute(std::span<const TensorRef> in, std::span<const TensorRef> out) override {
    const std::int64_t T = in[0].shape[0], start = *in[2].as<std::int64_t>();
    auto* cache = in[3].as<float>();
    calls().push_back({T, start});
    check_past(cache, cache, start, H_);
    std::copy_n(in[0].as<const float>(), T * H_, cache + start * H_);
    record(cache, start, in[0].as<const float>(), T, H_);
    auto* hidden = out[0].as<float>();
    std::fill_n(hidden, T * H_, 0.0f);
    for (std::int64_t t = 0; t < T; ++t) hidden[t * H_] = static_cast<float>(start + t);
  }

 private:
  std::int64_t H_ = 0, ctx_ = 0;
};

class FakeBlockLm final : public Delegate {
 public:
  void init(const GraphBlob& b) override {
    H_ = spec_int(b, "hidden");
    AR_ = spec_int(b, "block");
    half_ = b.spec.contains("rope_width") ? spec_int(b, "rope_width") : 2;
    CL_ = b.context_length;
  }
  std::vector<IoSpec> input_specs() const override {
    return {{"inputs_embeds", DType::F32, {AR_, H_}},        {"attention_mask", DType::F32, {AR_, CL_}},
            {"rope_cos", DType::F32, {AR_, half_}},          {"rope_sin", DType::F32, {AR_, half_}},
            {"past_key", DType::F32, {CL_ - AR_, 1, 1, H_}}, {"past_value", DType::F32, {CL_ - AR_, 1, 1, H_}}};
  }
  std::vector<IoSpec> output_specs() const override {
    return {{"hidden", DType::F32, {AR_, H_}},
            {"new_key", DType::F32, {AR_, 1, 1, H_}},
            {"new_value", DType::F32, {AR_, 1, 1, H_}}};
  }
  GraphContract contract() const override { return GraphContract::DecoderBlock; }
  void execute(std::span<const TensorRef> in, std::span<const TensorRef> out) override {
    const auto* x = in[0].as<const float>();
    const auto* mask = in[1].as<const float>();
    const auto* past = in[4].as<const float>();
    // Open past columns of row 0: the tokens already cached.
    std::int64_t start = 0;
    while (start < CL_ - AR_ && mask[start] == 0.0f) ++start;
    // The real tokens of the block: the rows before the zero padding (the fake table's
    // embeddings are never all zeros).
    std::int64_t T = AR_;
    while (T > 0 && std::all_of(x + (T - 1) * H_, x + T * H_, [](float v) { return v == 0.0f; })) --T;
    calls().push_back({T, start});
    check_past(past, past, start, H_);
    record(past, start, x, T, H_);
    auto* hidden = out[0].as<float>();
    for (std::int64_t r = 0; r < AR_; ++r) {
      std::int64_t open = 0;
      for (std::int64_t c = 0; c < CL_; ++c) open += mask[r * CL_ + c] == 0.0f;
      std::fill_n(hidden + r * H_, H_, 0.0f);
      hidden[r * H_] = static_cast<float>(open - 1);
    }
    std::copy_n(x, AR_ * H_, out[1].as<float>());
    std::copy_n(x, AR_ * H_, out[2].as<float>());
  }

 private:
  std::int64_t H_ = 0, AR_ = 0, CL_ = 0, half_ = 2;
};

class FakeLmHead final : public Delegate {
 public:
  void init(const GraphBlob& b) override {
    H_ = spec_int(b, "hidden");
    V_ = spec_int(b, "vocab");
  }
  std::vector<IoSpec> input_specs() const override { return {{"x", DType::F32, {-1, H_}}}; }
  std::vector<IoSpec> output_specs() const override { return {{"y", DType::F32, {-1, V_}}}; }
  void execute(std::span<const TensorRef> in, std::span<const TensorRef> out) override {
    const std::int64_t R = in[0].shape[0];
    auto* y = out[0].as<float>();
    std::fill_n(y, R * V_, 0.0f);
    for (std::int64_t r = 0; r < R; ++r)
      y[r * V_ + token_at(static_cast<std::int64_t>(in[0].as<const float>()[r * H_]), V_)] = 1.0f;
  }
  static std::int32_t token_at(std::int64_t p, std::int64_t V) { return static_cast<std::int32_t>((7 * p + 3) % V); }

 private:
  std::int64_t H_ = 0, V_ = 0;
};

void register_fakes() {
  static const bool once = [] {
    register_delegate("fake", "fake.state_lm", [] { return std::make_unique<FakeStateLm>(); });
    register_delegate("fake", "fake.block_lm", [] { return std::make_unique<FakeBlockLm>(); });
    register_delegate("fake", "fake.lm_head", [] { return std::make_unique<FakeLmHead>(); });
    register_delegate("fake", "fake.plain", [] { return std::make_unique<FakeLmHead>(); });
    return true;
  }();
  (void)once;
}

// A family whose rope tables are the positions themselves (cos = p, sin = -p).
class FakeFamily final : public ModelFamily {
 public:
  std::string_view name() const override { return "fake"; }
  std::int64_t vocab_size() const override { return 100; }
  std::int32_t image_token_id() const override { return 99; }
  std::int64_t patch_size() const override { return 16; }
  std::int64_t image_size_factor() const override { return 32; }
  std::int64_t image_tokens(const ImageGrid&) const override { return 0; }
  void vision_rope_tables(const ImageGrid&, std::int64_t, std::int64_t, float*, float*) const override {}
  Positions positions(std::span<const std::int32_t>, std::span<const ImageGrid>) const override { return {}; }
  void rope_tables(const std::int32_t* pos, std::int64_t T, float* cos, float* sin) const override {
    for (std::int64_t t = 0; t < T; ++t)
      for (int k = 0; k < 2; ++k) {
        cos[t * 2 + k] = static_cast<float>(pos[t]);
        sin[t * 2 + k] = -static_cast<float>(pos[t]);
      }
  }
  std::int64_t rope_width() const override { return 2; }
  std::string render_chat(const std::vector<Message>&, bool) const override { return {}; }
};

Graph fake_graph(const std::string& kind, nlohmann::json spec, std::int64_t context) {
  register_fakes();
  GraphBlob blob{kind, kind, {}, std::move(spec), context, 8, kManifestVersion};
  Graph g;
  g.name = kind;
  g.delegate = create_delegate("fake", blob);
  g.inputs = g.delegate->input_specs();
  g.outputs = g.delegate->output_specs();
  for (IoSpec& s : g.outputs) s.role = IoRole::Output;
  g.contract = g.delegate->contract();
  return g;
}

// --- the KV manager ------------------------------------------------------------------------

TEST(KvManager, StateBuffersAreOnePerGraphInputAndKeptAcrossCalls) {
  Graph a = fake_graph("fake.state_lm", {{"hidden", 4}}, 16);
  Graph b = fake_graph("fake.state_lm", {{"hidden", 4}}, 16);
  b.name = "other";
  KvManager kv, other_session;
  const IoSpec& cache = a.input("cache");
  std::byte* p = kv.state(a, cache);
  EXPECT_EQ(kv.state(a, cache), p);
  EXPECT_NE(kv.state(b, cache), p);
  EXPECT_NE(other_session.state(a, cache), p);
  IoSpec huge = cache;
  huge.name = "huge";
  huge.shape = {std::int64_t{1} << 40, std::int64_t{1} << 40};
  test::expect_error([&] { kv.state(a, huge); }, {"graph \"fake.state_lm\"", "too large"});
}

BlockLayout f32_rows(std::int64_t row) { return {DType::F32, {row}}; }

TEST(KvManager, BlockCacheIsZeroedSharedAndOfOneShape) {
  KvManager kv;
  const auto c = kv.block_cache(10, f32_rows(3));
  const auto* keys = reinterpret_cast<const float*>(c.keys);
  const auto* values = reinterpret_cast<const float*>(c.values);
  EXPECT_TRUE(std::all_of(keys, keys + 30, [](float v) { return v == 0.0f; }));
  EXPECT_TRUE(std::all_of(values, values + 30, [](float v) { return v == 0.0f; }));
  EXPECT_NE(c.keys, c.values);
  const auto again = kv.block_cache(10, f32_rows(3));
  EXPECT_EQ(again.keys, c.keys);
  EXPECT_EQ(again.values, c.values);
  test::expect_error([&] { kv.block_cache(12, f32_rows(3)); }, {"disagree", "[10, 3] F32", "[12, 3] F32"});
  test::expect_error([&] { kv.block_cache(10, BlockLayout{DType::F16, {1, 2}}); }, {"disagree", "F16 in 2"});
}

// The mask a block of AR rows over `past` takes for a sequence with `start` cached rows.
float want_score(std::int64_t r, std::int64_t c, std::int64_t past, std::int64_t start) {
  return c < start || (c >= past && c - past <= r) ? 0.0f : KvManager::kMaskedScore;
}

TEST(KvManager, BlockInputsPadMaskAndPlaceTheStep) {
  KvManager kv;
  FakeFamily family;
  const std::int64_t AR = 4, past = 6, CL = past + AR, H = 2, T = 3, start = 2;
  const std::vector<float> embeds = {1, 2, 3, 4, 5, 6};                     // [T, H]
  const std::vector<std::int32_t> pos = {7, 8, 9, 17, 18, 19, 27, 28, 29};  // [3, T]
  const std::vector<float> ds = {10, 11, 12, 13, 14, 15};                   // [1, T, H]
  const std::vector<std::uint8_t> mask = {0, 1, 0};
  const auto cache = kv.block_cache(CL, f32_rows(5));
  const BlockInputs& b = kv.prepare_block(family, AR, past, H, 2, cache, DType::F32, embeds.data(), pos.data(), T,
                                          start, ds.data(), 1, mask.data());
  EXPECT_EQ(b.embeds, (std::vector<float>{1, 2, 3, 4, 5, 6, 0, 0}));
  // Padding rows (r >= T) get the real rows' pattern: no real row attends to them.
  const auto* m = static_cast<const float*>(b.mask);
  for (std::int64_t r = 0; r < AR; ++r)
    for (std::int64_t c = 0; c < CL; ++c) EXPECT_EQ(m[r * CL + c], want_score(r, c, past, start)) << r << "," << c;
  EXPECT_EQ(b.positions, (std::vector<std::int32_t>{7, 8, 9, 0, 17, 18, 19, 0, 27, 28, 29, 0}));
  EXPECT_EQ(b.cos, (std::vector<float>{7, 7, 8, 8, 9, 9, 0, 0}));          // the family's tables of axis 0's rows
  EXPECT_EQ(b.deepstack, (std::vector<float>{0, 0, 12, 13, 0, 0, 0, 0}));  // only the image row
  EXPECT_EQ(b.new_keys.size(), static_cast<std::size_t>(AR * 5) * sizeof(float));
}

TEST(KvManager, AnFp16MaskFollowsTheStartBothWaysAndCostsOnlyTheChangedColumns) {
  KvManager kv;
  FakeFamily family;
  const std::int64_t AR = 2, past = 30, CL = past + AR, H = 1;
  const auto cache = kv.block_cache(CL, BlockLayout{DType::F16, {2}});
  const std::vector<float> e(AR * H, 1.0f);
  const std::vector<std::int32_t> pos(3 * AR, 0);
  const std::vector<std::uint8_t> none(AR, 0);
  std::uint64_t last_cost = 0;
  for (const std::int64_t start : {0, 5, 6, 7, 20, 3, 3}) {
    const std::uint64_t before = kv.block_stats().host_bytes;
    const BlockInputs& b = kv.prepare_block(family, AR, past, H, 2, cache, DType::F16, e.data(), pos.data(), 1, start,
                                            nullptr, 0, none.data());
    last_cost = kv.block_stats().host_bytes - before;
    ASSERT_EQ(b.mask_dtype, DType::F16);
    const auto* m = static_cast<const std::uint16_t*>(b.mask);
    for (std::int64_t r = 0; r < AR; ++r)
      for (std::int64_t c = 0; c < CL; ++c)
        ASSERT_EQ(f16_to_f32(m[r * CL + c]), want_score(r, c, past, start)) << start << ": " << r << "," << c;
  }
  // The last call moved no column: its cost is the block's inputs alone, whatever the context.
  EXPECT_EQ(last_cost, 4u * (AR * H + 3 * AR + 2 * 2 * AR));
}

TEST(KvManager, WritesTheBlocksRowsAtTheirPositions) {
  KvManager kv;
  FakeFamily family;
  const auto cache = kv.block_cache(8, f32_rows(2));
  const std::vector<float> e = {1, 2, 3, 4};
  const std::vector<std::int32_t> pos(6, 0);
  const std::vector<std::uint8_t> mask(2, 0);
  BlockInputs& b =
      kv.prepare_block(family, 4, 4, 2, 2, cache, DType::F32, e.data(), pos.data(), 2, 3, nullptr, 0, mask.data());
  auto* nk = reinterpret_cast<float*>(b.new_keys.data());
  auto* nv = reinterpret_cast<float*>(b.new_values.data());
  for (std::size_t i = 0; i < 8; ++i) {
    nk[i] = static_cast<float>(100 + i);
    nv[i] = static_cast<float>(200 + i);
  }
  kv.write_block_rows(cache, 4, 3, 2);
  const auto* k = reinterpret_cast<const float*>(cache.keys);
  const auto* v = reinterpret_cast<const float*>(cache.values);
  EXPECT_EQ(std::vector<float>(k, k + 16),
            (std::vector<float>{0, 0, 0, 0, 0, 0, 100, 101, 102, 103, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(std::vector<float>(v, v + 16),
            (std::vector<float>{0, 0, 0, 0, 0, 0, 200, 201, 202, 203, 0, 0, 0, 0, 0, 0}));
  test::expect_error([&] { kv.write_block_rows(cache, 4, 7, 2); }, {"holds 8 positions", "[7, 9)"});
}

TEST(KvManager, AGroupMajorCacheKeepsEachGroupsRowsInItsOwnSlab) {
  // Two layer groups of 1 and 2 elements per token, a cache of 5 rows, blocks of 3 rows.
  KvManager kv;
  FakeFamily family;
  const auto cache = kv.block_cache(5, BlockLayout{DType::F16, {1, 2}});
  EXPECT_EQ(cache.offset(0, 3), 3);
  EXPECT_EQ(cache.offset(1, 0), 5);      // after group 0's slab of 5 rows
  EXPECT_EQ(cache.offset(1, 2), 5 + 4);  // 2 elements a row
  const std::vector<float> e(3, 1.0f);
  const std::vector<std::int32_t> pos(9, 0);
  const std::vector<std::uint8_t> mask(3, 0);
  BlockInputs& b =
      kv.prepare_block(family, 3, 2, 1, 2, cache, DType::F16, e.data(), pos.data(), 2, 1, nullptr, 0, mask.data());
  ASSERT_EQ(b.new_keys.size(), 3u * 3u * 2u);
  auto* nk = reinterpret_cast<std::uint16_t*>(b.new_keys.data());
  // The block's rows group-major with slabs of 3 rows: group 0 [a0 a1 a2], group 1 [b0 b0' b1 b1' b2 b2'].
  for (std::uint16_t i = 0; i < 9; ++i) nk[i] = static_cast<std::uint16_t>(10 + i);
  kv.write_block_rows(cache, 3, 1, 2);  // rows 1 and 2 of the sequence
  const auto* k = reinterpret_cast<const std::uint16_t*>(cache.keys);
  EXPECT_EQ(std::vector<std::uint16_t>(k, k + 15),
            (std::vector<std::uint16_t>{0, 10, 11, 0, 0, 0, 0, 13, 14, 15, 16, 0, 0, 0, 0}));
}

// --- the decoder contracts -----------------------------------------------------------------

TEST(Decoder, ChosenByTheDeclaredContract) {
  FakeFamily family;
  Graph state = fake_graph("fake.state_lm", {{"hidden", 4}}, 16);
  Graph block = fake_graph("fake.block_lm", {{"hidden", 4}, {"block", 4}}, 16);
  Graph plain = fake_graph("fake.plain", {{"hidden", 4}, {"vocab", 10}}, 16);
  EXPECT_EQ(Decoder::of(state, family)->block(), 0);
  EXPECT_EQ(Decoder::of(block, family)->block(), 4);
  EXPECT_EQ(Decoder::of(block, family)->room(), 12);
  test::expect_error([&] { Decoder::of(plain, family); }, {"graph \"fake.plain\"", "neither decoder contract"});
  // Rope tables of another width than the model's would be written past the graph's input.
  Graph wide = fake_graph("fake.block_lm", {{"hidden", 4}, {"block", 4}, {"rope_width", 3}}, 16);
  test::expect_error([&] { Decoder::of(wide, family); }, {"rope_cos rows of 3", "are 2 wide"});
  // A graph that declares the block contract but lacks one of its inputs is refused at load.
  block.inputs.erase(block.inputs.begin() + 4);  // past_key
  test::expect_error([&] { Decoder::of(block, family); }, {"no input named \"past_key\""});
}

// Both contracts over the same steps: prefill chunks, then one-token steps, then a rewind.
TEST(Decoder, StateAndBlockContractsSeeTheSameConversation) {
  FakeFamily family;
  Graph state = fake_graph("fake.state_lm", {{"hidden", 2}}, 16);
  Graph block = fake_graph("fake.block_lm", {{"hidden", 2}, {"block", 4}}, 16);
  Graph head = fake_graph("fake.lm_head", {{"hidden", 2}, {"vocab", 50}}, 16);
  check_lm_head(head);
  for (Graph* g : {&state, &block}) {
    calls().clear();
    auto d = Decoder::of(*g, family);
    KvManager kv;
    std::vector<float> embeds(16 * 2);
    for (std::size_t i = 0; i < embeds.size(); ++i) embeds[i] = static_cast<float>(i) + 0.5f;
    std::vector<std::int32_t> pos(3 * 4, 0);
    std::vector<float> logits;
    const auto step = [&](std::int64_t start, std::int64_t T, std::int64_t rows) {
      run_decoder_step(*d, head, kv,
                       {.embeds = embeds.data() + start * 2,
                        .positions = pos.data(),
                        .tokens = T,
                        .start = start,
                        .logit_rows = rows},
                       logits);
    };
    step(0, 4, 0);
    EXPECT_TRUE(logits.empty()) << "a chunk with no logit rows runs no lm-head";
    step(4, 3, 1);
    ASSERT_EQ(logits.size(), 50u);
    EXPECT_EQ(std::max_element(logits.begin(), logits.end()) - logits.begin(), FakeLmHead::token_at(6, 50));
    step(7, 1, 1);
    EXPECT_EQ(std::max_element(logits.begin(), logits.end()) - logits.begin(), FakeLmHead::token_at(7, 50));
    step(8, 3, 3);  // a verification step: logits for every row
    ASSERT_EQ(logits.size(), 150u);
    for (int r = 0; r < 3; ++r)
      EXPECT_EQ(std::max_element(logits.begin() + r * 50, logits.begin() + (r + 1) * 50) - (logits.begin() + r * 50),
                FakeLmHead::token_at(8 + r, 50));
    step(5, 2, 1);  // a rewound conversation rewrites from its new end
    EXPECT_EQ(calls(), (std::vector<Call>{{4, 0}, {3, 4}, {1, 7}, {3, 8}, {2, 5}})) << g->name;
  }
}

TEST(Decoder, BlockContractRefusesStepsItCannotHold) {
  FakeFamily family;
  Graph block = fake_graph("fake.block_lm", {{"hidden", 2}, {"block", 4}}, 10);
  auto d = Decoder::of(block, family);
  KvManager kv;
  std::vector<float> embeds(2 * 8, 1.0f);
  std::vector<std::int32_t> pos(3 * 8, 0);
  test::expect_error([&] { d->run(kv, {.embeds = embeds.data(), .positions = pos.data(), .tokens = 5, .start = 0}); },
                     {"5 tokens for a block of 4"});
  test::expect_error([&] { d->run(kv, {.embeds = embeds.data(), .positions = pos.data(), .tokens = 1, .start = 7}); },
                     {"7 tokens are cached", "room for a past of 6"});
}

// --- the stages, through a pipeline whose language model and lm-head are fakes --------------

class FakeModelStages : public ::testing::TestWithParam<std::string> {
 public:
  // tiny_a's default plan (its tokenizer, template and embedding table) with fake graphs.
  static std::filesystem::path plan(const test::TempDir& dir, const std::string& contract) {
    register_fakes();
    const auto ckpt = test::cache_dir() / "reference" / "tiny_a" / "checkpoint";
    nlohmann::json p = default_manifest_for_hf_dir(ckpt).json;
    const auto weights = Checkpoint::open(ckpt / "model.safetensors");
    const auto& embed = weights.get("model.language_model.embed_tokens.weight");
    const std::int64_t V = embed.shape[0], H = embed.shape[1];
    const std::int64_t half = load_qwen3vl_config(ckpt / "config.json").text.head_dim / 2;
    p["context_length"] = 64;
    p["prefill_chunk"] = 5;
    p["graphs"]["lm_head"] = {{"backend", "fake"}, {"kind", "fake.lm_head"}, {"hidden", H}, {"vocab", V}};
    if (contract == "state") {
      p["graphs"]["llm"] = {{"backend", "fake"}, {"kind", "fake.state_lm"}, {"hidden", H}};
    } else {
      p["graphs"]["llm"] = {
          {"backend", "fake"}, {"kind", "fake.block_lm"}, {"hidden", H}, {"block", 5}, {"rope_width", half}};
      p["graphs"]["llm_decode"] = {
          {"backend", "fake"}, {"kind", "fake.block_lm"}, {"hidden", H}, {"block", 1}, {"rope_width", half}};
      for (auto& st : p["stages"])
        if (st["op"] == "decode") st["graph"] = "llm_decode";
    }
    return dir.write("fake.json", p.dump());
  }
};

TEST_P(FakeModelStages, PrefillChunksAndDecodeStepsFollowTheContract) {
  test::TempDir dir;
  Pipeline pipe = Pipeline::open(plan(dir, GetParam()));
  Session s(pipe);
  GenerationOptions o;
  o.max_new_tokens = 4;
  SamplingParams greedy;
  greedy.greedy = true;
  o.sampling = greedy;
  calls().clear();
  const GenerationResult r = s.send(Message::text("user", "Count the positions."), o);
  const auto L = static_cast<std::int64_t>(r.prompt_tokens.size());
  const std::int64_t V = r.vocab;
  // Greedy tokens name the positions the stages ran: the prompt's last, then each new token's.
  ASSERT_EQ(r.tokens.size(), 4u);
  for (std::int64_t i = 0; i < 4; ++i)
    EXPECT_EQ(r.tokens[static_cast<std::size_t>(i)], FakeLmHead::token_at(L - 1 + i, V));
  EXPECT_EQ(r.stop, StopReason::MaxNewTokens);
  EXPECT_EQ(r.stop_reason, "max_new_tokens");
  // Prefill in chunks of 5 from 0, then one call per generated token but the last.
  std::vector<Call> want;
  for (std::int64_t s0 = 0; s0 < L; s0 += 5) want.push_back({std::min<std::int64_t>(5, L - s0), s0});
  for (std::int64_t i = 0; i < 3; ++i) want.push_back({1, L + i});
  EXPECT_EQ(calls(), want);

  // The next turn reuses the cached prefix: its prefill starts past it, over the same cache
  // (the fakes throw if the past they are handed is not what they wrote).
  calls().clear();
  const GenerationResult r2 = s.send(Message::text("user", "Again."), o);
  ASSERT_FALSE(calls().empty());
  EXPECT_EQ(calls().front().start, r2.cached_tokens);
  EXPECT_GT(r2.cached_tokens, 0);
  const auto L2 = static_cast<std::int64_t>(r2.prompt_tokens.size());
  EXPECT_EQ(r2.tokens.front(), FakeLmHead::token_at(L2 - 1, V));
}

INSTANTIATE_TEST_SUITE_P(Contracts, FakeModelStages, ::testing::Values("state", "block"));

// Forced tokens are drafts the model always accepts: the state graph verifies K + 1 of them a
// run, and the steps they cover run no graph (a block graph's rows are fixed: it takes one).
TEST_P(FakeModelStages, ForcedTokensAreVerifiedKPlusOneARun) {
  test::TempDir dir;
  Pipeline pipe = Pipeline::open(plan(dir, GetParam()));
  GenerationOptions o;
  o.max_new_tokens = 6;
  o.forced_tokens = {11, 12, 13, 14, 15, 16};
  o.speculate = 3;
  calls().clear();
  Session s(pipe);
  if (GetParam() == "block") {
    // A block decode graph speculates through a verify graph (FakeBlockStages): through
    // the plain block plan, speculation is refused, not quietly decoded a token a run.
    test::expect_error([&] { s.send(Message::text("user", "Force it."), o); }, {"speculate 3", "no verify graph"});
    return;
  }
  const GenerationResult r = s.send(Message::text("user", "Force it."), o);
  const auto L = static_cast<std::int64_t>(r.prompt_tokens.size());
  EXPECT_EQ(r.tokens, o.forced_tokens);
  std::vector<Call> decode(calls().begin() + (L + 4) / 5, calls().end());
  EXPECT_EQ(decode, (std::vector<Call>{{4, L}, {1, L + 4}}));  // tokens 1-3 verified with token 0
  EXPECT_EQ(r.draft_tokens, 3);
  EXPECT_EQ(r.accepted_tokens, 3);
}

TEST(FakeBlockStages, ABlockPlanSpeculatesThroughItsVerifyGraph) {
  test::TempDir dir;
  nlohmann::json p = nlohmann::json::parse(test::read_file(FakeModelStages::plan(dir, "block")));
  p["graphs"]["llm_verify"] = p["graphs"]["llm_decode"];
  p["graphs"]["llm_verify"]["block"] = 4;
  for (auto& st : p["stages"])
    if (st["op"] == "decode") st["verify_graph"] = "llm_verify";
  Pipeline pipe = Pipeline::open(dir.write("verify.json", p.dump()));
  GenerationOptions o;
  o.max_new_tokens = 6;
  o.forced_tokens = {11, 12, 13, 14, 15, 16};
  o.speculate = 3;
  calls().clear();
  const GenerationResult r = Session(pipe).send(Message::text("user", "Force it."), o);
  const auto L = static_cast<std::int64_t>(r.prompt_tokens.size());
  EXPECT_EQ(r.tokens, o.forced_tokens);
  const std::vector<Call> decode(calls().begin() + (L + 4) / 5, calls().end());
  EXPECT_EQ(decode, (std::vector<Call>{{4, L}, {1, L + 4}}));  // tokens 1-3 verified with token 0
  EXPECT_EQ(r.draft_tokens, 3);
  EXPECT_EQ(r.accepted_tokens, 3);
  EXPECT_EQ(r.block_graphs.decode_calls, 2);
  o.speculate = 4;  // the verify block of 4 holds the token and 3 drafts
  test::expect_error([&] { Session(pipe).send(Message::text("user", "Force it."), o); },
                     {"speculate 4 is beyond", "3 drafts", "block of 4"});
}

// PipelineOptions' overrides go through the manifest's own checks.
TEST(PipelineOverrides, ContextLengthAndKvCache) {
  const auto ckpt = test::cache_dir() / "reference" / "tiny_a" / "checkpoint";
  PipelineOptions o;
  o.context_length = 48;
  o.kv_cache = "i8";
  Pipeline p = Pipeline::open(ckpt, o);
  EXPECT_EQ(p.context_length(), 48);
  GenerationRequest long_prompt;
  for (int i = 0; i < 60; ++i) long_prompt.prompt += "word ";
  long_prompt.max_new_tokens = 1;
  test::expect_error([&] { p.generate(long_prompt); }, {"context"});
  o.kv_cache = "f8";
  test::expect_error([&] { Pipeline::open(ckpt, o); }, {"kv_cache", "f8"});
  o.kv_cache.reset();
  o.context_length = 0;
  test::expect_error([&] { Pipeline::open(ckpt, o); }, {"context_length"});
  // A plan whose language model is no CPU decoder has no KV cache dtype to choose.
  test::TempDir dir;
  PipelineOptions kv;
  kv.kv_cache = "f16";
  test::expect_error([&] { Pipeline::open(FakeModelStages::plan(dir, "state"), kv); },
                     {"PipelineOptions::kv_cache", "qwen3vl.text_decoder"});
}

// PipelineOptions::activations sets every CPU graph's arithmetic, through the same checks.
TEST(PipelineOverrides, Activations) {
  const auto ckpt = test::cache_dir() / "reference" / "tiny_a" / "checkpoint";
  GenerationRequest req;
  req.prompt = "The quick brown fox";
  req.max_new_tokens = 1;
  req.keep_step_logits = true;
  const std::vector<float> f32 = Pipeline::open(ckpt).generate(req).step_logits;
  PipelineOptions o;
  o.activations = "f16";
  const std::vector<float> f16 = Pipeline::open(ckpt, o).generate(req).step_logits;
  ASSERT_EQ(f16.size(), f32.size());
  EXPECT_NE(f16, f32);     // the checkpoint's own plan computes in f32: rounding its inputs shows
  o.activations = "int4";  // refused where the graph is built, naming it
  test::expect_error([&] { Pipeline::open(ckpt, o).generate(req); }, {"activations", "int4"});
  // The fakes' text plan (no vision graph) has no CPU graph whose arithmetic can be chosen.
  test::TempDir dir;
  nlohmann::json text = nlohmann::json::parse(test::read_file(FakeModelStages::plan(dir, "state")));
  text["graphs"].erase("vision");
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& st : text["stages"])
    if (st["op"] != "load_images" && st["op"] != "patch_embed" && st["op"] != "vision") stages.push_back(st);
  text["stages"] = stages;
  PipelineOptions a;
  a.activations = "f32";
  test::expect_error([&] { Pipeline::open(dir.write("text.json", text.dump()), a); },
                     {"PipelineOptions::activations", "no CPU graph"});
}

// The public finder of a bundle's manifests: by their contents, not by their names.
TEST(BundleManifests, FoundByWhatTheyDeclare) {
  test::TempDir dir;
  const auto vlm = FakeModelStages::plan(dir, "state");  // the default plan: image stages
  nlohmann::json text = nlohmann::json::parse(test::read_file(vlm));
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& st : text["stages"])
    if (st["op"] != "load_images" && st["op"] != "patch_embed" && st["op"] != "vision") stages.push_back(st);
  text["stages"] = stages;
  const auto text_path = dir.write("any-name.json", text.dump());
  dir.write("notes.json", R"({"not": "a manifest"})");
  const BundleManifests m = find_bundle_manifests(dir.path());
  EXPECT_EQ(m.vlm, (std::vector<std::filesystem::path>{vlm}));
  EXPECT_EQ(m.text, (std::vector<std::filesystem::path>{text_path}));
  test::expect_error([&] { find_bundle_manifests(dir.path() / "none"); }, {"none", "not a bundle folder"});
}

}  // namespace
}  // namespace qhx
