#include "export/bundle_writer.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>

#include <nlohmann/json.hpp>

#include "backends/cpu/stored_panels.hpp"
#include "common/durable_file.hpp"
#include "common/shape_str.hpp"
#include "qhexrt/error.hpp"
#include "qhexrt/safetensors.hpp"

namespace qhx {

// Tensor bytes are written as they sit in memory; safetensors is little-endian.
static_assert(std::endian::native == std::endian::little, "BundleWriter assumes a little-endian host");

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

namespace {

// numel * dtype_size, checked for negative dimensions and overflow.
std::uint64_t byte_count(const std::string& name, DType dtype, const std::vector<std::int64_t>& shape) {
  std::uint64_t n = dtype_size(dtype);
  for (const std::int64_t d : shape) {
    if (d < 0) fail("tensor '", name, "': negative dimension in shape ", shape_str(shape));
    std::uint64_t next = 0;
    if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &next) ||
        next > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      fail("tensor '", name, "': shape ", shape_str(shape), " is too large");
    n = next;
  }
  return n;
}

// Zero bytes for the gaps before tensors.
void write_zeros(DurableFile& f, std::uint64_t n) {
  static constexpr char kZeros[kBundleAlignment] = {};
  while (n > 0) {
    const std::size_t k = n < sizeof kZeros ? static_cast<std::size_t>(n) : sizeof kZeros;
    f.write(kZeros, k);
    n -= k;
  }
}

// Passes one tensor's bytes to the file, holding the producer to its declared size.
class TensorSink final : public ByteSink {
 public:
  TensorSink(DurableFile& file, std::uint64_t expected) : file_(file), expected_(expected) {}
  void write(const void* data, std::size_t n) override {
    if (n > expected_ - written_)
      fail("the producer wrote more than the ", expected_, " bytes its dtype and shape need");
    file_.write(data, n);
    written_ += n;
  }
  std::uint64_t written() const { return written_; }

 private:
  DurableFile& file_;
  std::uint64_t expected_;
  std::uint64_t written_ = 0;
};

}  // namespace

BundleWriter::BundleWriter(fs::path path, std::map<std::string, std::string> metadata)
    : path_(std::move(path)), metadata_(std::move(metadata)) {
  const auto role = metadata_.find("role");
  if (role == metadata_.end() || role->second.empty())
    fail(path_.string(), ": bundle metadata needs a non-empty \"role\"");
  const auto weights = metadata_.find("weights");
  if (weights == metadata_.end()) fail(path_.string(), ": bundle metadata needs \"weights\" (w8, w4, f16 or f32)");
  const auto f = parse_weight_format(weights->second);
  if (!f) fail(path_.string(), ": bundle metadata \"weights\": '", weights->second, "' is not w8, w4, f16 or f32");
  weights_ = *f;
  if (const auto b = metadata_.find("w4_block"); b != metadata_.end()) {
    if (b->second != "32" && b->second != "64" && b->second != "128")
      fail(path_.string(), ": bundle metadata \"w4_block\": '", b->second, "' is not 32, 64 or 128");
    w4_block_ = std::stoi(b->second);
  }
  if (const auto sc = metadata_.find("w4_scales"); sc != metadata_.end()) {
    const auto how = parse_w4_scales(sc->second);
    if (!how) fail(path_.string(), ": bundle metadata \"w4_scales\": '", sc->second, "' is not lpbq or free");
    if (*how == W4Scales::Free && w4_block_ != kW4Group)
      fail(path_.string(), ": bundle metadata \"w4_scales\" free takes \"w4_block\" 32, not ", w4_block_);
    w4_scales_ = *how;
  }
  if (metadata_.count("qhexrt_bundle") != 0)
    fail(path_.string(), ": bundle metadata \"qhexrt_bundle\" is set by the writer (the version its tensors need)");
}

void BundleWriter::require_version(int version) {
  if (version < 1 || version > kBundleFormatVersion)
    fail(path_.string(), ": bundle format version ", version, " is not one this writer writes (1 to ",
         kBundleFormatVersion, ")");
  version_ = std::max(version_, version);
}

BundleWriter::~BundleWriter() = default;

void BundleWriter::add(const std::string& name, DType dtype, std::vector<std::int64_t> shape, Producer produce) {
  if (finished_) fail(path_.string(), ": tensor '", name, "' added after finish()");
  if (name.empty()) fail(path_.string(), ": empty tensor name");
  if (name.rfind("__", 0) == 0)
    fail(path_.string(), ": tensor name '", name, "' starts with \"__\", which is reserved (__metadata__, __pad.<n>)");
  for (const Entry& e : entries_)
    if (e.name == name) fail(path_.string(), ": tensor '", name, "' added twice");
  if (!produce) fail(path_.string(), ": tensor '", name, "' has no producer");
  std::uint64_t nbytes = 0;
  try {
    nbytes = byte_count(name, dtype, shape);
  } catch (const Error& e) {
    fail(path_.string(), ": ", e.what());
  }
  entries_.push_back(Entry{name, dtype, std::move(shape), nbytes, std::move(produce), false});
}

void BundleWriter::add(const std::string& name, DType dtype, std::vector<std::int64_t> shape,
                       std::span<const std::byte> bytes) {
  auto copy = std::make_shared<std::vector<std::byte>>(bytes.begin(), bytes.end());
  add(name, dtype, std::move(shape), [copy](ByteSink& sink) { sink.write(copy->data(), copy->size()); });
  entries_.back().given = true;
}

void BundleWriter::add_f32(const std::string& name, std::vector<std::int64_t> shape, std::span<const float> values) {
  add(name, DType::F32, std::move(shape), std::as_bytes(values));
}

void BundleWriter::finish() {
  if (finished_) fail(path_.string(), ": finish() called twice");
  finished_ = true;

  // Layout: each tensor at the next multiple of 64 of the data section, the gap
  // before it listed as a pad entry. The data section itself starts 64-aligned
  // in the file, so data offsets and file offsets agree modulo 64.
  struct Placed {
    const Entry* entry;  // nullptr: a pad
    std::string name;
    std::uint64_t begin, end;
  };
  std::vector<Placed> placed;
  std::uint64_t cursor = 0;
  std::size_t pads = 0;
  // Tensors whose bytes were given (vectors, shapes: what a loader reads at open) come
  // first, together, so opening a file that is not in the page cache reads a few
  // contiguous pages rather than faulting in one page between each pair of matrices.
  // Producers run in add() order within each group (a matrix's scales follow it).
  std::stable_partition(entries_.begin(), entries_.end(), [](const Entry& e) { return e.given; });
  for (const Entry& e : entries_) {
    if (const std::uint64_t rem = cursor % kBundleAlignment; rem != 0) {
      const std::uint64_t gap = kBundleAlignment - rem;
      placed.push_back({nullptr, "__pad." + std::to_string(pads++), cursor, cursor + gap});
      cursor += gap;
    }
    placed.push_back({&e, e.name, cursor, cursor + e.nbytes});
    cursor += e.nbytes;
  }

  Json header = Json::object();
  Json meta = Json::object();
  for (const auto& [k, v] : metadata_) meta[k] = v;
  meta["qhexrt_bundle"] = std::to_string(version_);
  header["__metadata__"] = std::move(meta);
  for (const Placed& p : placed) {
    const bool pad = p.entry == nullptr;
    header[p.name] = {
        {"dtype", dtype_name(pad ? DType::U8 : p.entry->dtype)},
        {"shape", pad ? std::vector<std::int64_t>{static_cast<std::int64_t>(p.end - p.begin)} : p.entry->shape},
        {"data_offsets", {p.begin, p.end}}};
  }
  std::string text = header.dump();
  const std::size_t used = (8 + text.size()) % kBundleAlignment;
  if (used != 0) text.append(kBundleAlignment - used, ' ');  // trailing spaces: valid JSON, accepted by readers

  const fs::path partial = fs::path(path_.string() + ".partial");
  try {
    DurableFile out(partial);
    unsigned char len[8];
    for (std::size_t i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((text.size() >> (8 * i)) & 0xFF);
    out.write(len, sizeof len);
    out.write(text.data(), text.size());
    for (const Placed& p : placed) {
      if (p.entry == nullptr) {
        write_zeros(out, p.end - p.begin);
        continue;
      }
      try {
        TensorSink sink(out, p.entry->nbytes);
        p.entry->produce(sink);
        if (sink.written() != p.entry->nbytes)
          fail("the producer wrote ", sink.written(), " bytes, but ", dtype_name(p.entry->dtype), " ",
               shape_str(p.entry->shape), " needs ", p.entry->nbytes);
      } catch (const IoError&) {
        throw;  // the file's fault, not the tensor's
      } catch (const Error& e) {
        fail("tensor '", p.name, "': ", e.what());
      }
    }
    digest_ = out.close();
    std::error_code ec;
    fs::rename(partial, path_, ec);
    if (ec) fail("cannot rename ", partial.string(), " to it: ", ec.message());
  } catch (const IoError& e) {
    std::error_code ignored;
    fs::remove(partial, ignored);
    throw IoError(cat(path_.string(), ": ", e.what()));
  } catch (const Error& e) {
    std::error_code ignored;
    fs::remove(partial, ignored);
    fail(path_.string(), ": ", e.what());
  } catch (...) {
    std::error_code ignored;
    fs::remove(partial, ignored);
    throw;
  }
}

// ---------------------------------------------------------------------------
// Matrices

WeightFormat add_matrix(BundleWriter& w, const std::string& name, WeightFormat f, std::int64_t rows, std::int64_t cols,
                        RowSource rows_of) {
  if (rows < 0 || cols < 0) fail(w.path().string(), ": matrix '", name, "': negative shape [", rows, ", ", cols, "]");
  if (!rows_of) fail(w.path().string(), ": matrix '", name, "' has no row source");
  const std::int64_t block = w.w4_block();
  const W4Scales how = w.w4_scales();
  const WeightFormat sf = matrix_storage_format(f, cols, block);
  const auto ucols = static_cast<std::size_t>(cols);
  // The scales are computed with the matrix and written right after it.
  struct Shared {
    RowSource rows_of;
    std::vector<float> scales;
    std::vector<float> channel_scales;  // w4
    bool ready = false;
  };
  auto shared = std::make_shared<Shared>(Shared{std::move(rows_of), {}, {}, false});

  w.add(name, stored_dtype(sf), stored_shape(sf, rows, cols),
        [shared, sf, rows, cols, ucols, block, how](ByteSink& sink) {
          std::vector<float> row(ucols);
          std::vector<std::uint8_t> bytes(sf == WeightFormat::F32   ? ucols * 4
                                          : sf == WeightFormat::F16 ? ucols * 2
                                          : sf == WeightFormat::W8  ? ucols
                                                                    : ucols / 2);
          std::vector<std::uint16_t> h(sf == WeightFormat::F16 ? ucols : 0);
          std::vector<std::int8_t> q(sf == WeightFormat::W8 ? ucols : 0);
          const std::size_t per_row = sf == WeightFormat::W8 ? 1 : sf == WeightFormat::W4 ? ucols / kW4Group : 0;
          shared->scales.assign(static_cast<std::size_t>(rows) * per_row, 0.0f);
          shared->channel_scales.assign(
              sf == WeightFormat::W4 && how == W4Scales::Lpbq ? static_cast<std::size_t>(rows) : 0, 0.0f);
          for (std::int64_t r = 0; r < rows; ++r) {
            float* scales = shared->scales.data() + static_cast<std::size_t>(r) * per_row;
            try {
              shared->rows_of(r, row.data());
              switch (sf) {
                case WeightFormat::F32:
                  for (std::size_t c = 0; c < ucols; ++c)
                    if (!std::isfinite(row[c])) fail("value ", row[c], " at column ", c, " is not finite");
                  std::memcpy(bytes.data(), row.data(), bytes.size());
                  break;
                case WeightFormat::F16:
                  quantize_f16_row(row.data(), cols, h.data());
                  std::memcpy(bytes.data(), h.data(), bytes.size());
                  break;
                case WeightFormat::W8:
                  scales[0] = quantize_w8_row(row.data(), cols, q.data());
                  std::memcpy(bytes.data(), q.data(), bytes.size());
                  break;
                case WeightFormat::W4: {
                  const float channel = quantize_w4_row(row.data(), cols, block, bytes.data(), scales, how);
                  if (how == W4Scales::Lpbq) shared->channel_scales[static_cast<std::size_t>(r)] = channel;
                  break;
                }
              }
            } catch (const Error& e) {
              fail("row ", r, ": ", e.what());
            }
            sink.write(bytes.data(), bytes.size());
          }
          shared->ready = true;
        });
  if (sf == WeightFormat::W8 || sf == WeightFormat::W4) {
    w.add(name + ".scale", DType::F32, scale_shape(sf, rows, cols), [shared, name](ByteSink& sink) {
      if (!shared->ready) fail("the scales of '", name, "' were asked for before the matrix was written");
      sink.write(std::span<const float>(shared->scales));
      shared->scales = {};
    });
  }
  if (sf == WeightFormat::W4 && how == W4Scales::Lpbq) {
    w.add(name + ".channel_scale", DType::F32, {rows}, [shared, name](ByteSink& sink) {
      if (!shared->ready) fail("the channel scales of '", name, "' were asked for before the matrix was written");
      sink.write(std::span<const float>(shared->channel_scales));
      shared->channel_scales = {};
    });
  }
  return sf;
}

WeightFormat add_matrix(BundleWriter& w, const std::string& name, WeightFormat f, std::int64_t rows, std::int64_t cols,
                        std::vector<float> values) {
  if (rows < 0 || cols < 0 || values.size() != static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols))
    fail(w.path().string(), ": matrix '", name, "': ", values.size(), " values for shape [", rows, ", ", cols, "]");
  auto data = std::make_shared<std::vector<float>>(std::move(values));
  return add_matrix(w, name, f, rows, cols, [data, cols](std::int64_t r, float* out) {
    std::memcpy(out, data->data() + r * cols, static_cast<std::size_t>(cols) * sizeof(float));
  });
}

void add_w8_panel_matrix(BundleWriter& w, const std::string& name, std::int64_t rows, std::int64_t cols,
                         RowSource rows_of) {
  constexpr std::int64_t P = cpu::kStoredPanel;
  if (rows <= 0 || cols <= 0)
    fail(w.path().string(), ": panel matrix '", name, "': shape [", rows, ", ", cols, "] is not positive");
  if (cols > cpu::kInt8MaxCols)
    fail(w.path().string(), ": panel matrix '", name, "': ", cols, " input features exceed the int8 path's limit of ",
         cpu::kInt8MaxCols);
  if (!rows_of) fail(w.path().string(), ": matrix '", name, "' has no row source");
  w.require_version(2);
  const std::int64_t panels = (rows + P - 1) / P, k4 = (cols + 3) / 4;
  // Row sums and scales are computed with the panels and written right after them.
  struct Shared {
    RowSource rows_of;
    std::vector<std::int32_t> sums;
    std::vector<float> scales;
    bool ready = false;
  };
  auto shared = std::make_shared<Shared>(Shared{std::move(rows_of), {}, {}, false});
  w.add(name + ".panels", DType::I8, {panels, k4, P, 4}, [shared, rows, cols, panels, k4](ByteSink& sink) {
    std::vector<float> row(static_cast<std::size_t>(cols));
    std::vector<std::int8_t> q(static_cast<std::size_t>(cols));
    std::vector<std::int8_t> panel(static_cast<std::size_t>(k4 * P * 4));
    shared->sums.assign(static_cast<std::size_t>(panels * P), 0);
    shared->scales.assign(static_cast<std::size_t>(panels * P), 0.0f);
    for (std::int64_t p = 0; p < panels; ++p) {
      std::fill(panel.begin(), panel.end(), std::int8_t{0});  // rows and columns past the edges stay 0
      for (std::int64_t j = 0; j < P && p * P + j < rows; ++j) {
        const std::int64_t r = p * P + j;
        try {
          shared->rows_of(r, row.data());
          shared->scales[static_cast<std::size_t>(r)] = quantize_w8_row(row.data(), cols, q.data());
        } catch (const Error& e) {
          fail("row ", r, ": ", e.what());
        }
        std::int32_t sum = 0;
        for (std::int64_t c = 0; c < cols; ++c) {
          panel[static_cast<std::size_t>((c / 4) * P * 4 + j * 4 + c % 4)] = q[static_cast<std::size_t>(c)];
          sum += q[static_cast<std::size_t>(c)];
        }
        shared->sums[static_cast<std::size_t>(r)] = sum;
      }
      sink.write(panel.data(), panel.size());
    }
    shared->ready = true;
  });
  w.add(name + ".row_sums", DType::I32, {panels * P}, [shared, name](ByteSink& sink) {
    if (!shared->ready) fail("the row sums of '", name, "' were asked for before its panels were written");
    sink.write(std::span<const std::int32_t>(shared->sums));
    shared->sums = {};
  });
  w.add(name + ".scale", DType::F32, {panels * P}, [shared, name](ByteSink& sink) {
    if (!shared->ready) fail("the scales of '", name, "' were asked for before its panels were written");
    sink.write(std::span<const float>(shared->scales));
    shared->scales = {};
  });
  const std::int64_t shape[2] = {rows, cols};
  w.add(name + ".shape", DType::I64, {2}, std::as_bytes(std::span<const std::int64_t>(shape)));
}

}  // namespace qhx
