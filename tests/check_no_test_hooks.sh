#!/usr/bin/env bash
# check_no_test_hooks.sh TOOL LIB...: the shipped shared libraries carry no test hooks
# (src/testing: the QHX_TEST_* / QHX_EXPORT_TEST_* switches, common/test_hooks.hpp), neither
# as an exported symbol (nm -D) nor as code that reads the switches (their names as strings).
# TOOL is a program that links the hooks: the same look-ups must find them there, so the check
# can fail.
set -euo pipefail
tool=$1; shift
pattern='QHX_TEST_POISON_STATE|QHX_EXPORT_TEST_'
grep -aqE "$pattern" "$tool" || { echo "FAIL: $tool does not hold the hooks' switches; the check cannot see them"; exit 1; }
for lib in "$@"; do
  if nm -D --defined-only "$lib" | grep -E 'test_hooks|export_test|poison'; then
    echo "FAIL: $lib exports test hooks (above)"; exit 1
  fi
  if grep -aoE "$pattern" "$lib" | sort -u | grep .; then
    echo "FAIL: $lib reads test switches (above)"; exit 1
  fi
  echo "ok: $(basename "$lib"): $(nm -D --defined-only "$lib" | wc -l) exported symbols, no test hooks"
done
