// Publishing a bundle (src/export/staged_bundle.hpp, out_dir.hpp, staging_names.hpp): a
// new OUT and a replaced one, with and without RENAME_EXCHANGE; what a dead export left
// beside OUT (staging folders, a bundle moved aside) and what a live one is doing; the
// OUT values refused. The export end to end, killed at chosen moments, is
// tests/python/test_export_kill.py.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include "export/bundle_manifests.hpp"
#include "export/out_dir.hpp"
#include "export/staged_bundle.hpp"
#include "formats/staging_names.hpp"
#include "formats/bundle_checksums.hpp"
#include "test_support.hpp"

namespace qhx {
namespace {

namespace fs = std::filesystem;
using test::expect_error;
using test::TempDir;

// A pid no process has: a child that has exited and been reaped.
long dead_pid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> n;
  for (const auto& e : fs::directory_iterator(dir)) n.push_back(e.path().filename().string());
  std::sort(n.begin(), n.end());
  return n;
}

// Publishes a "bundle" of one weights file holding `text`.
void publish(const fs::path& out, const fs::path& source, const std::string& text, bool exchange = true) {
  StagedBundle s(out, source);
  std::ofstream(s.dir() / "llm_shared_512.bin") << text;
  s.publish(exchange);
}

struct Dirs {
  TempDir tmp;
  fs::path out = tmp.path() / "models" / "bundle";
  fs::path source = tmp.path() / "ckpt";
  Dirs() { fs::create_directories(source); }
};

TEST(StagedBundle, ANewBundleAppearsWholeWithItsChecksums) {
  Dirs d;
  {
    StagedBundle s(d.out, d.source);
    EXPECT_EQ(s.dir().parent_path(), d.out.parent_path());  // same file system: one rename publishes
    EXPECT_FALSE(fs::exists(d.out));
    std::ofstream(s.dir() / "llm_shared_512.bin") << "weights";
    fs::create_directories(s.dir() / "onnx");
    std::ofstream(s.dir() / "onnx" / "graph.onnx") << "g";
    s.publish();
  }
  EXPECT_EQ(names_in(d.out), (std::vector<std::string>{"checksums.json", "llm_shared_512.bin", "onnx"}));
  EXPECT_EQ(names_in(d.out.parent_path()), std::vector<std::string>{"bundle"});  // no staging left
  const BundleCheck c = check_bundle(d.out);
  EXPECT_TRUE(c.ok()) << (c.problems.empty() ? "" : c.problems[0]);
  EXPECT_EQ(c.files, 2u);
}

TEST(StagedBundle, ReplacingSwapsTheWholeFolderWithOrWithoutExchange) {
  for (const bool exchange : {true, false}) {
    SCOPED_TRACE(exchange ? "RENAME_EXCHANGE" : "two renames");
    Dirs d;
    publish(d.out, d.source, "old");
    // As a bundle exported before checksums.json, with a file of an older export: replaced, not kept.
    fs::remove(d.out / "checksums.json");
    std::ofstream(d.out / "stale.bin") << "from an older export";
    publish(d.out, d.source, "new", exchange);
    EXPECT_EQ(test::read_file(d.out / "llm_shared_512.bin"), "new");
    EXPECT_FALSE(fs::exists(d.out / "stale.bin"));
    EXPECT_EQ(names_in(d.out.parent_path()), std::vector<std::string>{"bundle"});
    EXPECT_TRUE(check_bundle(d.out).ok());
  }
}

TEST(StagedBundle, AnUnpublishedStagingFolderIsRemovedAndOutUntouched) {
  Dirs d;
  publish(d.out, d.source, "old");
  const std::string before = test::read_file(d.out / "checksums.json");
  {
    StagedBundle s(d.out, d.source);
    std::ofstream(s.dir() / "llm_shared_512.bin") << "half";
  }  // an error on the way: no publish()
  EXPECT_EQ(names_in(d.out.parent_path()), std::vector<std::string>{"bundle"});
  EXPECT_EQ(test::read_file(d.out / "llm_shared_512.bin"), "old");
  EXPECT_EQ(test::read_file(d.out / "checksums.json"), before);
}

TEST(StagedBundle, LeftoversOfDeadExportsGoAndThoseOfLiveOnesStay) {
  Dirs d;
  publish(d.out, d.source, "old");
  const fs::path dead = sibling_path(d.out, SiblingKind::Staging, dead_pid(), "aaaa");
  const fs::path dead_backup = sibling_path(d.out, SiblingKind::Backup, dead_pid(), "bbbb");
  const fs::path live = sibling_path(d.out, SiblingKind::Staging, static_cast<long>(getppid()), "cccc");
  const fs::path other = d.out.parent_path() / ".bundle2.partial-1-x";  // another OUT's
  for (const auto& p : {dead, dead_backup, live, other}) fs::create_directories(p / "sub");
  EXPECT_EQ(siblings(d.out).size(), 3u);
  publish(d.out, d.source, "new");
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_FALSE(fs::exists(dead_backup));  // OUT was there: a backup is just a leftover
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other));
  // A leftover named with our own pid is from an earlier process that had it.
  const fs::path mine = sibling_path(d.out, SiblingKind::Staging, static_cast<long>(getpid()), "dddd");
  fs::create_directories(mine);
  publish(d.out, d.source, "newer");
  EXPECT_FALSE(fs::exists(mine));
}

TEST(StagedBundle, ABundleStrandedBesideAMissingOutIsNamedThenPutBack) {
  Dirs d;
  publish(d.out, d.source, "old");
  const fs::path backup = sibling_path(d.out, SiblingKind::Backup, dead_pid(), "eeee");
  fs::rename(d.out, backup);  // killed between the two renames of a publish without RENAME_EXCHANGE
  EXPECT_EQ(stranded_backup(d.out), backup);
  EXPECT_NE(missing_bundle_hint(d.out).find(backup.string()), std::string::npos) << missing_bundle_hint(d.out);
  {
    StagedBundle s(d.out, d.source);  // the next export puts it back first
    EXPECT_EQ(test::read_file(d.out / "llm_shared_512.bin"), "old");
    EXPECT_TRUE(check_bundle(d.out).ok());
  }  // and this one fails: the restored bundle stays
  EXPECT_EQ(test::read_file(d.out / "llm_shared_512.bin"), "old");
  EXPECT_EQ(names_in(d.out.parent_path()), std::vector<std::string>{"bundle"});
  EXPECT_EQ(missing_bundle_hint(d.out), "");
}

TEST(OutDir, DangerousValuesAreRefusedBeforeAnythingIsWritten) {
  Dirs d;
  std::ofstream(d.tmp.path() / "file") << "x";
  expect_error([&] { checked_out_dir(d.tmp.path() / "file", d.source); }, {"file", "not a folder"});
  expect_error([&] { checked_out_dir(d.source, d.source); }, {"checkpoint", "--hf"});
  expect_error([&] { checked_out_dir(d.tmp.path(), d.source); }, {"holds the checkpoint"});
  expect_error([&] { checked_out_dir("/", d.source); }, {"root"});
  // A folder that is not a bundle, and a bundle with a file of the user's in it.
  const fs::path notes = d.tmp.path() / "notes";
  fs::create_directories(notes);
  std::ofstream(notes / "my_notes.txt") << "x";
  std::ofstream(notes / "config.json") << "{}";
  expect_error([&] { checked_out_dir(notes, d.source); },
               {"not part of a QHexRT bundle", "my_notes.txt", "config.json"});
  publish(d.out, d.source, "old");
  std::ofstream(d.out / "my-manifest.json") << "{}";
  expect_error([&] { checked_out_dir(d.out, d.source); }, {"my-manifest.json", "would be lost"});
  EXPECT_EQ(entries_not_of_a_bundle(d.out), std::vector<std::string>{"my-manifest.json"});
}

TEST(OutDir, AcceptsEmptyFoldersOlderBundlesTrailingSlashesAndLinks) {
  Dirs d;
  const fs::path empty = d.tmp.path() / "empty";
  fs::create_directories(empty);
  EXPECT_EQ(checked_out_dir(empty, d.source), empty);
  const fs::path legacy = d.tmp.path() / "legacy";  // written before checksums.json, interrupted
  fs::create_directories(legacy / ".cpu-w8");
  for (const char* f : {"vis_native_512.bin", "llm_shared_512.bin.partial", "config.json", "tokenizer.json"})
    std::ofstream(legacy / f) << "x";
  EXPECT_EQ(checked_out_dir(legacy, d.source), legacy);
  EXPECT_EQ(checked_out_dir(legacy.string() + "/", d.source), legacy);
  EXPECT_EQ(checked_out_dir(d.tmp.path() / "new" / "deep", d.source), d.tmp.path() / "new" / "deep");
  EXPECT_TRUE(fs::is_directory(d.tmp.path() / "new"));  // the parent is made; OUT is not
  EXPECT_FALSE(fs::exists(d.tmp.path() / "new" / "deep"));
  // A link to a bundle folder: the folder it names is replaced, the link stays a link.
  fs::create_directory_symlink(legacy, d.tmp.path() / "current");
  EXPECT_EQ(checked_out_dir(d.tmp.path() / "current", d.source), legacy);
  publish(d.tmp.path() / "current", d.source, "via link");
  EXPECT_TRUE(fs::is_symlink(d.tmp.path() / "current"));
  EXPECT_EQ(test::read_file(legacy / "llm_shared_512.bin"), "via link");
}

}  // namespace
}  // namespace qhx

TEST(BundleNames, TheModelIsItsFamilyAndParametersRoundedDown) {
  EXPECT_EQ(qhx::model_name("qwen3vl", 2'127'532'032), "qwen3vl-2b");  // Qwen3-VL-2B's shapes
  EXPECT_EQ(qhx::model_name("qwen3vl", 8'767'123'696), "qwen3vl-8b");  // down, not to the nearest (9b)
  EXPECT_EQ(qhx::model_name("qwen3vl", 44'117'504), "qwen3vl-44m");
  EXPECT_EQ(qhx::model_name("qwen3vl", 999'999), "qwen3vl-999k");
  EXPECT_EQ(qhx::model_name("qwen3vl", 1'000), "qwen3vl-1k");
  EXPECT_EQ(qhx::model_name("qwen3vl", 999), "qwen3vl-999");
  EXPECT_EQ(qhx::model_name("qwen3vl", 1'500'000'000'000), "qwen3vl-1t");
  qhx::BundleFiles f = qhx::bundle_file_names("w8", 256);
  f.model = "qwen3vl-44m";
  EXPECT_EQ(qhx::vlm_manifest_name(f), "qwen3vl-44m-vlm-256.json");
  EXPECT_EQ(qhx::text_manifest_name(f), "qwen3vl-44m-text-256.json");
}
