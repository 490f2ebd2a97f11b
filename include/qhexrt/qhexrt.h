/* qhexrt/qhexrt.h — the C API of QHexRT, for bindings from other languages.
 *
 * Conventions: functions return QHX_OK (0) on success and a negative status
 * on failure; qhx_last_error() then describes the failure (thread-local, valid
 * until the next failing call on the same thread). Output buffers are passed
 * with their capacity; when one is too small the call returns
 * QHX_ERR_BUFFER_TOO_SMALL and reports the size it needs, so a caller can
 * retry. Handles are opaque and freed by their *_free function (NULL is fine).
 */
#ifndef QHEXRT_QHEXRT_H
#define QHEXRT_QHEXRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  QHX_OK = 0,
  QHX_ERR = -1,                   /* see qhx_last_error() */
  QHX_ERR_BUFFER_TOO_SMALL = -2,  /* the needed size was written to the size out-parameter */
  QHX_ERR_ARGUMENT = -3           /* a NULL handle or pointer */
};

/* The library version, "MAJOR.MINOR.PATCH". */
const char* qhx_version(void);

/* Text of the last failure on this thread ("" if none). */
const char* qhx_last_error(void);

typedef struct qhx_tokenizer qhx_tokenizer;

/* Loads a Hugging Face tokenizer.json (Qwen2/Qwen3 byte-level BPE). */
int qhx_tokenizer_load(const char* path, qhx_tokenizer** out);
void qhx_tokenizer_free(qhx_tokenizer* tok);

/* Number of token ids (vocab + added tokens). */
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

/* ---- generation ---------------------------------------------------------- */

typedef struct qhx_pipeline qhx_pipeline;

/* Opens a manifest (.json) or a Hugging Face checkpoint directory (default plan). */
int qhx_pipeline_open(const char* manifest_or_dir, qhx_pipeline** out);
void qhx_pipeline_free(qhx_pipeline* pipe);

typedef struct qhx_generate_options {
  const char* prompt;          /* the user's message (the whole text if raw != 0) */
  const char* system;          /* NULL for none */
  const char* const* images;   /* image paths, placed at "<image>" markers or first */
  size_t n_images;
  int32_t max_new_tokens;      /* 0 = the manifest's default */
  int greedy;                  /* != 0: argmax; else the manifest's sampling defaults */
  uint64_t seed;
  int raw;                     /* != 0: no chat template */
} qhx_generate_options;

/* Called with each piece of generated text as it is produced (whole UTF-8 characters). */
typedef void (*qhx_text_callback)(const char* text, size_t len, void* user);

/* Runs one request. The full text (special tokens dropped) goes to `buf` as for
 * qhx_tokenizer_decode; `on_text` (may be NULL) streams it. */
int qhx_pipeline_generate(qhx_pipeline* pipe, const qhx_generate_options* options, qhx_text_callback on_text,
                          void* user, char* buf, size_t cap, size_t* len);

#ifdef __cplusplus
}
#endif

#endif /* QHEXRT_QHEXRT_H */
