// A C++ program using the installed QHexRT's C++ API: 4 greedy tokens from the
// checkpoint given as the argument, through a Session, and an error thrown by
// the library caught as qhx::Error here. Exit 0 = it worked.
#include <cstdio>
#include <string>

#include <qhexrt/error.hpp>
#include <qhexrt/session.hpp>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer_cpp CHECKPOINT_DIR\n");
    return 2;
  }
  try {
    // The library's exception type must be the program's (one typeinfo).
    bool caught = false;
    try {
      qhx::Pipeline::open("/nonexistent/plan.json");
    } catch (const qhx::Error& e) {
      caught = std::string(e.what()).find("/nonexistent/plan.json") != std::string::npos;
    }
    if (!caught) {
      std::fprintf(stderr, "consumer (C++): opening a missing plan did not throw qhx::Error naming it\n");
      return 1;
    }
    qhx::Pipeline pipe = qhx::Pipeline::open(argv[1]);
    qhx::Session session(pipe);
    qhx::GenerationOptions options;
    options.max_new_tokens = 4;
    qhx::SamplingParams greedy;
    greedy.greedy = true;
    options.sampling = greedy;
    const qhx::GenerationResult r = session.send(qhx::Message::text("user", "Hello"), options);
    if (r.tokens.empty() || r.tokens.size() > 4 || session.messages().size() != 2) {
      std::fprintf(stderr, "consumer (C++): %zu tokens, %zu messages\n", r.tokens.size(), session.messages().size());
      return 1;
    }
    std::printf("consumer (C++): %zu tokens: \"%s\" (stop reason %s)\n", r.tokens.size(), r.text.c_str(),
                r.stop_reason.c_str());
    return 0;
  } catch (const qhx::Error& e) {
    std::fprintf(stderr, "consumer (C++): %s\n", e.what());
    return 1;
  }
}
