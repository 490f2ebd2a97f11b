#include "export/test_hooks.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace qhx::export_test {

void pause_at(const char* point) {
  const char* want = std::getenv("QHX_EXPORT_TEST_PAUSE_AT");
  if (want == nullptr || std::strcmp(want, point) != 0) return;
  std::fprintf(stderr, "qhx_export: paused at %s (test hook)\n", point);
  std::fflush(stderr);
  ::pause();  // until a signal: SIGKILL ends it here; a handled SIGINT resumes, and the export stops as interrupted
}

bool no_exchange() {
  const char* v = std::getenv("QHX_EXPORT_TEST_NO_EXCHANGE");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace qhx::export_test
