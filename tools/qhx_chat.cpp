// qhx_chat — an interactive multi-turn chat in a terminal, on the public Session API
// (qhexrt/session.hpp) only.
//
//   qhx_chat -m MANIFEST_OR_BUNDLE_OR_HF_DIR [-n MAX_TOKENS] [--temp T] [--system TEXT] ...
//
// Each line typed is a user turn; the answer streams as it is generated, and only the
// new turn is prefilled (the session keeps the conversation's KV cache). Commands:
//   /image PATH   attach an image to the next message (repeatable)
//   /reset        forget the conversation
//   /stats        cached tokens, the last answer's tokens and timings, the image cache
//   /help, /quit  (or end of input)
// Ctrl-C during an answer stops it (the part already produced stays in the
// conversation) and returns to the prompt; Ctrl-C at the prompt right after
// another Ctrl-C exits (a first one at the prompt says so).
//
// Line input is read with read(2) in the terminal's own line mode (its editing: erase,
// kill line); no line-editing library is needed.
#include <signal.h>
#include <unistd.h>

#include "cli/cli.hpp"
#include "cli/model_flags.hpp"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "qhexrt/error.hpp"
#include "qhexrt/pipeline.hpp"
#include "qhexrt/session.hpp"

namespace {

std::atomic<int> g_interrupts{0};  // SIGINTs not yet handled (lock-free: read by the callback)
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_sigint(int) { g_interrupts.fetch_add(1, std::memory_order_relaxed); }

// SIGINT's handler; `restart` = SA_RESTART. While reading the prompt it is off, so that
// read(2) returns at a Ctrl-C; while answering it is on, so that writes to the terminal
// are not cut short.
void install_sigint(bool restart) {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = restart ? SA_RESTART : 0;
  sigaction(SIGINT, &sa, nullptr);
}

void out(std::string_view s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

// Lines from standard input with read(2): a Ctrl-C while waiting is reported, not lost.
class LineReader {
 public:
  enum class Status { Line, Interrupted, End };

  Status next(std::string& line) {
    for (;;) {
      if (const auto nl = buf_.find('\n'); nl != std::string::npos) {
        line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return Status::Line;
      }
      if (g_interrupts.load() > 0) return Status::Interrupted;
      char chunk[4096];
      const ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
      if (n > 0) {
        buf_.append(chunk, static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) {
        buf_.clear();  // the terminal discards the line being typed at a Ctrl-C
        continue;      // the loop reports it
      }
      if (buf_.empty()) return Status::End;
      line = std::move(buf_);  // a last line without a newline
      buf_.clear();
      return Status::Line;
    }
  }

 private:
  std::string buf_;
};

struct Args {
  std::string model, system;
  std::int64_t max_new = 0;
  qhx_cli::SamplingFlags sampling;
  qhx_cli::RuntimeFlags runtime;
  qhx_cli::SpeculateFlag speculate;
  bool text_only = false;
};

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

void print_stats(const qhx::Pipeline& pipe, const qhx::Session& session,
                 const std::optional<qhx::GenerationResult>& last) {
  std::printf("session: %zu messages, %lld tokens in the KV cache\n", session.messages().size(),
              static_cast<long long>(session.cached_tokens()));
  if (last) {
    const auto& t = last->timings;
    std::printf("last answer: %zu prompt tokens (%lld cached, %lld prefilled), %zu generated, stop: %s\n",
                last->prompt_tokens.size(), static_cast<long long>(last->cached_tokens),
                static_cast<long long>(static_cast<std::int64_t>(last->prompt_tokens.size()) - last->cached_tokens),
                last->tokens.size(), last->stop_reason.c_str());
    std::printf(
        "timings: vision %.1f ms (%lld image tokens, %lld images encoded, %lld from the cache) | prefill %.1f ms | "
        "ttft %.1f ms | decode %.2f ms/token (%.1f tok/s) over %lld steps | %lld drafted, %lld accepted\n",
        t.vision_ms, static_cast<long long>(t.image_tokens), static_cast<long long>(t.images_encoded),
        static_cast<long long>(t.image_cache_hits), t.prefill_ms, t.ttft_ms, t.decode_ms_per_token,
        t.decode_ms_per_token > 0 ? 1000.0 / t.decode_ms_per_token : 0.0, static_cast<long long>(t.decode_steps),
        static_cast<long long>(last->draft_tokens), static_cast<long long>(last->accepted_tokens));
  } else {
    std::printf("last answer: none yet\n");
  }
  const auto c = pipe.image_cache_stats();
  std::printf("image cache: %lld hits, %lld misses, %lld images, %.1f of %.1f MB\n", static_cast<long long>(c.hits),
              static_cast<long long>(c.misses), static_cast<long long>(c.entries),
              static_cast<double>(c.bytes) / 1048576.0, static_cast<double>(c.capacity_bytes) / 1048576.0);
  std::fflush(stdout);
}

const char* kHelp =
    "  /image PATH  attach an image to the next message\n"
    "  /reset       forget the conversation\n"
    "  /stats       cached tokens and the last answer's timings\n"
    "  /quit        exit (also end of input, or Ctrl-C twice at the prompt)\n"
    "  Ctrl-C during an answer stops it.\n";

int run(const Args& a) {
  a.runtime.apply_threads("qhx_chat");
  qhx::PipelineOptions popts = a.runtime.pipeline_options();
  std::optional<qhx::Pipeline> opened;
  if (!a.text_only) {
    try {
      opened.emplace(qhx::Pipeline::open(a.model, popts, /*want_images=*/true));
    } catch (const qhx::Error& e) {  // a bundle with a text manifest only: chat without images
      if (std::string(e.what()).find("cannot take an image") == std::string::npos) throw;
    }
  }
  if (!opened) opened.emplace(qhx::Pipeline::open(a.model, popts, false));
  qhx::Pipeline& pipe = *opened;
  qhx::Session session(pipe);

  qhx::GenerationOptions opts;
  if (a.max_new > 0) opts.max_new_tokens = a.max_new;
  opts.sampling = a.sampling.apply(pipe.default_sampling());
  opts.speculate = a.speculate.tokens();
  opts.on_text = [](std::string_view text) {
    if (g_interrupts.load(std::memory_order_relaxed) > 0) return false;  // Ctrl-C: cancel the answer
    out(text);
    return true;
  };

  std::printf("qhx_chat: %s (%s, load %.0f ms). Type a message; /help for commands.\n", a.model.c_str(),
              pipe.takes_images() ? "text and images" : "text only", pipe.load_ms());
  std::fflush(stdout);

  LineReader reader;
  std::vector<std::filesystem::path> pending_images;
  std::optional<qhx::GenerationResult> last;
  bool last_was_interrupt = false;  // the previous event was a Ctrl-C: another one at the prompt exits
  for (;;) {
    install_sigint(false);
    out("> ");
    std::string line;
    const auto st = reader.next(line);
    if (st == LineReader::Status::End) {
      out("\n");
      return 0;
    }
    if (st == LineReader::Status::Interrupted) {
      g_interrupts.store(0);
      if (last_was_interrupt) {
        out("\n");
        return 0;
      }
      last_was_interrupt = true;
      out("\n(Ctrl-C again, or /quit, to exit)\n");
      continue;
    }
    last_was_interrupt = false;
    line = trim(line);
    if (line.empty()) continue;
    if (line[0] == '/') {
      const auto sp = line.find(' ');
      const std::string cmd = line.substr(0, sp);
      const std::string arg = sp == std::string::npos ? "" : trim(line.substr(sp + 1));
      if (cmd == "/quit" || cmd == "/exit") return 0;
      if (cmd == "/help") {
        out(kHelp);
      } else if (cmd == "/reset") {
        session.reset();
        pending_images.clear();
        last.reset();
        out("[conversation reset]\n");
      } else if (cmd == "/stats") {
        print_stats(pipe, session, last);
      } else if (cmd == "/image") {
        std::error_code ec;
        if (arg.empty()) {
          out("usage: /image PATH\n");
        } else if (!pipe.takes_images()) {
          out("error: this plan has no image stages (open a bundle's image manifest)\n");
        } else if (!std::filesystem::is_regular_file(arg, ec)) {
          std::printf("error: %s: no such file\n", arg.c_str());
          std::fflush(stdout);
        } else {
          pending_images.emplace_back(arg);
          std::printf("[image %s attached to the next message]\n", arg.c_str());
          std::fflush(stdout);
        }
      } else {
        std::printf("unknown command %s; /help lists them\n", cmd.c_str());
        std::fflush(stdout);
      }
      continue;
    }

    qhx::Message m{"user", {}};
    for (const auto& p : pending_images) m.content.push_back(qhx::ContentPart::image_part(qhx::ImageSource::file(p)));
    m.content.push_back(qhx::ContentPart::text_part(line));
    pending_images.clear();
    g_interrupts.store(0);
    install_sigint(true);
    try {
      qhx::GenerationResult r;
      if (!a.system.empty() && session.messages().empty())
        r = session.respond({qhx::Message::text("system", a.system), std::move(m)}, opts);
      else
        r = session.send(std::move(m), opts);
      const bool interrupted = g_interrupts.exchange(0) > 0;
      if (r.stop == qhx::StopReason::Cancelled || interrupted) {
        out("\n[cancelled]\n");
        last_was_interrupt = true;
      } else {
        out("\n");
      }
      last = std::move(r);
    } catch (const qhx::Error& e) {
      g_interrupts.store(0);
      std::printf("\nerror: %s\n", e.what());
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  qhx_cli::App app{"QHexRT interactive chat (Qwen3-VL): a multi-turn session in the terminal"};
  Args a;
  app.add_option("-m,--model", a.model, "manifest (.json), bundle folder, or Hugging Face checkpoint directory")
      ->required();
  app.add_option("-n,--max-new-tokens", a.max_new, "tokens per answer at most (default: the manifest's)")
      ->check(qhx_cli::PositiveNumber);
  a.sampling.add_to(app);
  app.add_option("--system", a.system, "a system message before the conversation");
  a.speculate.add_to(app);
  a.runtime.add_to(app);
  app.add_flag("--text-only", a.text_only, "for a bundle folder: its text manifest (no image stages)");
  QHX_CLI_PARSE(app, argc, argv);
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "qhx_chat: error: %s\n", e.what());
    return 1;
  }
}
