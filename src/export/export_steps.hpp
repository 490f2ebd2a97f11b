// What the CPU and the qnn-htp exports share (export_bundle.cpp, export_qnn.cpp).
#pragma once

#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/file_digest.hpp"
#include "common/test_hooks.hpp"
#include "formats/quantize.hpp"
#include "export/bundle_manifests.hpp"
#include "qhexrt/error.hpp"
#include "qhexrt/export.hpp"

namespace qhx {

class StagedBundle;

// The test programs' seams (common/test_hooks.hpp, docs/bundle.md "Test hooks"): an export
// point where a test may pause the export, and whether to publish without RENAME_EXCHANGE.
inline void export_point(const char* point) {
  if (const auto hook = test_hooks::hooks().export_point) hook(point);
}
inline bool export_no_exchange() {
  const auto hook = test_hooks::hooks().export_no_exchange;
  return hook != nullptr && hook();
}

struct WrittenFiles {
  BundleFiles names;
  std::string vlm_manifest, text_manifest;    // file names
  std::map<std::string, FileDigest> digests;  // of every file written, computed as it was written
  std::size_t smoothed_channels = 0;          // outlier channels folded into the weights
  std::vector<std::string> notes;             // for ExportSummary::notes (the w4 keep rule's measurement)
};

// The w4 scheme an export writes: ExportOptions::w4_scales resolved by target, and its block
// (free scales: groups of 32; LPBQ: w4_block, 64 by default). Throws on a bad combination.
struct W4Plan {
  W4Scales scales = W4Scales::Free;
  std::int64_t block = kW4Group;
};
W4Plan w4_plan(const ExportOptions& o);

// Stops the export with an error when ExportOptions::cancelled says so.
void check_cancelled(const ExportOptions& o);

// The options and the checkpoint a CPU bundle is made from, checked before anything is written.
void check_cpu_export(const ExportOptions& o);

// A CPU bundle's files (weights, tables, tokenizer, config, template, the two manifests)
// written into `dir`, which is not published: the caller stages and publishes.
WrittenFiles write_cpu_bundle(const ExportOptions& o, const std::filesystem::path& dir);

// The summary of a bundle just published by `stage`.
ExportSummary published_summary(const StagedBundle& stage, const std::string& vlm_manifest,
                                const std::string& text_manifest);

// Publishes `stage`, first through the export gate when o.verify asks: a bundle that fails it
// is not published (kept at "<OUT>.failed" with o.keep_failed, else removed); the summary
// says which, with the gate's report.
ExportSummary gate_and_publish(StagedBundle& stage, const ExportOptions& o, const std::string& vlm_manifest,
                               const std::string& text_manifest);

// Runs `f`, adding to an error that OUT was left alone: an export that fails publishes nothing.
template <typename F>
ExportSummary abandon_on_error(const ExportOptions& o, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {  // qhx::Error, or std::filesystem's
    throw Error(cat(e.what(), "\n(nothing was published: ", o.out_dir.string(), " is as it was before the export)"));
  }
}

}  // namespace qhx
