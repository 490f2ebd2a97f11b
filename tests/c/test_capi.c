/* The C API from C: load, encode, decode, and the error paths. Exit 0 = pass. */
#include <stdio.h>
#include <string.h>

#include "qhexrt/qhexrt.h"

static int failures = 0;

struct stream {
  size_t calls, bytes;
};

static void on_text(const char* text, size_t len, void* user) {
  struct stream* s = (struct stream*)user;
  (void)text;
  s->calls++;
  s->bytes += len;
}
#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                     \
    }                                                                 \
  } while (0)

int main(int argc, char** argv) {
  qhx_tokenizer* tok = NULL;
  int32_t ids[16];
  size_t n = 0;
  char buf[64];
  size_t len = 0;
  const int32_t expected[] = {74785, 419, 2168, 13};
  const char* text = "Describe this image.";

  if (argc != 3) {
    fprintf(stderr, "usage: test_capi TOKENIZER_JSON CHECKPOINT_DIR\n");
    return 2;
  }
  CHECK(strlen(qhx_version()) > 0);

  CHECK(qhx_tokenizer_load("/nonexistent/tokenizer.json", &tok) == QHX_ERR);
  CHECK(tok == NULL);
  CHECK(strstr(qhx_last_error(), "/nonexistent/tokenizer.json") != NULL);
  CHECK(qhx_tokenizer_load(NULL, &tok) == QHX_ERR_ARGUMENT);

  CHECK(qhx_tokenizer_load(argv[1], &tok) == QHX_OK);
  if (tok == NULL) return 1;
  CHECK(qhx_tokenizer_vocab_size(tok) == 151669);

  CHECK(qhx_tokenizer_encode(tok, text, strlen(text), ids, 16, &n) == QHX_OK);
  CHECK(n == 4 && memcmp(ids, expected, sizeof expected) == 0);
  CHECK(qhx_tokenizer_encode(tok, text, strlen(text), ids, 2, &n) == QHX_ERR_BUFFER_TOO_SMALL);
  CHECK(n == 4);
  CHECK(qhx_tokenizer_encode(tok, "\xC3(", 2, ids, 16, &n) == QHX_ERR);
  CHECK(strstr(qhx_last_error(), "UTF-8") != NULL);

  CHECK(qhx_tokenizer_decode(tok, expected, 4, 0, buf, sizeof buf, &len) == QHX_OK);
  CHECK(len == strlen(text) && strcmp(buf, text) == 0);
  CHECK(qhx_tokenizer_decode(tok, expected, 4, 0, buf, 5, &len) == QHX_ERR_BUFFER_TOO_SMALL);
  CHECK(len == strlen(text));
  {
    const int32_t bad[] = {151669};
    CHECK(qhx_tokenizer_decode(tok, bad, 1, 0, buf, sizeof buf, &len) == QHX_ERR);
    CHECK(strstr(qhx_last_error(), "out of range") != NULL);
  }
  qhx_tokenizer_free(tok);
  qhx_tokenizer_free(NULL);

  {
    qhx_pipeline* pipe = NULL;
    qhx_generate_options o;
    struct stream s = {0, 0};
    char text[4096];
    memset(&o, 0, sizeof o);
    CHECK(qhx_pipeline_open("/nonexistent/plan.json", &pipe) == QHX_ERR && pipe == NULL);
    CHECK(strstr(qhx_last_error(), "/nonexistent/plan.json") != NULL);
    CHECK(qhx_pipeline_open(argv[2], &pipe) == QHX_OK);
    if (pipe != NULL) {
      o.prompt = "Hello";
      o.max_new_tokens = 5;
      o.greedy = 1;
      CHECK(qhx_pipeline_generate(pipe, &o, on_text, &s, text, sizeof text, &len) == QHX_OK);
      CHECK(s.calls >= 1 && s.bytes == len); /* the stream carried the whole text */
      CHECK(strlen(text) == len);
      CHECK(qhx_pipeline_generate(pipe, NULL, NULL, NULL, text, sizeof text, &len) == QHX_ERR_ARGUMENT);
      o.max_new_tokens = 1000000;
      CHECK(qhx_pipeline_generate(pipe, &o, NULL, NULL, text, sizeof text, &len) == QHX_ERR);
      CHECK(strstr(qhx_last_error(), "context") != NULL);
      qhx_pipeline_free(pipe);
    }
  }
  printf("test_capi: %s\n", failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
