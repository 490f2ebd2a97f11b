#include "backends/delegate.hpp"
#include "common/shape_str.hpp"

#include <map>
#include <mutex>

#include "qhexrt/error.hpp"

namespace qhx {

// backends/builtin_backends.cpp: every backend built into this library registers there.
void register_builtin_backends();

namespace {

using Key = std::pair<std::string, std::string>;

std::map<Key, DelegateFactory>& registry() {
  static std::map<Key, DelegateFactory> r;
  return r;
}

std::map<std::string, BackendConfigurator>& configurators() {
  static std::map<std::string, BackendConfigurator> c;
  return c;
}

void ensure_builtin_backends() {
  static std::once_flag once;
  std::call_once(once, [] { register_builtin_backends(); });
}

}  // namespace

std::int64_t TensorRef::numel() const {
  std::int64_t n = 1;
  for (const auto d : shape) n *= d;
  return n;
}

std::filesystem::path blob_file(const GraphBlob& blob, const char* key) {
  const auto it = blob.spec.find(key);
  if (it == blob.spec.end() || !it->is_string())
    fail("graph \"", blob.name, "\": \"", key, "\" must name a file (a string)");
  return blob.dir / it->get<std::string>();
}

void register_delegate(const std::string& backend, const std::string& kind, DelegateFactory factory) {
  registry()[{backend, kind}] = std::move(factory);
}

void register_backend_configurator(const std::string& backend, BackendConfigurator configure) {
  configurators()[backend] = std::move(configure);
}

void configure_backend(const std::string& backend, const nlohmann::json& settings) {
  ensure_builtin_backends();
  const auto it = configurators().find(backend);
  if (it == configurators().end()) fail("backend \"", backend, "\" is not built into this QHexRT or takes no settings");
  it->second(settings);
}

std::unique_ptr<Delegate> create_delegate(const std::string& backend, const GraphBlob& blob) {
  ensure_builtin_backends();
  const auto it = registry().find({backend, blob.kind});
  if (it == registry().end()) {
    bool backend_known = false;
    for (const auto& [key, f] : registry()) backend_known |= key.first == backend;
    if (!backend_known) fail("graph \"", blob.name, "\": backend \"", backend, "\" is not built into this QHexRT");
    fail("graph \"", blob.name, "\": backend \"", backend, "\" has no graph kind \"", blob.kind, "\"");
  }
  auto d = it->second();
  d->init(blob);
  return d;
}

void check_io(const std::string& graph, std::span<const IoSpec> specs, std::span<const TensorRef> tensors,
              const char* what) {
  if (specs.size() != tensors.size())
    fail("graph \"", graph, "\": expected ", specs.size(), " ", what, ", got ", tensors.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const IoSpec& s = specs[i];
    const TensorRef& t = tensors[i];
    const bool dtype_ok = t.dtype == s.dtype || (s.f16 && s.dtype == DType::F32 && t.dtype == DType::F16);
    bool ok = dtype_ok && t.shape.size() == s.shape.size() && (t.data != nullptr || t.numel() == 0);
    for (std::size_t d = 0; ok && d < s.shape.size(); ++d)
      ok = s.shape[d] < 0 ? t.shape[d] >= 0 : t.shape[d] == s.shape[d];
    if (!ok)
      fail("graph \"", graph, "\": ", what, " \"", s.name, "\" must be ", dtype_name(s.dtype), s.f16 ? " (or F16)" : "",
           shape_str(s.shape), " (-1 = any), got ", dtype_name(t.dtype), shape_str(t.shape));
    if (t.group_rows != 0 && (s.layer_groups.empty() || t.group_rows < t.shape[0]))
      fail("graph \"", graph, "\": ", what, " \"", s.name, "\" is bound group-major (slabs of ", t.group_rows,
           " rows), which needs a KV tensor of layer groups and slabs of at least its ",
           t.shape.empty() ? 0 : t.shape[0], " rows");
  }
}

}  // namespace qhx
