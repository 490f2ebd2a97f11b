// Test hooks of the export (docs/bundle.md, "Test hooks"), read from the environment, so
// tests/python/test_export_kill.py can kill an export at a known moment rather than after
// a guessed delay. Nothing else sets them.
//
//   QHX_EXPORT_TEST_PAUSE_AT=<point>   at <point>, print "qhx_export: paused at <point>" to
//                                      stderr and wait for a signal (SIGKILL; after a SIGINT
//                                      the export goes on, to stop as interrupted)
//   QHX_EXPORT_TEST_NO_EXCHANGE=1      publish as on a file system without RENAME_EXCHANGE
//
// Points, in order: staged (the staging folder exists, empty), writing (half the tensor
// bytes written), written (every file written, no checksums.json yet), publish (staging
// complete and synced), moved-aside (no-exchange path only: the previous bundle renamed
// away, the new one not yet in place), swapped (the new bundle at OUT, the previous one not
// yet removed).
#pragma once

namespace qhx::export_test {

void pause_at(const char* point);
bool no_exchange();

}  // namespace qhx::export_test
