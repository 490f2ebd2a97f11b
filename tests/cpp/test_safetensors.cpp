// Tests for the safetensors reader: a multi-dtype round trip, every header
// corruption the reader promises to catch, and sharded checkpoints.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "qhexrt/error.hpp"
#include "qhexrt/safetensors.hpp"

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

namespace {

// A fresh directory under the system temp dir, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ =
        fs::temp_directory_path() / ("qhx_test_safetensors_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  ASSERT_TRUE(out) << p;
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out) << p;
}

std::string le_u64(std::uint64_t v) {
  std::string s(8, '\0');
  for (std::size_t i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

// Length prefix + header text + data, exactly as given (no validation): the
// corruption tests need to write files a correct writer never would.
std::string raw_file(const std::string& header, const std::string& data) {
  return le_u64(header.size()) + header + data;
}

struct TensorSpec {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::string bytes;
};

std::string pattern_bytes(std::size_t n, unsigned seed) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 31 + seed * 17 + 7) & 0xFF);
  return s;
}

// A well-formed file laid out like the reference writer does: tensors packed
// in order, header padded with spaces to a multiple of 8 bytes.
std::string valid_file(const std::vector<TensorSpec>& specs, const Json& metadata = Json()) {
  Json header = Json::object();
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  std::string data;
  for (const auto& t : specs) {
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return raw_file(text, data);
}

// Asserts that opening `file` throws qhx::Error mentioning the file name and
// every phrase.
void expect_open_error(const fs::path& file, std::initializer_list<std::string> phrases) {
  try {
    (void)qhx::SafetensorsFile::open(file);
    ADD_FAILURE() << "opening " << file << " did not throw";
  } catch (const qhx::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(file.filename().string()), std::string::npos) << "message lacks the file name: " << msg;
    for (const auto& p : phrases) EXPECT_NE(msg.find(p), std::string::npos) << "message lacks '" << p << "': " << msg;
  }
}

void expect_checkpoint_error(const fs::path& path, std::initializer_list<std::string> phrases) {
  try {
    (void)qhx::Checkpoint::open(path);
    ADD_FAILURE() << "opening checkpoint " << path << " did not throw";
  } catch (const qhx::Error& e) {
    const std::string msg = e.what();
    for (const auto& p : phrases) EXPECT_NE(msg.find(p), std::string::npos) << "message lacks '" << p << "': " << msg;
  }
}

std::string view_bytes(const qhx::TensorView& t) {
  return t.nbytes == 0 ? std::string() : std::string(reinterpret_cast<const char*>(t.data), t.nbytes);
}

std::vector<TensorSpec> all_dtypes() {
  return {
      {"z.last_in_alphabet", "F32", {2, 3}, pattern_bytes(24, 1)},
      {"a.half", "F16", {4}, pattern_bytes(8, 2)},
      {"m.bf16", "BF16", {2, 2}, pattern_bytes(8, 3)},
      {"i8", "I8", {3}, pattern_bytes(3, 4)},
      {"u8", "U8", {5, 1}, pattern_bytes(5, 5)},
      {"i32", "I32", {2}, pattern_bytes(8, 6)},
      {"i64", "I64", {1, 2}, pattern_bytes(16, 7)},
      {"empty", "F32", {0, 4}, ""},
      {"scalar", "I32", {}, pattern_bytes(4, 8)},
  };
}

}  // namespace

TEST(DType, SizesAndNames) {
  EXPECT_EQ(qhx::dtype_size(qhx::DType::F32), 4u);
  EXPECT_EQ(qhx::dtype_size(qhx::DType::F16), 2u);
  EXPECT_EQ(qhx::dtype_size(qhx::DType::BF16), 2u);
  EXPECT_EQ(qhx::dtype_size(qhx::DType::I8), 1u);
  EXPECT_EQ(qhx::dtype_size(qhx::DType::U8), 1u);
  EXPECT_EQ(qhx::dtype_size(qhx::DType::I32), 4u);
  EXPECT_EQ(qhx::dtype_size(qhx::DType::I64), 8u);
  EXPECT_EQ(qhx::dtype_name(qhx::DType::BF16), "BF16");
  EXPECT_EQ(qhx::dtype_name(qhx::DType::I64), "I64");
}

TEST(SafetensorsFile, RoundTripAllDTypes) {
  TempDir dir;
  const auto specs = all_dtypes();
  const fs::path file = dir.path() / "multi.safetensors";
  write_bytes(file, valid_file(specs, Json{{"format", "pt"}, {"note", "hello"}}));

  const auto st = qhx::SafetensorsFile::open(file);
  EXPECT_EQ(st.path(), file);
  ASSERT_EQ(st.tensors().size(), specs.size());
  const qhx::DType expected_dtypes[] = {qhx::DType::F32, qhx::DType::F16, qhx::DType::BF16,
                                        qhx::DType::I8,  qhx::DType::U8,  qhx::DType::I32,
                                        qhx::DType::I64, qhx::DType::F32, qhx::DType::I32};
  for (std::size_t i = 0; i < specs.size(); ++i) {
    SCOPED_TRACE(specs[i].name);
    const auto& t = st.tensors()[i];  // header order, not alphabetical
    EXPECT_EQ(t.name, specs[i].name);
    EXPECT_EQ(t.dtype, expected_dtypes[i]);
    EXPECT_EQ(t.shape, specs[i].shape);
    EXPECT_EQ(t.nbytes, specs[i].bytes.size());
    EXPECT_EQ(static_cast<std::size_t>(t.numel()) * qhx::dtype_size(t.dtype), t.nbytes);
    EXPECT_EQ(view_bytes(t), specs[i].bytes);
    EXPECT_EQ(st.find(specs[i].name), &t);
  }
  EXPECT_EQ(st.get("empty").data, nullptr);
  EXPECT_EQ(st.get("empty").numel(), 0);
  EXPECT_EQ(st.get("scalar").numel(), 1);
  EXPECT_EQ(st.find("absent"), nullptr);
  EXPECT_EQ(st.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "hello"}}));
}

TEST(SafetensorsFile, GetNamesTensorAndFile) {
  TempDir dir;
  const fs::path file = dir.path() / "one.safetensors";
  write_bytes(file, valid_file({{"w", "F32", {1}, pattern_bytes(4, 1)}}));
  const auto st = qhx::SafetensorsFile::open(file);
  try {
    (void)st.get("missing.weight");
    ADD_FAILURE() << "get() of an absent tensor did not throw";
  } catch (const qhx::Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("one.safetensors"), std::string::npos) << e.what();
  }
}

TEST(SafetensorsFile, ViewsSurviveMoves) {
  TempDir dir;
  const fs::path file = dir.path() / "move.safetensors";
  const auto specs = all_dtypes();
  write_bytes(file, valid_file(specs));
  auto a = qhx::SafetensorsFile::open(file);
  const std::byte* before = a.get("i64").data;
  qhx::SafetensorsFile b = std::move(a);
  EXPECT_EQ(b.get("i64").data, before);
  auto c = qhx::SafetensorsFile::open(file);
  c = std::move(b);  // c's own mapping is released; b's survives in c
  EXPECT_EQ(c.get("i64").data, before);
  EXPECT_EQ(view_bytes(c.get("i64")), specs[6].bytes);
}

TEST(SafetensorsFile, EmptyHeaderIsLegal) {
  TempDir dir;
  const fs::path file = dir.path() / "nothing.safetensors";
  write_bytes(file, raw_file("{}", ""));
  const auto st = qhx::SafetensorsFile::open(file);
  EXPECT_TRUE(st.tensors().empty());
  EXPECT_TRUE(st.metadata().empty());
}

TEST(SafetensorsFile, TensorsMayBeStoredOutOfHeaderOrder) {
  TempDir dir;
  const fs::path file = dir.path() / "shuffled.safetensors";
  const std::string data = pattern_bytes(12, 9);
  const Json header = {{"first", {{"dtype", "U8"}, {"shape", {4}}, {"data_offsets", {8, 12}}}},
                       {"second", {{"dtype", "U8"}, {"shape", {8}}, {"data_offsets", {0, 8}}}}};
  write_bytes(file, raw_file(header.dump(), data));
  const auto st = qhx::SafetensorsFile::open(file);
  EXPECT_EQ(view_bytes(st.get("first")), data.substr(8, 4));
  EXPECT_EQ(view_bytes(st.get("second")), data.substr(0, 8));
}

// --- corruptions ------------------------------------------------------------

TEST(SafetensorsCorrupt, MissingFile) {
  TempDir dir;
  expect_open_error(dir.path() / "does_not_exist.safetensors", {"cannot open"});
}

TEST(SafetensorsCorrupt, ShorterThanLengthPrefix) {
  TempDir dir;
  const fs::path file = dir.path() / "short.safetensors";
  write_bytes(file, "abcde");
  expect_open_error(file, {"too short"});
}

TEST(SafetensorsCorrupt, HeaderLengthPastEndOfFile) {
  TempDir dir;
  const fs::path file = dir.path() / "biglen.safetensors";
  write_bytes(file, le_u64(1000) + "{}");
  expect_open_error(file, {"header length 1000", "exceeds"});
  write_bytes(file, le_u64(~0ull) + "{}");  // must not wrap around in the size arithmetic
  expect_open_error(file, {"exceeds"});
}

TEST(SafetensorsCorrupt, HeaderLengthOverLimit) {
  TempDir dir;
  const fs::path file = dir.path() / "huge_header.safetensors";
  const std::uint64_t len = (100ull << 20) + 1;
  write_bytes(file, le_u64(len));
  fs::resize_file(file, 8 + len + 16);  // sparse: costs no disk space
  expect_open_error(file, {"header length", "limit"});
}

TEST(SafetensorsCorrupt, HeaderNotJson) {
  TempDir dir;
  const fs::path file = dir.path() / "notjson.safetensors";
  write_bytes(file, raw_file("{\"a\": ", ""));
  expect_open_error(file, {"not valid JSON"});
}

TEST(SafetensorsCorrupt, HeaderNotAnObject) {
  TempDir dir;
  const fs::path file = dir.path() / "array.safetensors";
  write_bytes(file, raw_file("[1, 2]", ""));
  expect_open_error(file, {"must be a JSON object"});
}

TEST(SafetensorsCorrupt, DuplicateTensorName) {
  TempDir dir;
  const fs::path file = dir.path() / "dup.safetensors";
  const std::string entry = R"({"dtype":"U8","shape":[1],"data_offsets":[0,1]})";
  write_bytes(file, raw_file(R"({"w":)" + entry + R"(,"w":)" + entry + "}", "x"));
  expect_open_error(file, {"duplicate", "'w'"});
}

// One malformed tensor entry per case; the message must name the tensor.
TEST(SafetensorsCorrupt, BadEntries) {
  struct Case {
    const char* label;
    std::string entry;  // JSON for tensor "bad"
    std::string data;
    std::vector<std::string> phrases;
  };
  const Case cases[] = {
      {"not an object", "5", "", {"must be an object"}},
      {"missing dtype", R"({"shape":[1],"data_offsets":[0,4]})", "abcd", {"missing \"dtype\""}},
      {"dtype not a string", R"({"dtype":4,"shape":[1],"data_offsets":[0,4]})", "abcd", {"\"dtype\" must be a string"}},
      {"unsupported dtype",
       R"({"dtype":"F64","shape":[1],"data_offsets":[0,8]})",
       "abcdefgh",
       {"unsupported dtype 'F64'"}},
      {"missing shape", R"({"dtype":"U8","data_offsets":[0,1]})", "a", {"missing \"shape\""}},
      {"shape not an array", R"({"dtype":"U8","shape":1,"data_offsets":[0,1]})", "a", {"\"shape\" must be an array"}},
      {"float dimension", R"({"dtype":"U8","shape":[1.5],"data_offsets":[0,1]})", "a", {"must be integers"}},
      {"negative dimension",
       R"({"dtype":"U8","shape":[2,-1],"data_offsets":[0,1]})",
       "a",
       {"negative shape dimension -1"}},
      {"missing offsets", R"({"dtype":"U8","shape":[1]})", "a", {"missing \"data_offsets\""}},
      {"offsets not a pair", R"({"dtype":"U8","shape":[1],"data_offsets":[0]})", "a", {"two integers"}},
      {"offsets not integers", R"({"dtype":"U8","shape":[1],"data_offsets":["0","1"]})", "a", {"must be integers"}},
      {"negative offset", R"({"dtype":"U8","shape":[1],"data_offsets":[-1,0]})", "a", {"negative data offset"}},
      {"numel overflow", R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]})", "", {"overflows"}},
      {"numel*size overflow",
       R"({"dtype":"I64","shape":[2305843009213693952],"data_offsets":[0,0]})",
       "",
       {"overflows"}},
      {"begin > end", R"({"dtype":"U8","shape":[0],"data_offsets":[3,2]})", "abcd", {"begin 3 > end 2"}},
      {"end past the file", R"({"dtype":"U8","shape":[8],"data_offsets":[0,8]})", "abcd", {"past the end"}},
      {"size mismatch", R"({"dtype":"F32","shape":[2],"data_offsets":[0,4]})", "abcdefgh", {"span 4 bytes", "need 8"}},
  };
  TempDir dir;
  int i = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    const fs::path file = dir.path() / ("bad_entry_" + std::to_string(i++) + ".safetensors");
    write_bytes(file,
                raw_file(R"({"ok":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"bad":)" + c.entry + "}", c.data));
    std::vector<std::string> phrases = c.phrases;
    phrases.push_back("'bad'");
    try {
      (void)qhx::SafetensorsFile::open(file);
      ADD_FAILURE() << "did not throw";
    } catch (const qhx::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(file.filename().string()), std::string::npos) << msg;
      for (const auto& p : phrases) EXPECT_NE(msg.find(p), std::string::npos) << "lacks '" << p << "': " << msg;
    }
  }
}

TEST(SafetensorsCorrupt, OverlappingTensors) {
  TempDir dir;
  const fs::path file = dir.path() / "overlap.safetensors";
  const Json header = {{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
                       {"b", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {4, 12}}}}};
  write_bytes(file, raw_file(header.dump(), pattern_bytes(12, 1)));
  expect_open_error(file, {"overlap", "'a'", "'b'"});
}

TEST(SafetensorsCorrupt, IdenticalRangesOverlap) {
  TempDir dir;
  const fs::path file = dir.path() / "alias.safetensors";
  const Json header = {{"b", {{"dtype", "U8"}, {"shape", {4}}, {"data_offsets", {0, 4}}}},
                       {"a", {{"dtype", "I32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}}};
  write_bytes(file, raw_file(header.dump(), pattern_bytes(4, 1)));
  expect_open_error(file, {"overlap"});
}

TEST(SafetensorsCorrupt, ZeroSizeTensorsDoNotOverlap) {
  TempDir dir;
  const fs::path file = dir.path() / "zeros.safetensors";
  const Json header = {{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
                       {"e1", {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {4, 4}}}},
                       {"e2", {{"dtype", "F32"}, {"shape", {0, 3}}, {"data_offsets", {8, 8}}}}};
  write_bytes(file, raw_file(header.dump(), pattern_bytes(8, 1)));
  EXPECT_NO_THROW((void)qhx::SafetensorsFile::open(file));
}

TEST(SafetensorsCorrupt, BadMetadata) {
  TempDir dir;
  const fs::path file = dir.path() / "meta.safetensors";
  write_bytes(file, raw_file(R"({"__metadata__":{"format":"pt","n":3}})", ""));
  expect_open_error(file, {"__metadata__", "'n'", "must be a string"});
  write_bytes(file, raw_file(R"({"__metadata__":[1]})", ""));
  expect_open_error(file, {"__metadata__", "must be an object"});
}

// --- checkpoints ----------------------------------------------------------

TEST(Checkpoint, SingleFileByPathAndByDirectory) {
  TempDir dir;
  const auto specs = all_dtypes();
  write_bytes(dir.path() / "model.safetensors", valid_file(specs));
  for (const fs::path& p : {dir.path(), dir.path() / "model.safetensors"}) {
    SCOPED_TRACE(p.string());
    const auto ck = qhx::Checkpoint::open(p);
    EXPECT_EQ(ck.shard_count(), 1u);
    const auto names = ck.names();
    EXPECT_EQ(names.size(), specs.size());
    EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
    EXPECT_EQ(view_bytes(ck.get("m.bf16")), specs[2].bytes);
    EXPECT_EQ(ck.find("nope"), nullptr);
  }
}

TEST(Checkpoint, GetNamesTensorAndPath) {
  TempDir dir;
  write_bytes(dir.path() / "model.safetensors", valid_file(all_dtypes()));
  const auto ck = qhx::Checkpoint::open(dir.path());
  try {
    (void)ck.get("lm_head.weight");
    ADD_FAILURE() << "get() of an absent tensor did not throw";
  } catch (const qhx::Error& e) {
    EXPECT_NE(std::string(e.what()).find("lm_head.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(dir.path().string()), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, DirectoryWithoutModelFiles) {
  TempDir dir;
  expect_checkpoint_error(dir.path(), {dir.path().string(), "neither"});
  expect_checkpoint_error(dir.path() / "ghost", {"ghost", "no such file"});
}

namespace {

// Two shards with an index, as save_pretrained(max_shard_size=...) writes them.
struct ShardedFixture {
  TempDir dir;
  std::vector<TensorSpec> shard1 = {{"model.embed.weight", "BF16", {4, 2}, pattern_bytes(16, 1)},
                                    {"model.layers.0.w", "F32", {3}, pattern_bytes(12, 2)}};
  std::vector<TensorSpec> shard2 = {{"model.layers.1.w", "F32", {3}, pattern_bytes(12, 3)},
                                    {"lm_head.weight", "F16", {2, 2}, pattern_bytes(8, 4)}};
  Json weight_map = Json::object();

  ShardedFixture() {
    write_bytes(dir.path() / "model-00001-of-00002.safetensors", valid_file(shard1));
    write_bytes(dir.path() / "model-00002-of-00002.safetensors", valid_file(shard2));
    for (const auto& t : shard1) weight_map[t.name] = "model-00001-of-00002.safetensors";
    for (const auto& t : shard2) weight_map[t.name] = "model-00002-of-00002.safetensors";
    write_index();
  }
  fs::path index_path() const { return dir.path() / "model.safetensors.index.json"; }
  void write_index() const {
    const Json index = {{"metadata", {{"total_size", 48}}}, {"weight_map", weight_map}};
    write_bytes(index_path(), index.dump(2));
  }
};

}  // namespace

TEST(Checkpoint, ShardedByDirectoryAndByIndex) {
  ShardedFixture fx;
  for (const fs::path& p : {fx.dir.path(), fx.index_path()}) {
    SCOPED_TRACE(p.string());
    auto opened = qhx::Checkpoint::open(p);
    const qhx::Checkpoint ck = std::move(opened);  // views must survive the move
    EXPECT_EQ(ck.shard_count(), 2u);
    EXPECT_EQ(ck.names(), (std::vector<std::string>{"lm_head.weight", "model.embed.weight", "model.layers.0.w",
                                                    "model.layers.1.w"}));
    for (const auto& t : fx.shard1) EXPECT_EQ(view_bytes(ck.get(t.name)), t.bytes) << t.name;
    for (const auto& t : fx.shard2) EXPECT_EQ(view_bytes(ck.get(t.name)), t.bytes) << t.name;
    EXPECT_EQ(ck.get("lm_head.weight").dtype, qhx::DType::F16);
    EXPECT_EQ(ck.get("lm_head.weight").shape, (std::vector<std::int64_t>{2, 2}));
  }
}

TEST(Checkpoint, ShardedPrefersSingleFileWhenBothExist) {
  ShardedFixture fx;
  write_bytes(fx.dir.path() / "model.safetensors", valid_file({{"only", "U8", {1}, "x"}}));
  const auto ck = qhx::Checkpoint::open(fx.dir.path());
  EXPECT_EQ(ck.names(), std::vector<std::string>{"only"});
}

TEST(Checkpoint, MissingShard) {
  ShardedFixture fx;
  fs::remove(fx.dir.path() / "model-00002-of-00002.safetensors");
  expect_checkpoint_error(fx.dir.path(), {"model.safetensors.index.json", "model-00002-of-00002.safetensors"});
}

TEST(Checkpoint, TensorAbsentFromItsShard) {
  ShardedFixture fx;
  fx.weight_map["model.layers.1.w"] = "model-00001-of-00002.safetensors";
  fx.write_index();
  expect_checkpoint_error(fx.index_path(), {"model.safetensors.index.json", "'model.layers.1.w'",
                                            "model-00001-of-00002.safetensors", "no such tensor"});
}

TEST(Checkpoint, CorruptShardNamesShardAndIndex) {
  ShardedFixture fx;
  write_bytes(fx.dir.path() / "model-00001-of-00002.safetensors", "abc");
  expect_checkpoint_error(fx.dir.path(),
                          {"model.safetensors.index.json", "model-00001-of-00002.safetensors", "too short"});
}

TEST(Checkpoint, ShardNamesMustStayInTheDirectory) {
  ShardedFixture fx;
  fx.weight_map["lm_head.weight"] = "../elsewhere.safetensors";
  fx.write_index();
  expect_checkpoint_error(fx.dir.path(), {"../elsewhere.safetensors", "path separator"});
  fx.weight_map["lm_head.weight"] = "/etc/passwd";
  fx.write_index();
  expect_checkpoint_error(fx.dir.path(), {"/etc/passwd", "path separator"});
  fx.weight_map["lm_head.weight"] = "..";
  fx.write_index();
  expect_checkpoint_error(fx.dir.path(), {"'..'", "directory reference"});
}

TEST(Checkpoint, MalformedIndex) {
  ShardedFixture fx;
  const std::pair<std::string, std::string> cases[] = {
      {"{\"weight_map\": ", "not valid JSON"},
      {"[]", "must be a JSON object"},
      {R"({"metadata": {}})", "missing \"weight_map\""},
      {R"({"weight_map": []})", "\"weight_map\" must be an object"},
      {R"({"weight_map": {}})", "is empty"},
      {R"({"weight_map": {"w": 3}})", "'w' must be a string"},
  };
  for (const auto& [text, phrase] : cases) {
    SCOPED_TRACE(text);
    write_bytes(fx.index_path(), text);
    expect_checkpoint_error(fx.index_path(), {"model.safetensors.index.json", phrase});
  }
}
