// qhexrt/session.hpp — a conversation with a model: the messages so far, and
// the KV cache and positions that already hold them.
//
// Each request renders the whole conversation through the chat template and
// tokenizes it; the longest prefix of those tokens that the cache already
// holds is kept, the cache is rewound to it, and only the rest is prefilled.
// So a follow-up question costs only its own tokens, an edited or resent
// history (a stateless client) costs only what changed, and a cancelled
// answer leaves nothing inconsistent behind: the next request re-synchronises
// through the same rule. Images whose tokens fall in the kept prefix are not
// encoded again; the others come from the pipeline's image-feature cache when
// their pixels were seen before (in any session).
//
// Several sessions may share one Pipeline (its weights); each holds its own
// cache. The pipeline runs one request at a time (a second one waits).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qhexrt/pipeline.hpp"
#include "qhexrt/sampling.hpp"

namespace qhx {

// An image in a message: a file, or an encoded image (JPEG, PNG, WebP, PPM) in memory.
struct ImageSource {
  std::filesystem::path path;       // used when `bytes` is empty
  std::vector<std::uint8_t> bytes;  // the encoded file's contents
  std::string label;                // names the image in errors (default: the path, or "image in memory")

  static ImageSource file(std::filesystem::path path);
  static ImageSource encoded(std::vector<std::uint8_t> bytes, std::string label = "image in memory");
  std::string name() const;
};

struct ContentPart {
  enum class Kind { Text, Image };
  Kind kind = Kind::Text;
  std::string text;   // Kind::Text
  ImageSource image;  // Kind::Image

  static ContentPart text_part(std::string text);
  static ContentPart image_part(ImageSource image);
};

struct Message {
  std::string role;  // "system", "user" or "assistant"
  std::vector<ContentPart> content;

  static Message text(std::string role, std::string text);
};

// Parses a conversation in the OpenAI / Hugging Face form: a JSON array of
// {"role": ..., "content": ...}, where content is a string or a list of parts
// {"type": "text", "text": ...} and {"type": "image", "path": ...}. Relative
// image paths resolve against `base`. `source` names the input in errors
// (which give the JSON path of the bad element).
std::vector<Message> parse_messages(std::string_view json_text, const std::string& source,
                                    const std::filesystem::path& base);

struct GenerationOptions {
  std::optional<std::int64_t> max_new_tokens;  // default: the manifest's
  std::optional<SamplingParams> sampling;      // default: the manifest's
  std::vector<std::string> stop;               // stop strings: the answer ends before the first one
  std::optional<std::string> resize;           // "fixed" or "native"; default: the manifest's
  // Streamed text, never half a UTF-8 character and never a piece of a stop
  // string. Return false to cancel: generation ends with stop_reason "cancelled".
  std::function<bool(std::string_view)> on_text;
  std::vector<std::int32_t> forced_tokens;  // teacher forcing, as GenerationRequest's
  bool keep_step_logits = false;
  bool keep_prompt_logits = false;  // the logits of every *prefilled* prompt position
  // Prompt-lookup speculation: each decode step verifies up to this many
  // tokens drafted from an earlier n-gram of prompt + output in one graph run
  // (0 = off, at most 16). The output is the same with and without, greedy or
  // sampled with the same seed (every token is drawn from its own exact logits;
  // a draft is kept when the draw equals it). The NPU block contract decodes one
  // token a step. With forced_tokens the drafts are the forced tokens.
  std::int64_t speculate = 0;
};

// The draft length a "--speculate" value asks for: "ngram" (4 tokens),
// "ngram:K" (K in [1, 16]) or "off" (0). Throws qhx::Error for anything else.
std::int64_t parse_speculate(std::string_view spec);

class Session {
 public:
  // `pipeline` must outlive the session.
  explicit Session(Pipeline& pipeline);
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  ~Session();

  // Appends `message` (a user turn) to the conversation and answers it; the
  // answer joins the conversation as an assistant turn. Errors are as
  // Pipeline::generate's (a model file changed underneath: FileChangedError,
  // for every later request too). On an error nothing is
  // appended: the conversation is as it was before the call.
  GenerationResult send(Message message, const GenerationOptions& options = {});

  // Replaces the conversation with `messages` (the last one is the user's) and
  // answers it, recomputing only what the cache does not already hold.
  GenerationResult respond(std::vector<Message> messages, const GenerationOptions& options = {});

  const std::vector<Message>& messages() const;
  std::int64_t cached_tokens() const;  // tokens whose keys and values the cache holds
  void reset();                        // forget the conversation (the cache is simply rewound)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qhx
