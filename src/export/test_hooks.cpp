#include "export/test_hooks.hpp"

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace qhx::export_test {

void pause_at(const char* point) {
  const char* want = std::getenv("QHX_EXPORT_TEST_PAUSE_AT");
  if (want == nullptr || std::strcmp(want, point) != 0) return;
  // SIGINT and SIGTERM blocked from before the line is printed until sigsuspend waits, so
  // one sent as soon as the line is read is not lost in between.
  sigset_t stop, old;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigprocmask(SIG_BLOCK, &stop, &old);
  std::fprintf(stderr, "qhx_export: paused at %s (test hook)\n", point);
  std::fflush(stderr);
  // Until a signal: SIGKILL ends it here; after a handled SIGINT the export goes on and stops as interrupted.
  sigsuspend(&old);
  sigprocmask(SIG_SETMASK, &old, nullptr);
}

bool no_exchange() {
  const char* v = std::getenv("QHX_EXPORT_TEST_NO_EXCHANGE");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace qhx::export_test
