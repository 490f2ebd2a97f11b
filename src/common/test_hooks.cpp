#include "common/test_hooks.hpp"

namespace qhx::test_hooks {

Hooks& hooks() {
  static Hooks h;
  return h;
}

}  // namespace qhx::test_hooks
