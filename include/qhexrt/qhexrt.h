/* qhexrt/qhexrt.h — the C API of QHexRT, for C programs and bindings from other
 * languages (ctypes, cffi, JNI, ...). docs/api.md is the guide; this header is
 * the reference.
 *
 * Conventions
 * - Functions return QHX_OK (0) on success and a negative status on failure;
 *   qhx_last_error() then describes the failure (thread-local, valid until the
 *   next failing call on the same thread). A message names the function and,
 *   for a bad argument, the argument.
 * - Output buffers are passed with their capacity; when one is too small the
 *   call returns QHX_ERR_BUFFER_TOO_SMALL and reports the size it needs, so a
 *   caller can retry.
 * - Handles are opaque and freed by their *_free function (NULL is fine).
 *   Pointers a getter returns stay valid until the handle they came from is
 *   freed. Everything the caller passes in (strings, image bytes, messages) is
 *   copied; the caller may free it as soon as the call returns.
 * - No C++ exception ever leaves a function of this header.
 * - Versioned structs (API version 2): a struct whose first field is
 *   `size_t struct_size` is versioned. The caller sets struct_size to
 *   sizeof(the struct) — qhx_*_init() does that and fills the defaults
 *   (since API version 6 a macro around qhx_*_init_sized(s, sizeof *s), so the
 *   library fills exactly the struct this header declares, never more). Later
 *   API versions only append fields at the end, so the library reads (or, for
 *   outputs, writes) only the fields that fit in the caller's struct_size:
 *   a program built against an older header keeps working, and fields it does
 *   not know keep their defaults. A struct_size below the API version 2 size
 *   is refused with QHX_ERR_ARGUMENT. A struct_size larger than the
 *   library's struct (a newer header than the library) is accepted and the
 *   unknown tail is ignored; check qhx_api_version() to know what is honoured.
 *
 * Threads: a pipeline runs one request at a time (a second request, from any
 * session of the same pipeline, waits for the first). A session, a message
 * and a result are used by one thread at a time. Tokenizers are read-only
 * after loading and may be shared between threads.
 */
#ifndef QHEXRT_QHEXRT_H
#define QHEXRT_QHEXRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this C API. 1: tokenizer and one-shot generation;
 * 2: versioned option structs, pipelines with options, sessions, messages,
 * results, timings, image-cache statistics; 3: qhx_pipeline_default_sampling,
 * frequency_penalty; 4: qhx_generation_options.speculate; 5: qhx_pipeline_options.weights_in_memory;
 * 6: qhx_*_init_sized (the qhx_*_init macros).
 * Within one SONAME the number only grows, and every function of a lower
 * version keeps working. */
#define QHX_API_VERSION 6

enum {
  QHX_OK = 0,
  QHX_ERR = -1,                  /* see qhx_last_error() */
  QHX_ERR_BUFFER_TOO_SMALL = -2, /* the needed size was written to the size out-parameter */
  QHX_ERR_ARGUMENT = -3          /* a NULL handle or pointer, a bad struct_size, an index out of
                                     range, a role that is none of the three */
};

/* The library version, "MAJOR.MINOR.PATCH" (the project's version, not the API version). */
const char* qhx_version(void);

/* The API version the library implements (QHX_API_VERSION of the header it was built with).
 * A program built against an older header may run on a newer library, never the reverse:
 * compare qhx_api_version() >= QHX_API_VERSION at start-up if in doubt. */
int qhx_api_version(void);

/* Text of the last failure on this thread ("" if none). A pipeline one of
 * whose files was truncated or rewritten after it opened fails every request
 * with QHX_ERR and a message naming the file ("...: the file was truncated or
 * changed while mapped (...); reopen the model"), not a crash: free it and open
 * it again (docs/bundle.md, "Mapped files"). Sizes read from files and
 * requests are bounded (docs/limits.md). */
const char* qhx_last_error(void);

/* ---- tokenizer (API 1) --------------------------------------------------- */

typedef struct qhx_tokenizer qhx_tokenizer;

/* Loads a Hugging Face tokenizer.json (Qwen2/Qwen3 byte-level BPE) into *out (NULL on failure). */
int qhx_tokenizer_load(const char* path, qhx_tokenizer** out);

/* Frees a tokenizer (NULL is fine). */
void qhx_tokenizer_free(qhx_tokenizer* tok);

/* Number of token ids (vocab + added tokens); 0 for a NULL tokenizer (and qhx_last_error says so). */
int32_t qhx_tokenizer_vocab_size(const qhx_tokenizer* tok);

/* Encodes `len` bytes of UTF-8 text. Writes at most `cap` ids to `ids` and the
 * total count to *n_ids. */
int qhx_tokenizer_encode(const qhx_tokenizer* tok, const char* text, size_t len, int32_t* ids, size_t cap,
                         size_t* n_ids);

/* Decodes ids to UTF-8 (invalid sequences become U+FFFD). Writes at most
 * `cap` bytes plus a terminating NUL to `buf`; *len receives the length
 * without the NUL. Special tokens are dropped when skip_special != 0. */
int qhx_tokenizer_decode(const qhx_tokenizer* tok, const int32_t* ids, size_t n_ids, int skip_special, char* buf,
                         size_t cap, size_t* len);

/* ---- pipelines ------------------------------------------------------------ */

typedef struct qhx_pipeline qhx_pipeline;

/* (API 1) Opens a manifest (.json), a bundle folder or a Hugging Face checkpoint
 * directory (the default plan) with the default options. Same as
 * qhx_pipeline_open2(path, NULL, out). */
int qhx_pipeline_open(const char* manifest_or_dir, qhx_pipeline** out);

/* Frees a pipeline (NULL is fine). Sessions made from it keep what they need
 * alive: the weights are released when the last of the pipeline and its
 * sessions is freed, so the order of the *_free calls does not matter. */
void qhx_pipeline_free(qhx_pipeline* pipe);

/* Options of qhx_pipeline_open2 (versioned: see the conventions above). */
typedef struct qhx_pipeline_options {
  size_t struct_size;        /* sizeof(qhx_pipeline_options) */
  int64_t image_cache_mb;    /* bound of the image-feature cache; < 0 (default): the manifest's; 0: off */
  int want_images;           /* for a bundle folder: != 0 picks its manifest with image stages (refused if it
                              has none); 0 (default) its text-only manifest if it has one, else the image
                              one. Ignored for a manifest file or a checkpoint directory */
  int32_t threads;           /* the CPU kernels' worker threads, process-wide: 0 (default) leaves them as they
                              are (one per core unless set before); more than the machine's cores is capped
                              at the cores, with a warning (qhx_pipeline_warning); < 0 is refused */
  int32_t weights_in_memory; /* != 0: read the weights decode streams into memory at open instead of mapping
                                them (slower open, faster decode; PipelineOptions::weights_in_memory);
                                0 (default): mapped. (API version 5) */
} qhx_pipeline_options;

/* Fills *options with the defaults and struct_size = sizeof(qhx_pipeline_options). */
/* (API 6) Fills the first struct_size bytes of *options with the defaults and sets
 * options->struct_size = struct_size: a struct_size below API version 2's struct is
 * refused (QHX_ERR_ARGUMENT), one past the library's struct has its tail zeroed. */
int qhx_pipeline_options_init_sized(qhx_pipeline_options* options, size_t struct_size);
/* The API 1-5 entry point, for programs built against those headers: it fills the
 * API version 5 struct. */
int qhx_pipeline_options_init(qhx_pipeline_options* options);
#define qhx_pipeline_options_init(options) qhx_pipeline_options_init_sized((options), sizeof *(options))

/* Opens a manifest (.json), a bundle folder or a Hugging Face checkpoint
 * directory. `options` may be NULL (the defaults). *out is NULL on failure. */
int qhx_pipeline_open2(const char* path, const qhx_pipeline_options* options, qhx_pipeline** out);

/* *text receives the warnings of opening the pipeline ("" if none), e.g. that
 * the thread count was capped. Valid until the pipeline is freed. */
int qhx_pipeline_warning(const qhx_pipeline* pipe, const char** text);

/* *takes_images receives 1 if the pipeline's plan has image stages, else 0. */
int qhx_pipeline_takes_images(const qhx_pipeline* pipe, int* takes_images);

/* Statistics of the pipeline's image-feature cache (shared by all its sessions). Versioned. */
typedef struct qhx_image_cache_stats {
  size_t struct_size; /* sizeof(qhx_image_cache_stats), set by the caller */
  int64_t hits;       /* images whose features came from the cache */
  int64_t misses;     /* images that went through the vision encoder */
  int64_t entries;    /* images held */
  int64_t bytes;      /* bytes held */
  int64_t capacity_bytes;
} qhx_image_cache_stats;

/* Zeroes *stats and sets struct_size = sizeof(qhx_image_cache_stats). */
/* (API 6) Fills the first struct_size bytes of *stats with the defaults and sets
 * stats->struct_size = struct_size: a struct_size below API version 2's struct is
 * refused (QHX_ERR_ARGUMENT), one past the library's struct has its tail zeroed. */
int qhx_image_cache_stats_init_sized(qhx_image_cache_stats* stats, size_t struct_size);
/* The API 1-5 entry point, for programs built against those headers: it fills the
 * API version 5 struct. */
int qhx_image_cache_stats_init(qhx_image_cache_stats* stats);
#define qhx_image_cache_stats_init(stats) qhx_image_cache_stats_init_sized((stats), sizeof *(stats))

/* Writes the cache's statistics into *stats (the fields that fit in stats->struct_size). */
int qhx_pipeline_image_cache_stats(const qhx_pipeline* pipe, qhx_image_cache_stats* stats);

/* ---- one-shot generation (API 1) ----------------------------------------- */

typedef struct qhx_generate_options {
  const char* prompt;        /* the user's message (the whole text if raw != 0) */
  const char* system;        /* NULL for none */
  const char* const* images; /* image paths, placed at "<image>" markers or first */
  size_t n_images;
  int32_t max_new_tokens; /* 0 = the manifest's default */
  int greedy;             /* != 0: argmax; else the manifest's sampling defaults */
  uint64_t seed;
  int raw; /* != 0: no chat template */
} qhx_generate_options;

/* Called with each piece of generated text as it is produced (whole UTF-8 characters). */
typedef void (*qhx_text_callback)(const char* text, size_t len, void* user);

/* Runs one request. The full text (special tokens dropped) goes to `buf` as for
 * qhx_tokenizer_decode; `on_text` (may be NULL) streams it. */
int qhx_pipeline_generate(qhx_pipeline* pipe, const qhx_generate_options* options, qhx_text_callback on_text,
                          void* user, char* buf, size_t cap, size_t* len);

/* ---- messages (API 2) ----------------------------------------------------- */

typedef struct qhx_message qhx_message;

/* Kinds of a message's parts (qhx_message_part). */
enum { QHX_PART_TEXT = 0, QHX_PART_IMAGE = 1 };

/* A new, empty message of `role`: "system", "user" or "assistant" (another role
 * is refused with QHX_ERR_ARGUMENT). */
int qhx_message_new(const char* role, qhx_message** out);

/* Frees a message (NULL is fine). Sessions copy messages: a message may be
 * freed, or reused, right after qhx_session_send / qhx_session_respond. */
void qhx_message_free(qhx_message* msg);

/* Appends `len` bytes of UTF-8 text (refused if not valid UTF-8). */
int qhx_message_add_text(qhx_message* msg, const char* text, size_t len);

/* Appends an image read from `path` (JPEG, PNG, WebP, PPM) when the message is
 * sent; a file that cannot be read or decoded fails that send, naming the file. */
int qhx_message_add_image_file(qhx_message* msg, const char* path);

/* Appends an encoded image (the contents of a JPEG, PNG, WebP or PPM file) held
 * in memory: `len` bytes at `data`, copied. */
int qhx_message_add_image_bytes(qhx_message* msg, const void* data, size_t len);

/* *role receives the message's role (valid until the message is freed). */
int qhx_message_role(const qhx_message* msg, const char** role);

/* *n receives the number of parts. */
int qhx_message_part_count(const qhx_message* msg, size_t* n);

/* Part `index`: *kind receives QHX_PART_TEXT or QHX_PART_IMAGE; *text (and *len,
 * which may be NULL) the text of a text part, or the name of an image (its path,
 * or "image in memory"). Valid until the message is freed or changed. */
int qhx_message_part(const qhx_message* msg, size_t index, int* kind, const char** text, size_t* len);

/* ---- generation options and results (API 2) ------------------------------ */

/* Streaming callback: a piece of the answer (whole UTF-8 characters, never a
 * piece of a stop string). Return 0 to continue, anything else to cancel: the
 * answer then ends with stop reason "cancelled" (the call still succeeds). */
typedef int (*qhx_stream_callback)(const char* text, size_t len, void* user);

/* Options of one answer (versioned). qhx_generation_options_init fills these defaults:
 * max_new_tokens 0, use_manifest_sampling 1, the sampling fields as Hugging Face's
 * neutral values (greedy 0, temperature 1, top_k 0, top_p 1, min_p 0,
 * repetition_penalty 1, presence_penalty 0, seed 0, frequency_penalty 0), no stop
 * strings, resize NULL, no callback, keep_step_logits 0, speculate 0. */
typedef struct qhx_generation_options {
  size_t struct_size;     /* sizeof(qhx_generation_options) */
  int64_t max_new_tokens; /* <= 0: the manifest's default */
  /* Sampling. use_manifest_sampling != 0: the manifest's parameters, and the
   * fields below up to `seed` are ignored; 0: exactly these fields (each
   * checked: e.g. temperature > 0 unless greedy), with frequency_penalty. */
  int use_manifest_sampling;
  int greedy; /* != 0: argmax (also implied by temperature == 0) */
  float temperature;
  int32_t top_k;            /* 0 = off */
  float top_p;              /* 1 = off */
  float min_p;              /* 0 = off */
  float repetition_penalty; /* 1 = off */
  float presence_penalty;   /* 0 = off */
  uint64_t seed;
  const char* const* stop; /* n_stop stop strings: the answer ends before the first one produced */
  size_t n_stop;
  const char* resize;          /* "fixed" or "native"; NULL: the manifest's */
  qhx_stream_callback on_text; /* NULL: no streaming */
  void* user;                  /* passed to on_text */
  int keep_step_logits;        /* != 0: keep the logits that chose each generated token */
  /* API version 3. An explicit filler: version 2's struct ends in padding here, whose bytes a
   * version 2 program may not have zeroed, so no field is put in it. Ignored. */
  int32_t reserved_v3;
  float frequency_penalty; /* (3) 0 = off; subtracts this times the token's count so far */
  /* API version 4. Again a filler first: version 3's struct ends in 4 bytes of padding. Ignored. */
  int32_t reserved_v4;
  /* (4) Exact speculative decoding: up to this many draft tokens, taken from n-grams of the
   * conversation, are checked in one pass of the model; 0 = off, at most 16. Greedy answers
   * are the same token for token; sampled answers keep the model's distribution (each draft
   * is accepted with the standard rule), though not the same draws as without it. The
   * timings' decode_ms_per_token is then per graph run (docs/api.md). */
  int32_t speculate;
} qhx_generation_options;

/* Fills *options with the defaults above and struct_size = sizeof(qhx_generation_options). */
/* (API 6) Fills the first struct_size bytes of *options with the defaults and sets
 * options->struct_size = struct_size: a struct_size below API version 2's struct is
 * refused (QHX_ERR_ARGUMENT), one past the library's struct has its tail zeroed. */
int qhx_generation_options_init_sized(qhx_generation_options* options, size_t struct_size);
/* The API 1-5 entry point, for programs built against those headers: it fills the
 * API version 5 struct. */
int qhx_generation_options_init(qhx_generation_options* options);
#define qhx_generation_options_init(options) qhx_generation_options_init_sized((options), sizeof *(options))

/* (API 3) Writes the plan's sampling defaults (the manifest's, or a checkpoint's
 * generation_config.json) into the sampling fields of *options (greedy through
 * seed, and frequency_penalty if options->struct_size holds it) and sets
 * use_manifest_sampling = 0; the other fields are left as they
 * are. A caller then changes only the parameters it means to, e.g. temperature = 0
 * for greedy decoding with the plan's repetition penalty. options->struct_size
 * must be set (qhx_generation_options_init). */
int qhx_pipeline_default_sampling(const qhx_pipeline* pipe, qhx_generation_options* options);

/* Timings of one answer (versioned; written by qhx_result_timings). */
typedef struct qhx_timings {
  size_t struct_size; /* sizeof(qhx_timings), set by the caller */
  double load_ms;     /* opening the pipeline */
  double vision_ms;   /* image load, resize, preprocessing and the vision graph (0 when all cached) */
  int64_t image_tokens;
  int64_t images_encoded;   /* images that went through the vision encoder */
  int64_t image_cache_hits; /* images whose features came from the image-feature cache */
  double prefill_ms;        /* the prompt through the graphs, up to the first logits */
  double ttft_ms;           /* request start to the first generated token */
  double decode_ms_per_token;
  int64_t decode_steps; /* graph runs after prefill */
} qhx_timings;

/* Zeroes *timings and sets struct_size = sizeof(qhx_timings). */
/* (API 6) Fills the first struct_size bytes of *timings with the defaults and sets
 * timings->struct_size = struct_size: a struct_size below API version 2's struct is
 * refused (QHX_ERR_ARGUMENT), one past the library's struct has its tail zeroed. */
int qhx_timings_init_sized(qhx_timings* timings, size_t struct_size);
/* The API 1-5 entry point, for programs built against those headers: it fills the
 * API version 5 struct. */
int qhx_timings_init(qhx_timings* timings);
#define qhx_timings_init(timings) qhx_timings_init_sized((timings), sizeof *(timings))

typedef struct qhx_result qhx_result;

/* Frees a result (NULL is fine). */
void qhx_result_free(qhx_result* result);

/* *text receives the answer (special tokens dropped, cut before a stop string,
 * without a <think> part), NUL-terminated; *len (may be NULL) its length. */
int qhx_result_text(const qhx_result* result, const char** text, size_t* len);

/* *text receives the <think>...</think> part of the output ("" if none); *len may be NULL. */
int qhx_result_reasoning(const qhx_result* result, const char** text, size_t* len);

/* *reason receives "stop_token", "stop_string", "max_new_tokens" or "cancelled". */
int qhx_result_stop_reason(const qhx_result* result, const char** reason);

/* *ids receives the generated token ids (including a final stop token if one
 * ended the answer), *n their count; *ids is NULL when n is 0. */
int qhx_result_tokens(const qhx_result* result, const int32_t** ids, size_t* n);

/* Copies the generated ids into ids[0..cap) and writes their count to *n; with
 * cap below the count nothing is copied and QHX_ERR_BUFFER_TOO_SMALL returned. */
int qhx_result_copy_tokens(const qhx_result* result, int32_t* ids, size_t cap, size_t* n);

/* *n receives the number of prompt tokens (after the chat template). */
int qhx_result_prompt_token_count(const qhx_result* result, size_t* n);

/* *n receives the number of prompt tokens whose keys and values came from the session's cache. */
int qhx_result_cached_tokens(const qhx_result* result, size_t* n);

/* The step logits kept with keep_step_logits: *rows (one per generated token)
 * x *vocab floats, row-major, at *logits (NULL and rows 0 when not kept). */
int qhx_result_step_logits(const qhx_result* result, const float** logits, size_t* rows, size_t* vocab);

/* Writes the answer's timings into *timings (the fields that fit in timings->struct_size). */
int qhx_result_timings(const qhx_result* result, qhx_timings* timings);

/* ---- sessions (API 2) ----------------------------------------------------- */

/* A conversation: its messages and the KV cache that holds them, so a
 * follow-up costs only its own tokens (see qhexrt/session.hpp). */
typedef struct qhx_session qhx_session;

/* A new, empty session on `pipe` (which it keeps alive; see qhx_pipeline_free). */
int qhx_session_new(qhx_pipeline* pipe, qhx_session** out);

/* Frees a session (NULL is fine). */
void qhx_session_free(qhx_session* session);

/* Forgets the conversation. */
int qhx_session_reset(qhx_session* session);

/* *n receives the number of tokens whose keys and values the session's cache holds. */
int qhx_session_cached_tokens(const qhx_session* session, size_t* n);

/* *n receives the number of messages in the conversation (answers included). */
int qhx_session_message_count(const qhx_session* session, size_t* n);

/* *out receives a copy of message `index` (free it with qhx_message_free), e.g.
 * to resend an edited history with qhx_session_respond. */
int qhx_session_copy_message(const qhx_session* session, size_t index, qhx_message** out);

/* Appends `message` (a user turn) to the conversation and answers it; the answer
 * joins the conversation as an assistant turn and *out receives the result (free
 * it with qhx_result_free). `options` may be NULL (the defaults). On failure
 * nothing is appended: the conversation is as it was, and *out is NULL. */
int qhx_session_send(qhx_session* session, const qhx_message* message, const qhx_generation_options* options,
                     qhx_result** out);

/* Replaces the conversation with messages[0..n) (the last one is a user turn)
 * and answers it, recomputing only what the cache does not already hold.
 * Otherwise as qhx_session_send. */
int qhx_session_respond(qhx_session* session, const qhx_message* const* messages, size_t n,
                        const qhx_generation_options* options, qhx_result** out);

#ifdef __cplusplus
}
#endif

#endif /* QHEXRT_QHEXRT_H */
