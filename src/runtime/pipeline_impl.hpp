// The inside of a Pipeline, shared with Session: the loaded plan and the one
// entry point that runs a request over a session's state.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "qhexrt/pipeline.hpp"
#include "qhexrt/session.hpp"
#include "runtime/run_context.hpp"
#include "runtime/stage.hpp"

namespace qhx {

struct Pipeline::Impl {
  Resources res;
  std::vector<std::unique_ptr<Stage>> stages;
  double load_ms = 0;
  std::mutex run_mutex;   // graphs keep scratch between calls: one request at a time
  SessionState one_shot;  // Pipeline::generate's state, rewound for every request

  // Runs the plan's stages for `input` over `state`. `full_text` (if given)
  // receives the output text including a <think> part, for the history.
  GenerationResult run(const TurnInput& input, const GenerationOptions& options, SessionState& state,
                       std::string* full_text = nullptr);
};

}  // namespace qhx
