// Where an export writes before its bundle exists (docs/bundle.md, "How a bundle is
// written"). The constructor checks OUT (export/out_dir.hpp), tidies what killed exports of
// OUT left beside it (formats/staging_names.hpp: a previous bundle moved aside goes back in
// place, dead staging folders are removed) and creates a fresh staging folder beside OUT.
// publish() records every file's checksum (checksums.json), syncs the folder and swaps it
// into place in one rename. Destroyed unpublished (an error on the way), it removes its
// folder: OUT is as it was. A kill at any moment leaves OUT as it was, or the new bundle.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "common/file_digest.hpp"

namespace qhx {

class StagedBundle {
 public:
  StagedBundle(const std::filesystem::path& out, const std::filesystem::path& source);
  ~StagedBundle();
  StagedBundle(const StagedBundle&) = delete;
  StagedBundle& operator=(const StagedBundle&) = delete;

  // Write the bundle's files here.
  const std::filesystem::path& dir() const { return dir_; }
  // Where publish() puts them: OUT, normalized (out_dir.hpp).
  const std::filesystem::path& out() const { return out_; }

  // The digest of a file of dir() its writer computed as it wrote (BundleWriter, DurableFile),
  // so publish() need not read it again; `name` relative to dir().
  void record(const std::string& name, const FileDigest& digest);
  // Writes checksums.json (reading the files not recorded once), syncs, and renames dir()
  // to out(), the previous bundle removed. `exchange` false: as where the file system cannot
  // swap two folders (RENAME_EXCHANGE), for the tests.
  void publish(bool exchange = true);
  // As publish(), to `at` instead of out() (a bundle kept aside: the export gate's failures);
  // `at` is checked as OUT is (out_dir.hpp) and must be on out()'s file system. Returns `at`
  // as checked.
  std::filesystem::path publish_aside(const std::filesystem::path& at, const std::filesystem::path& source,
                                      bool exchange = true);

 private:
  void publish_to(const std::filesystem::path& target, bool exchange);

  std::filesystem::path out_, dir_;
  std::string tag_;
  std::map<std::string, FileDigest> recorded_;
  bool published_ = false;
};

}  // namespace qhx
