// The test hooks of the tools and tests (common/test_hooks.hpp), read from the environment
// when the program starts, so tests can make a run show what it would otherwise hide:
//
//   QHX_TEST_POISON_STATE=1            every new session state buffer starts as 0xFF bytes
//                                      (NaN as f32 and f16, -1 as int8), so a graph or a stage
//                                      that reads state it never wrote shows it in its output; a
//                                      buffer fresh from the system is zeros and would hide such
//                                      a read until the allocator hands back used memory
//   QHX_EXPORT_TEST_PAUSE_AT=<point>   at <point>, print "qhx_export: paused at <point>" to
//                                      stderr and wait for a signal (SIGKILL; after a SIGINT
//                                      the export goes on, to stop as interrupted), so
//                                      tests/python/test_export_kill.py kills an export at a
//                                      known moment rather than after a guessed delay
//   QHX_EXPORT_TEST_NO_EXCHANGE=1      publish as on a file system without RENAME_EXCHANGE
//
// Export points, in order: staged (the staging folder exists, empty), writing (half the
// tensor bytes written), written (every file written, no checksums.json yet), publish
// (staging complete and synced), moved-aside (no-exchange path only: the previous bundle
// renamed away, the new one not yet in place), swapped (the new bundle at OUT, the previous
// one not yet removed).
#include "common/test_hooks.hpp"

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace qhx::test_hooks {
namespace {

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

void poison(void* data, std::size_t bytes) { std::memset(data, 0xFF, bytes); }

bool env_is_1(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, "1") == 0;
}

// Installed before main: every tool and test program links this file.
const bool installed = [] {
  Hooks& h = hooks();
  if (env_is_1("QHX_TEST_POISON_STATE")) h.new_state = poison;
  h.export_point = pause_at;
  h.export_no_exchange = no_exchange;
  return true;
}();

}  // namespace
}  // namespace qhx::test_hooks
