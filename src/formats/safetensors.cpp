#include "qhexrt/safetensors.hpp"

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/json_limits.hpp"
#include "common/limits.hpp"
#include "common/mapped_file.hpp"
#include "qhexrt/error.hpp"

namespace qhx {

namespace fs = std::filesystem;
// Not ordered_json: its objects find a key by linear search, so a header of
// n tensors took O(n^2) to parse (minutes for 2^18 of them). The header order
// that tensors() promises is recorded while parsing instead.
using Json = nlohmann::json;

namespace {

constexpr std::size_t kLengthPrefixBytes = 8;

// Little-endian regardless of the host, as the format specifies.
std::uint64_t read_le_u64(const std::byte* p) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < 8; ++i) v |= std::to_integer<std::uint64_t>(p[i]) << (8 * i);
  return v;
}

std::string_view as_chars(const std::byte* p, std::size_t n) { return {reinterpret_cast<const char*>(p), n}; }

// Everything one header check needs to word its error message.
struct HeaderContext {
  const fs::path& path;
  std::size_t data_size;  // bytes after the header
};

[[noreturn]] void tensor_fail(const HeaderContext& ctx, const std::string& tensor, const std::string& problem) {
  fail(ctx.path.string(), ": tensor '", tensor, "': ", problem);
}

DType parse_dtype(const HeaderContext& ctx, const std::string& name, const Json& entry) {
  const auto it = entry.find("dtype");
  if (it == entry.end()) tensor_fail(ctx, name, "missing \"dtype\"");
  if (!it->is_string()) tensor_fail(ctx, name, cat("\"dtype\" must be a string, got ", it->type_name()));
  const auto& s = it->get_ref<const std::string&>();
  const std::optional<DType> d = dtype_from_name(s);
  if (!d) tensor_fail(ctx, name, cat("unsupported dtype '", s, "' (supported: F32 F16 BF16 I8 U8 I32 I64)"));
  return *d;
}

std::vector<std::int64_t> parse_shape(const HeaderContext& ctx, const std::string& name, const Json& entry) {
  const auto it = entry.find("shape");
  if (it == entry.end()) tensor_fail(ctx, name, "missing \"shape\"");
  if (!it->is_array()) tensor_fail(ctx, name, cat("\"shape\" must be an array, got ", it->type_name()));
  if (it->size() > limits::kTensorRank)
    tensor_fail(ctx, name,
                cat("shape has ", it->size(), " dimensions, over the limit of ", limits::kTensorRank,
                    " (limits::kTensorRank, docs/limits.md)"));
  std::vector<std::int64_t> shape;
  shape.reserve(it->size());
  for (const auto& dim : *it) {
    if (dim.is_number_unsigned()) {
      const auto v = dim.get<std::uint64_t>();
      if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        tensor_fail(ctx, name, cat("shape dimension ", v, " is too large"));
      shape.push_back(static_cast<std::int64_t>(v));
    } else if (dim.is_number_integer()) {
      tensor_fail(ctx, name, cat("negative shape dimension ", dim.get<std::int64_t>()));
    } else {
      tensor_fail(ctx, name, cat("shape dimensions must be integers, got ", dim.type_name()));
    }
  }
  return shape;
}

std::pair<std::uint64_t, std::uint64_t> parse_offsets(const HeaderContext& ctx, const std::string& name,
                                                      const Json& entry) {
  const auto it = entry.find("data_offsets");
  if (it == entry.end()) tensor_fail(ctx, name, "missing \"data_offsets\"");
  if (!it->is_array() || it->size() != 2)
    tensor_fail(ctx, name, "\"data_offsets\" must be an array of two integers [begin, end]");
  for (const auto& v : *it) {
    if (v.is_number_integer() && !v.is_number_unsigned())
      tensor_fail(ctx, name, cat("negative data offset ", v.get<std::int64_t>()));
    if (!v.is_number_unsigned()) tensor_fail(ctx, name, cat("data offsets must be integers, got ", v.type_name()));
  }
  return {(*it)[0].get<std::uint64_t>(), (*it)[1].get<std::uint64_t>()};
}

// Checked numel * dtype size: a shape like [2^40, 2^40] must be an error, not
// a wrapped-around small number that happens to match the offsets.
std::size_t byte_count(const HeaderContext& ctx, const std::string& name, const std::vector<std::int64_t>& shape,
                       DType dt) {
  std::uint64_t n = dtype_size(dt);
  for (const std::int64_t d : shape) {
    std::uint64_t next = 0;
    if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &next) ||
        next > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      tensor_fail(ctx, name, "shape too large: element count times dtype size overflows");
    n = next;
  }
  return static_cast<std::size_t>(n);
}

TensorView parse_tensor(const HeaderContext& ctx, const std::string& name, const Json& entry,
                        const std::byte* data_start) {
  if (!entry.is_object()) tensor_fail(ctx, name, cat("header entry must be an object, got ", entry.type_name()));
  TensorView t;
  t.name = name;
  t.dtype = parse_dtype(ctx, name, entry);
  t.shape = parse_shape(ctx, name, entry);
  const auto [begin, end] = parse_offsets(ctx, name, entry);
  if (begin > end) tensor_fail(ctx, name, cat("data_offsets begin ", begin, " > end ", end));
  if (end > ctx.data_size)
    tensor_fail(ctx, name,
                cat("data_offsets end ", end, " is past the end of the data section (", ctx.data_size,
                    " bytes); the file is truncated or the header is corrupt"));
  const std::size_t expected = byte_count(ctx, name, t.shape, t.dtype);
  if (end - begin != expected)
    tensor_fail(
        ctx, name,
        cat("data_offsets span ", end - begin, " bytes but shape and dtype ", dtype_name(t.dtype), " need ", expected));
  t.nbytes = expected;
  t.data = expected == 0 ? nullptr : data_start + begin;
  return t;
}

std::map<std::string, std::string> parse_metadata(const fs::path& path, const Json& meta) {
  if (!meta.is_object()) fail(path.string(), ": \"__metadata__\" must be an object, got ", meta.type_name());
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : meta.items()) {
    if (!value.is_string())
      fail(path.string(), ": \"__metadata__\" value for '", key, "' must be a string, got ", value.type_name());
    out.emplace(key, value.get<std::string>());
  }
  // QHexRT bundle files (docs/bundle.md) carry their format version here. A
  // reader takes every version up to its own and refuses newer ones.
  if (const auto it = out.find("qhexrt_bundle"); it != out.end()) {
    int version = 0;
    try {
      std::size_t used = 0;
      version = std::stoi(it->second, &used);
      if (used != it->second.size()) version = 0;
    } catch (const std::exception&) {
      version = 0;
    }
    if (version < 1) fail(path.string(), ": bundle format version \"", it->second, "\" is not a positive integer");
    if (version > kBundleFormatVersion)
      fail(path.string(), ": bundle format version ", version, " needs a newer QHexRT (this one reads up to ",
           kBundleFormatVersion, ")");
  }
  return out;
}

struct ParsedHeader {
  Json json;
  std::vector<std::string> order;  // the top-level keys as they appear
};

// nlohmann silently keeps the last of two equal keys; a checkpoint with a
// duplicated tensor name is corrupt, so catch it while parsing. The entry count
// and the nesting are bounded here too, before the tree grows from them.
ParsedHeader parse_header_json(const fs::path& path, std::string_view text) {
  ParsedHeader out;
  std::set<std::string> seen;
  Json::parser_callback_t on_event = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (static_cast<std::size_t>(depth) > limits::kJsonDepth)
      fail(path.string(), ": header nests deeper than ", limits::kJsonDepth,
           " levels (limits::kJsonDepth, docs/limits.md)");
    if (event == Json::parse_event_t::key && depth == 1) {
      auto key = parsed.get<std::string>();
      if (!seen.insert(key).second) fail(path.string(), ": duplicate tensor name '", key, "' in header");
      // One of them may be __metadata__.
      if (seen.size() > limits::kTensorsPerFile + 1)
        fail(path.string(), ": header has over ", limits::kTensorsPerFile,
             " tensors (limits::kTensorsPerFile, docs/limits.md)");
      out.order.push_back(std::move(key));
    }
    return true;
  };
  try {
    out.json = Json::parse(text.begin(), text.end(), on_event);
    return out;
  } catch (const Json::exception& e) {
    fail(path.string(), ": header is not valid JSON: ", e.what());
  }
}

// Tensors may sit in any order in the data section, but no byte may belong to
// two of them. Zero-size tensors own no bytes and cannot overlap.
void check_no_overlap(const fs::path& path, const std::vector<TensorView>& tensors, const std::byte* data_start) {
  std::vector<const TensorView*> by_begin;
  for (const auto& t : tensors)
    if (t.nbytes > 0) by_begin.push_back(&t);
  std::sort(by_begin.begin(), by_begin.end(),
            [](const TensorView* a, const TensorView* b) { return a->data < b->data; });
  for (std::size_t i = 1; i < by_begin.size(); ++i) {
    const TensorView& prev = *by_begin[i - 1];
    const TensorView& cur = *by_begin[i];
    if (cur.data < prev.data + prev.nbytes)
      fail(path.string(), ": tensors '", prev.name, "' [", prev.data - data_start, ", ",
           prev.data + prev.nbytes - data_start, ") and '", cur.name, "' [", cur.data - data_start, ", ",
           cur.data + cur.nbytes - data_start, ") overlap");
  }
}

}  // namespace

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;  // cannot overflow: validated when the header was parsed
  return n;
}

// ---------------------------------------------------------------------------
// SafetensorsFile

struct SafetensorsFile::Impl {
  MappedFile file;
  std::vector<TensorView> tensors;
  std::map<std::string, std::size_t, std::less<>> index;  // name -> position in tensors
  std::map<std::string, std::string> metadata;
};

SafetensorsFile::SafetensorsFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

namespace {

struct Header {
  std::vector<TensorView> tensors;
  std::map<std::string, std::string> metadata;
};

// The header and every tensor's byte range, checked against the file's size.
Header read_header(const MappedFile& file) {
  Header out;
  const fs::path& path = file.path();
  const std::byte* base = file.data();
  const std::size_t size = file.size();

  if (size < kLengthPrefixBytes)
    fail(path.string(), ": file is ", size, " bytes, too short for the 8-byte safetensors header length");
  const std::uint64_t header_len = read_le_u64(base);
  if (header_len > limits::kSafetensorsHeaderBytes)
    fail(path.string(), ": header length ", header_len, " exceeds the ", limits::kSafetensorsHeaderBytes,
         "-byte limit (limits::kSafetensorsHeaderBytes, docs/limits.md)");
  if (header_len > size - kLengthPrefixBytes)
    fail(path.string(), ": header length ", header_len, " exceeds the ", size - kLengthPrefixBytes,
         " bytes that follow it (truncated or not a safetensors file)");

  const auto header_size = static_cast<std::size_t>(header_len);
  const ParsedHeader parsed = parse_header_json(path, as_chars(base + kLengthPrefixBytes, header_size));
  const Json& header = parsed.json;
  if (!header.is_object()) fail(path.string(), ": header must be a JSON object, got ", header.type_name());

  const std::byte* data_start = base + kLengthPrefixBytes + header_size;
  const HeaderContext ctx{path, size - kLengthPrefixBytes - header_size};
  for (const std::string& name : parsed.order) {
    const Json& entry = *header.find(name);
    if (name == "__metadata__") {
      out.metadata = parse_metadata(path, entry);
      continue;
    }
    out.tensors.push_back(parse_tensor(ctx, name, entry, data_start));
  }
  check_no_overlap(path, out.tensors, data_start);
  return out;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const fs::path& path, FileResidency residency) {
  auto impl = std::make_unique<Impl>();
  impl->file = MappedFile(path, residency == FileResidency::InMemory);
  // A file truncated between open and here reads zeros: say so, not "corrupt header".
  Header header = impl->file.parse(read_header);
  impl->tensors = std::move(header.tensors);
  impl->metadata = std::move(header.metadata);
  for (std::size_t i = 0; i < impl->tensors.size(); ++i) impl->index.emplace(impl->tensors[i].name, i);
  return SafetensorsFile(std::move(impl));
}

const fs::path& SafetensorsFile::path() const { return impl_->file.path(); }

const std::vector<TensorView>& SafetensorsFile::tensors() const { return impl_->tensors; }

const TensorView* SafetensorsFile::find(std::string_view name) const {
  const auto it = impl_->index.find(name);
  return it == impl_->index.end() ? nullptr : &impl_->tensors[it->second];
}

const TensorView& SafetensorsFile::get(std::string_view name) const {
  const TensorView* t = find(name);
  if (t == nullptr) fail(path().string(), ": no tensor named '", name, "'");
  return *t;
}

const std::map<std::string, std::string>& SafetensorsFile::metadata() const { return impl_->metadata; }

// ---------------------------------------------------------------------------
// Checkpoint

namespace {

// What a Checkpoint holds, built by free functions (Checkpoint::Impl is private).
struct CheckpointParts {
  fs::path origin;  // what the caller opened, for error messages
  // The views below point into these files' Impl objects, which live on the
  // heap: moving a SafetensorsFile (or growing this vector) does not move them.
  std::vector<SafetensorsFile> files;
  std::map<std::string, const TensorView*, std::less<>> by_name;
};

}  // namespace

struct Checkpoint::Impl {
  CheckpointParts parts;
};

Checkpoint::Checkpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;
Checkpoint::~Checkpoint() = default;

namespace {

Json read_index_json(const fs::path& index_path) {
  const MappedFile file(index_path);
  return file.parse([&](const MappedFile& f) {
    const std::string_view text = as_chars(f.data(), f.size());
    check_json_text(text, index_path.string());
    try {
      return Json::parse(text);
    } catch (const Json::exception& e) {
      fail(index_path.string(), ": not valid JSON: ", e.what());
    }
  });
}

// Shards must sit next to the index: a name that reaches elsewhere would let a
// downloaded index make us map arbitrary files.
void check_shard_name(const fs::path& index_path, const std::string& tensor, const std::string& shard) {
  if (shard.empty()) fail(index_path.string(), ": weight_map entry for '", tensor, "' is an empty shard name");
  if (shard.find('/') != std::string::npos || shard.find('\\') != std::string::npos)
    fail(index_path.string(), ": shard name '", shard, "' (for tensor '", tensor,
         "') contains a path separator; shards must be plain file names in the index's directory");
  if (shard == "." || shard == "..")
    fail(index_path.string(), ": shard name '", shard, "' (for tensor '", tensor, "') is a directory reference");
}

// weight_map as tensor -> shard, validated, before any shard is opened.
std::map<std::string, std::string> read_weight_map(const fs::path& index_path) {
  const Json index = read_index_json(index_path);
  if (!index.is_object()) fail(index_path.string(), ": index must be a JSON object, got ", index.type_name());
  const auto it = index.find("weight_map");
  if (it == index.end()) fail(index_path.string(), ": missing \"weight_map\"");
  if (!it->is_object()) fail(index_path.string(), ": \"weight_map\" must be an object, got ", it->type_name());
  if (it->empty()) fail(index_path.string(), ": \"weight_map\" is empty");
  std::map<std::string, std::string> out;
  for (const auto& [tensor, shard] : it->items()) {
    if (!shard.is_string())
      fail(index_path.string(), ": weight_map entry for '", tensor, "' must be a string, got ", shard.type_name());
    check_shard_name(index_path, tensor, shard.get<std::string>());
    out.emplace(tensor, shard.get<std::string>());
  }
  return out;
}

SafetensorsFile open_shard(const fs::path& index_path, const std::string& shard, FileResidency residency) {
  try {
    return SafetensorsFile::open(index_path.parent_path() / shard, residency);
  } catch (const Error& e) {
    fail(index_path.string(), ": cannot use shard '", shard, "': ", e.what());
  }
}

CheckpointParts open_single(const fs::path& file, FileResidency residency) {
  CheckpointParts parts;
  parts.origin = file;
  parts.files.push_back(SafetensorsFile::open(file, residency));
  for (const auto& t : parts.files.back().tensors()) parts.by_name.emplace(t.name, &t);
  return parts;
}

CheckpointParts open_index(const fs::path& index_path, FileResidency residency) {
  const auto weight_map = read_weight_map(index_path);
  CheckpointParts parts;
  parts.origin = index_path;
  std::map<std::string, std::size_t> shard_slot;  // each distinct shard is mapped once
  for (const auto& [tensor, shard] : weight_map) {
    auto [it, inserted] = shard_slot.emplace(shard, parts.files.size());
    if (inserted) parts.files.push_back(open_shard(index_path, shard, residency));
    const TensorView* view = parts.files[it->second].find(tensor);
    if (view == nullptr)
      fail(index_path.string(), ": weight_map puts tensor '", tensor, "' in shard '", shard,
           "', but that shard has no such tensor");
    parts.by_name.emplace(tensor, view);
  }
  return parts;
}

CheckpointParts open_any(const fs::path& path, FileResidency residency) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) fail(path.string(), ": no such file or directory");
  if (fs::is_directory(status)) {
    if (fs::exists(path / "model.safetensors")) return open_single(path / "model.safetensors", residency);
    if (fs::exists(path / "model.safetensors.index.json"))
      return open_index(path / "model.safetensors.index.json", residency);
    fail(path.string(), ": directory has neither model.safetensors nor model.safetensors.index.json");
  }
  if (path.extension() == ".json") return open_index(path, residency);
  return open_single(path, residency);
}

}  // namespace

Checkpoint Checkpoint::open(const fs::path& path, FileResidency residency) {
  auto impl = std::make_unique<Impl>();
  impl->parts = open_any(path, residency);
  return Checkpoint(std::move(impl));
}

const TensorView* Checkpoint::find(std::string_view name) const {
  const auto it = impl_->parts.by_name.find(name);
  return it == impl_->parts.by_name.end() ? nullptr : it->second;
}

const TensorView& Checkpoint::get(std::string_view name) const {
  const TensorView* t = find(name);
  if (t == nullptr) fail(impl_->parts.origin.string(), ": checkpoint has no tensor named '", name, "'");
  return *t;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(impl_->parts.by_name.size());
  for (const auto& entry : impl_->parts.by_name) out.push_back(entry.first);
  return out;
}

std::size_t Checkpoint::shard_count() const { return impl_->parts.files.size(); }

}  // namespace qhx
