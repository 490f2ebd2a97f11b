// A bundle's checksums (src/formats/bundle_checksums.hpp) and the files behind them
// (src/common/durable_file.hpp, file_digest.hpp): the digest computed while writing is the
// one a later read computes; check_bundle names a flipped byte, a truncated file, a
// missing one; a full disk and a file size limit are errors naming the file and the reason.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/durable_file.hpp"
#include "formats/bundle_checksums.hpp"
#include "export/bundle_writer.hpp"
#include "test_support.hpp"

namespace qhx {
namespace {

namespace fs = std::filesystem;
using test::expect_error;
using test::TempDir;

TEST(FileDigest, WhileWritingEqualsReadingBack) {
  TempDir dir;
  std::string big(3 << 20, '\0');  // past the write buffer, in pieces of several sizes
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 13);
  DurableFile f(dir.path() / "a.bin");
  std::size_t at = 0;
  for (const std::size_t n : {std::size_t{1}, std::size_t{4095}, std::size_t{1} << 20, std::size_t{3} << 19}) {
    f.write(big.data() + at, n);
    at += n;
  }
  f.write(big.data() + at, big.size() - at);
  const FileDigest d = f.close();
  EXPECT_EQ(d.bytes, big.size());
  EXPECT_EQ(d.xxh3_128.size(), 32u);
  EXPECT_EQ(d, digest_file(dir.path() / "a.bin"));
  EXPECT_EQ(test::read_file(dir.path() / "a.bin"), big);
  EXPECT_NE(write_file_durably(dir.path() / "b", "x").xxh3_128, write_file_durably(dir.path() / "c", "y").xxh3_128);
  // The canonical (big-endian) hex of XXH3-128, as xxh128sum prints it: "" and "abc".
  EXPECT_EQ(write_file_durably(dir.path() / "empty", "").xxh3_128, "99aa06d3014798d86001c324468d497f");
  EXPECT_EQ(write_file_durably(dir.path() / "abc", "abc").xxh3_128, "06b05ab6733a618578af5f94892f3950");
}

TEST(FileDigest, BundleWriterRecordsWhatItWrote) {
  TempDir dir;
  BundleWriter w(dir.path() / "w.bin", {{"role", "test"}, {"weights", "w8"}});
  add_matrix(w, "m.weight", WeightFormat::W8, 3, 40, std::vector<float>(120, 0.5f));
  w.finish();
  EXPECT_EQ(w.digest(), digest_file(dir.path() / "w.bin"));
}

TEST(DurableFile, AFullDiskIsAnErrorNamingTheFileAndTheReason) {
  expect_error(
      [] {
        DurableFile f("/dev/full");
        f.write("x", 1);
        f.close();
      },
      {"/dev/full", "No space left on device"});
  expect_error([] { DurableFile f("/nonexistent/dir/x"); }, {"cannot create /nonexistent/dir/x", "No such file"});
}

TEST(DurableFile, AFileSizeLimitIsAnErrorNotADeath) {
  // In a child: the limit (ulimit -f) and SIGXFSZ ignored, as qhx_export does.
  TempDir dir;
  const fs::path p = dir.path() / "big.bin";
  const fs::path msg = dir.path() / "message";
  const pid_t pid = fork();
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    const rlimit lim{64 * 1024, 64 * 1024};
    setrlimit(RLIMIT_FSIZE, &lim);
    std::string text = "no error";
    try {
      write_file_durably(p, std::string(200 * 1024, 'x'));
    } catch (const IoError& e) {
      text = e.what();
    }
    std::ofstream(msg) << text.substr(0, 1000);  // well under the limit
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  const std::string text = test::read_file(msg);
  EXPECT_NE(text.find(p.string()), std::string::npos) << text;
  EXPECT_NE(text.find("File too large"), std::string::npos) << text;
}

// A folder of three files and their checksums.json.
fs::path small_bundle(const TempDir& dir) {
  const fs::path b = dir.path() / "bundle";
  fs::create_directories(b / "onnx");
  std::map<std::string, FileDigest> files;
  files["a.bin"] = write_file_durably(b / "a.bin", std::string(1000, 'a'));
  files["config.json"] = write_file_durably(b / "config.json", "{}");
  files["onnx/g.onnx"] = write_file_durably(b / "onnx" / "g.onnx", "graph");
  write_checksums(b, files);
  return b;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

TEST(Checksums, AGoodBundlePassesAndEachDamageIsNamed) {
  TempDir dir;
  const fs::path b = small_bundle(dir);
  BundleCheck c = check_bundle(b);
  EXPECT_TRUE(c.ok()) << joined(c.problems);
  EXPECT_EQ(c.files, 3u);
  EXPECT_EQ(checksummed_files(b), (std::set<std::string>{"a.bin", "config.json", "onnx/g.onnx"}));

  std::ofstream(b / "notes.txt") << "mine";  // not listed: reported, not an error
  c = check_bundle(b);
  EXPECT_TRUE(c.ok());
  EXPECT_EQ(c.unlisted, std::vector<std::string>{"notes.txt"});

  std::string a = test::read_file(b / "a.bin");
  a[500] ^= 1;  // one bit
  std::ofstream(b / "a.bin", std::ios::binary) << a;
  std::ofstream(b / "config.json", std::ios::binary) << "{";  // truncated
  fs::remove(b / "onnx" / "g.onnx");
  c = check_bundle(b);
  ASSERT_EQ(c.problems.size(), 3u) << joined(c.problems);
  EXPECT_NE(c.problems[0].find((b / "a.bin").string() + ": its XXH3-128 differs"), std::string::npos) << c.problems[0];
  EXPECT_NE(c.problems[1].find((b / "config.json").string() + ": 1 bytes, checksums.json records 2"), std::string::npos)
      << c.problems[1];
  EXPECT_NE(c.problems[2].find((b / "onnx/g.onnx").string() + ": missing"), std::string::npos) << c.problems[2];
}

TEST(Checksums, NoChecksumsABadOneAndNamesOutsideTheBundle) {
  TempDir dir;
  const fs::path b = small_bundle(dir);
  fs::remove(b / "checksums.json");
  BundleCheck c = check_bundle(b);
  EXPECT_FALSE(c.has_checksums);
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_NE(c.problems[0].find("no checksums.json"), std::string::npos) << c.problems[0];
  std::ofstream(b / "checksums.json") << R"({"qhexrt_checksums": 1, "algorithm": "xxh3-128", "files": )"
                                      << R"({"../a.bin": {"bytes": 1, "xxh3_128": "00"}}})";
  c = check_bundle(b);
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_NE(c.problems[0].find("outside the bundle"), std::string::npos) << c.problems[0];
  EXPECT_EQ(checksummed_files(b), std::nullopt);
  std::ofstream(b / "checksums.json") << R"({"qhexrt_checksums": 2, "algorithm": "xxh3-128", "files": {}})";
  c = check_bundle(b);
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_NE(c.problems[0].find("newer"), std::string::npos) << c.problems[0];
  c = check_bundle(dir.path() / "nothing");
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_NE(c.problems[0].find("not a folder"), std::string::npos) << c.problems[0];
}

}  // namespace
}  // namespace qhx
