/* The C API from C (this file also proves qhexrt.h is valid C11), linked
 * against libqhexrt.so: every function of API versions 1 and 2 on the tiny
 * checkpoint. Sessions with an image from a file and from memory, the
 * image-feature cache seen through the timings, greedy answers equal across
 * sessions and across the v1 and v2 entry points, stop strings, cancellation,
 * and the error paths: NULL arguments, struct_size, unreadable images, small
 * buffers. Each failed check prints its line and condition; exit 0 = pass. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qhexrt/qhexrt.h"

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      fprintf(stderr, "  (qhx_last_error: \"%s\")\n", qhx_last_error());       \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

/* A check the rest of the test depends on: stop at once. */
#define REQUIRE(cond)                                                            \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond); \
      fprintf(stderr, "  (qhx_last_error: \"%s\")\n", qhx_last_error());         \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

/* `call` must refuse a NULL (or bad) argument with QHX_ERR_ARGUMENT and an
 * error naming the function and the argument. */
#define CHECK_ARG(call, function, argument)                                                                         \
  do {                                                                                                              \
    const int st_ = (call);                                                                                         \
    if (st_ != QHX_ERR_ARGUMENT || strstr(qhx_last_error(), function) == NULL ||                                    \
        strstr(qhx_last_error(), argument) == NULL) {                                                               \
      fprintf(stderr, "%s:%d: CHECK_ARG failed: %s gave %d, \"%s\" (expected %s, %s)\n", __FILE__, __LINE__, #call, \
              st_, qhx_last_error(), function, argument);                                                           \
      ++failures;                                                                                                   \
    }                                                                                                               \
  } while (0)

static int contains(const char* haystack, const char* needle) { return strstr(haystack, needle) != NULL; }

/* ---- v1 streaming ---- */

struct stream {
  size_t calls, bytes;
};

static void on_text_v1(const char* text, size_t len, void* user) {
  struct stream* s = (struct stream*)user;
  (void)text;
  s->calls++;
  s->bytes += len;
}

/* ---- v2 streaming: collects the text, cancels after `cancel_after` pieces (0: never) ---- */

struct collector {
  char text[4096];
  size_t len;
  size_t calls;
  size_t cancel_after;
};

static int on_text_v2(const char* text, size_t len, void* user) {
  struct collector* c = (struct collector*)user;
  if (c->len + len < sizeof c->text) {
    memcpy(c->text + c->len, text, len);
    c->len += len;
    c->text[c->len] = '\0';
  }
  c->calls++;
  return c->cancel_after != 0 && c->calls >= c->cancel_after;
}

static unsigned char* read_file(const char* path, size_t* len) {
  FILE* f = fopen(path, "rb");
  unsigned char* data;
  long size;
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  size = ftell(f);
  fseek(f, 0, SEEK_SET);
  data = (unsigned char*)malloc((size_t)size);
  if (data != NULL && fread(data, 1, (size_t)size, f) != (size_t)size) {
    free(data);
    data = NULL;
  }
  fclose(f);
  *len = (size_t)size;
  return data;
}

static qhx_message* text_message(const char* role, const char* text) {
  qhx_message* m = NULL;
  REQUIRE(qhx_message_new(role, &m) == QHX_OK && m != NULL);
  REQUIRE(qhx_message_add_text(m, text, strlen(text)) == QHX_OK);
  return m;
}

static qhx_generation_options greedy(int64_t max_new_tokens) {
  qhx_generation_options o;
  REQUIRE(qhx_generation_options_init(&o) == QHX_OK);
  o.max_new_tokens = max_new_tokens;
  o.use_manifest_sampling = 0;
  o.greedy = 1;
  return o;
}

/* Sends `m` and returns the result (the test stops if the call fails). */
static qhx_result* send(qhx_session* s, const qhx_message* m, const qhx_generation_options* o) {
  qhx_result* r = NULL;
  const int st = qhx_session_send(s, m, o, &r);
  if (st != QHX_OK) fprintf(stderr, "qhx_session_send: %d %s\n", st, qhx_last_error());
  REQUIRE(st == QHX_OK && r != NULL);
  return r;
}

static const char* result_text(const qhx_result* r) {
  const char* t = NULL;
  size_t len = 0;
  REQUIRE(qhx_result_text(r, &t, &len) == QHX_OK && t != NULL && strlen(t) == len);
  return t;
}

static const char* stop_reason(const qhx_result* r) {
  const char* reason = NULL;
  REQUIRE(qhx_result_stop_reason(r, &reason) == QHX_OK && reason != NULL);
  return reason;
}

static int same_tokens(const qhx_result* a, const qhx_result* b) {
  const int32_t *ta = NULL, *tb = NULL;
  size_t na = 0, nb = 0;
  REQUIRE(qhx_result_tokens(a, &ta, &na) == QHX_OK && qhx_result_tokens(b, &tb, &nb) == QHX_OK);
  return na == nb && na > 0 && memcmp(ta, tb, na * sizeof(int32_t)) == 0;
}

static qhx_timings timings_of(const qhx_result* r) {
  qhx_timings t;
  REQUIRE(qhx_timings_init(&t) == QHX_OK && t.struct_size == sizeof t);
  REQUIRE(qhx_result_timings(r, &t) == QHX_OK);
  return t;
}

/* ---- API version 1 ---- */

static void test_tokenizer(const char* tokenizer_json) {
  qhx_tokenizer* tok = NULL;
  int32_t ids[16];
  size_t n = 0;
  char buf[64];
  size_t len = 0;
  const int32_t expected[] = {74785, 419, 2168, 13};
  const char* text = "Describe this image.";

  CHECK(qhx_tokenizer_load("/nonexistent/tokenizer.json", &tok) == QHX_ERR);
  CHECK(tok == NULL);
  CHECK(contains(qhx_last_error(), "/nonexistent/tokenizer.json"));
  CHECK_ARG(qhx_tokenizer_load(NULL, &tok), "qhx_tokenizer_load", "path");
  CHECK_ARG(qhx_tokenizer_load(tokenizer_json, NULL), "qhx_tokenizer_load", "out");

  REQUIRE(qhx_tokenizer_load(tokenizer_json, &tok) == QHX_OK && tok != NULL);
  CHECK(qhx_tokenizer_vocab_size(tok) == 151669);
  CHECK(qhx_tokenizer_vocab_size(NULL) == 0);
  CHECK(contains(qhx_last_error(), "qhx_tokenizer_vocab_size") && contains(qhx_last_error(), "tok"));

  CHECK(qhx_tokenizer_encode(tok, text, strlen(text), ids, 16, &n) == QHX_OK);
  CHECK(n == 4 && memcmp(ids, expected, sizeof expected) == 0);
  CHECK(qhx_tokenizer_encode(tok, text, strlen(text), ids, 2, &n) == QHX_ERR_BUFFER_TOO_SMALL);
  CHECK(n == 4);
  CHECK(qhx_tokenizer_encode(tok, "\xC3(", 2, ids, 16, &n) == QHX_ERR);
  CHECK(contains(qhx_last_error(), "UTF-8"));
  CHECK_ARG(qhx_tokenizer_encode(NULL, text, 1, ids, 16, &n), "qhx_tokenizer_encode", "tok");
  CHECK_ARG(qhx_tokenizer_encode(tok, NULL, 1, ids, 16, &n), "qhx_tokenizer_encode", "text");
  CHECK_ARG(qhx_tokenizer_encode(tok, text, 1, NULL, 16, &n), "qhx_tokenizer_encode", "ids");
  CHECK_ARG(qhx_tokenizer_encode(tok, text, 1, ids, 16, NULL), "qhx_tokenizer_encode", "n_ids");

  CHECK(qhx_tokenizer_decode(tok, expected, 4, 0, buf, sizeof buf, &len) == QHX_OK);
  CHECK(len == strlen(text) && strcmp(buf, text) == 0);
  CHECK(qhx_tokenizer_decode(tok, expected, 4, 0, buf, 5, &len) == QHX_ERR_BUFFER_TOO_SMALL);
  CHECK(len == strlen(text));
  {
    const int32_t bad[] = {151669};
    CHECK(qhx_tokenizer_decode(tok, bad, 1, 0, buf, sizeof buf, &len) == QHX_ERR);
    CHECK(contains(qhx_last_error(), "out of range"));
  }
  CHECK_ARG(qhx_tokenizer_decode(NULL, expected, 4, 0, buf, sizeof buf, &len), "qhx_tokenizer_decode", "tok");
  CHECK_ARG(qhx_tokenizer_decode(tok, NULL, 4, 0, buf, sizeof buf, &len), "qhx_tokenizer_decode", "ids");
  CHECK_ARG(qhx_tokenizer_decode(tok, expected, 4, 0, NULL, sizeof buf, &len), "qhx_tokenizer_decode", "buf");
  CHECK_ARG(qhx_tokenizer_decode(tok, expected, 4, 0, buf, sizeof buf, NULL), "qhx_tokenizer_decode", "len");
  qhx_tokenizer_free(tok);
  qhx_tokenizer_free(NULL);
}

/* v1 one-shot generation; returns its greedy answer to "Hello" (5 tokens) in `answer`. */
static void test_generate_v1(const char* checkpoint, char* answer, size_t answer_cap) {
  qhx_pipeline* pipe = NULL;
  qhx_generate_options o;
  struct stream s = {0, 0};
  char text[4096];
  size_t len = 0;
  memset(&o, 0, sizeof o);
  CHECK(qhx_pipeline_open("/nonexistent/plan.json", &pipe) == QHX_ERR && pipe == NULL);
  CHECK(contains(qhx_last_error(), "/nonexistent/plan.json"));
  CHECK_ARG(qhx_pipeline_open(NULL, &pipe), "qhx_pipeline_open", "manifest_or_dir");
  CHECK_ARG(qhx_pipeline_open(checkpoint, NULL), "qhx_pipeline_open", "out");
  REQUIRE(qhx_pipeline_open(checkpoint, &pipe) == QHX_OK && pipe != NULL);
  o.prompt = "Hello";
  o.max_new_tokens = 5;
  o.greedy = 1;
  CHECK(qhx_pipeline_generate(pipe, &o, on_text_v1, &s, text, sizeof text, &len) == QHX_OK);
  CHECK(s.calls >= 1 && s.bytes == len); /* the stream carried the whole text */
  CHECK(strlen(text) == len);
  REQUIRE(len < answer_cap);
  memcpy(answer, text, len + 1);
  {
    size_t need = 0;
    CHECK(qhx_pipeline_generate(pipe, &o, NULL, NULL, text, 1, &need) == QHX_ERR_BUFFER_TOO_SMALL);
    CHECK(need == len);
  }
  CHECK_ARG(qhx_pipeline_generate(NULL, &o, NULL, NULL, text, sizeof text, &len), "qhx_pipeline_generate", "pipe");
  CHECK_ARG(qhx_pipeline_generate(pipe, NULL, NULL, NULL, text, sizeof text, &len), "qhx_pipeline_generate", "options");
  CHECK_ARG(qhx_pipeline_generate(pipe, &o, NULL, NULL, NULL, sizeof text, &len), "qhx_pipeline_generate", "buf");
  CHECK_ARG(qhx_pipeline_generate(pipe, &o, NULL, NULL, text, sizeof text, NULL), "qhx_pipeline_generate", "len");
  o.n_images = 1;
  CHECK_ARG(qhx_pipeline_generate(pipe, &o, NULL, NULL, text, sizeof text, &len), "qhx_pipeline_generate",
            "options->images");
  o.n_images = 0;
  o.prompt = NULL;
  CHECK_ARG(qhx_pipeline_generate(pipe, &o, NULL, NULL, text, sizeof text, &len), "qhx_pipeline_generate",
            "options->prompt");
  o.prompt = "Hello";
  o.max_new_tokens = 1000000;
  CHECK(qhx_pipeline_generate(pipe, &o, NULL, NULL, text, sizeof text, &len) == QHX_ERR);
  CHECK(contains(qhx_last_error(), "context"));
  qhx_pipeline_free(pipe);
  qhx_pipeline_free(NULL);
}

/* ---- API version 2 ---- */

static void test_versions_and_structs(void) {
  qhx_pipeline_options po;
  qhx_generation_options go;
  qhx_timings t;
  qhx_image_cache_stats cs;
  CHECK(strlen(qhx_version()) > 0);
  CHECK(qhx_api_version() == QHX_API_VERSION);
  CHECK(QHX_API_VERSION == 6);

  memset(&po, 0x5a, sizeof po);
  CHECK(qhx_pipeline_options_init(&po) == QHX_OK);
  CHECK(po.struct_size == sizeof po && po.image_cache_mb < 0 && po.want_images == 0 && po.threads == 0);
  CHECK(po.weights_in_memory == 0);
  memset(&go, 0x5a, sizeof go);
  CHECK(qhx_generation_options_init(&go) == QHX_OK);
  CHECK(go.struct_size == sizeof go && go.max_new_tokens == 0 && go.use_manifest_sampling == 1);
  CHECK(go.greedy == 0 && go.temperature == 1.0f && go.top_k == 0 && go.top_p == 1.0f && go.min_p == 0.0f);
  CHECK(go.repetition_penalty == 1.0f && go.presence_penalty == 0.0f && go.seed == 0);
  CHECK(go.stop == NULL && go.n_stop == 0 && go.resize == NULL && go.on_text == NULL && go.user == NULL);
  CHECK(go.keep_step_logits == 0 && go.frequency_penalty == 0.0f && go.speculate == 0);
  memset(&t, 0x5a, sizeof t);
  CHECK(qhx_timings_init(&t) == QHX_OK && t.struct_size == sizeof t && t.load_ms == 0 && t.decode_steps == 0);
  memset(&cs, 0x5a, sizeof cs);
  CHECK(qhx_image_cache_stats_init(&cs) == QHX_OK && cs.struct_size == sizeof cs && cs.hits == 0);

  /* The API 1-5 symbols (the names in parentheses: not the header's macros). */
  CHECK_ARG((qhx_pipeline_options_init)(NULL), "qhx_pipeline_options_init", "options");
  CHECK_ARG((qhx_generation_options_init)(NULL), "qhx_generation_options_init", "options");
  CHECK_ARG((qhx_timings_init)(NULL), "qhx_timings_init", "timings");
  CHECK_ARG((qhx_image_cache_stats_init)(NULL), "qhx_image_cache_stats_init", "stats");
  CHECK_ARG(qhx_pipeline_options_init_sized(NULL, sizeof po), "qhx_pipeline_options_init_sized", "options");
  CHECK_ARG(qhx_generation_options_init_sized(NULL, sizeof go), "qhx_generation_options_init_sized", "options");
  CHECK_ARG(qhx_timings_init_sized(NULL, sizeof t), "qhx_timings_init_sized", "timings");
  CHECK_ARG(qhx_image_cache_stats_init_sized(NULL, sizeof cs), "qhx_image_cache_stats_init_sized", "stats");
  memset(&po, 0x5a, sizeof po);
  CHECK((qhx_pipeline_options_init)(&po) == QHX_OK && po.struct_size == sizeof po && po.weights_in_memory == 0);
  memset(&t, 0x5a, sizeof t);
  CHECK((qhx_timings_init)(&t) == QHX_OK && t.struct_size == sizeof t && t.decode_steps == 0);

  /* A program built against an older header has a shorter struct: init_sized fills
   * exactly its bytes (the API version 2 pipeline options end at `threads`) and not
   * one past them. */
  {
    const size_t v2 = offsetof(qhx_pipeline_options, threads) + sizeof(int32_t);
    unsigned char buf[sizeof(qhx_pipeline_options) + 16];
    qhx_pipeline_options* older = (qhx_pipeline_options*)(void*)buf;
    size_t i;
    int untouched = 1;
    memset(buf, 0x5a, sizeof buf);
    CHECK(qhx_pipeline_options_init_sized(older, v2) == QHX_OK);
    CHECK(older->struct_size == v2 && older->image_cache_mb < 0 && older->want_images == 0 && older->threads == 0);
    for (i = v2; i < sizeof buf; ++i) untouched = untouched && buf[i] == 0x5a;
    CHECK(untouched);
    CHECK(qhx_pipeline_options_init_sized(older, v2 - 1) == QHX_ERR_ARGUMENT);
    CHECK(contains(qhx_last_error(), "qhx_pipeline_options_init_sized") && contains(qhx_last_error(), "struct_size"));
  }
  /* A newer header's longer struct: the library's fields get their defaults, the
   * tail it does not know is zeroed, struct_size is the caller's. */
  {
    struct {
      qhx_generation_options o;
      unsigned char newer_fields[24];
    } longer;
    size_t i;
    int zeroed = 1;
    memset(&longer, 0x5a, sizeof longer);
    CHECK(qhx_generation_options_init_sized(&longer.o, sizeof longer) == QHX_OK);
    CHECK(longer.o.struct_size == sizeof longer && longer.o.use_manifest_sampling == 1 && longer.o.speculate == 0);
    for (i = 0; i < sizeof longer.newer_fields; ++i) zeroed = zeroed && longer.newer_fields[i] == 0;
    CHECK(zeroed);
  }
}

static void test_messages(void) {
  qhx_message* m = NULL;
  const char* s = NULL;
  size_t n = 99, len = 0;
  int kind = -1;
  const unsigned char bytes[] = {1, 2, 3};
  CHECK(qhx_message_new("robot", &m) == QHX_ERR_ARGUMENT && m == NULL);
  CHECK(contains(qhx_last_error(), "qhx_message_new") && contains(qhx_last_error(), "\"robot\""));
  CHECK_ARG(qhx_message_new(NULL, &m), "qhx_message_new", "role");
  CHECK_ARG(qhx_message_new("user", NULL), "qhx_message_new", "out");
  REQUIRE(qhx_message_new("user", &m) == QHX_OK && m != NULL);
  CHECK(qhx_message_role(m, &s) == QHX_OK && strcmp(s, "user") == 0);
  CHECK(qhx_message_part_count(m, &n) == QHX_OK && n == 0);
  CHECK(qhx_message_add_text(m, "Hi there", 2) == QHX_OK); /* only the first `len` bytes */
  CHECK(qhx_message_add_image_file(m, "/some/picture.png") == QHX_OK);
  CHECK(qhx_message_add_image_bytes(m, bytes, sizeof bytes) == QHX_OK);
  CHECK(qhx_message_add_text(m, "\xC3(", 2) == QHX_ERR);
  CHECK(contains(qhx_last_error(), "qhx_message_add_text") && contains(qhx_last_error(), "UTF-8"));
  CHECK(qhx_message_part_count(m, &n) == QHX_OK && n == 3); /* the bad text was not added */
  CHECK(qhx_message_part(m, 0, &kind, &s, &len) == QHX_OK && kind == QHX_PART_TEXT && len == 2 && strcmp(s, "Hi") == 0);
  CHECK(qhx_message_part(m, 1, &kind, &s, NULL) == QHX_OK && kind == QHX_PART_IMAGE &&
        strcmp(s, "/some/picture.png") == 0);
  CHECK(qhx_message_part(m, 2, &kind, &s, &len) == QHX_OK && kind == QHX_PART_IMAGE &&
        strcmp(s, "image in memory") == 0 && len == strlen(s));
  CHECK_ARG(qhx_message_part(m, 3, &kind, &s, &len), "qhx_message_part", "index 3");
  CHECK_ARG(qhx_message_part(NULL, 0, &kind, &s, &len), "qhx_message_part", "msg");
  CHECK_ARG(qhx_message_part(m, 0, NULL, &s, &len), "qhx_message_part", "kind");
  CHECK_ARG(qhx_message_part(m, 0, &kind, NULL, &len), "qhx_message_part", "text");
  CHECK_ARG(qhx_message_add_text(NULL, "x", 1), "qhx_message_add_text", "msg");
  CHECK_ARG(qhx_message_add_text(m, NULL, 1), "qhx_message_add_text", "text");
  CHECK_ARG(qhx_message_add_image_file(NULL, "a.png"), "qhx_message_add_image_file", "msg");
  CHECK_ARG(qhx_message_add_image_file(m, NULL), "qhx_message_add_image_file", "path");
  CHECK_ARG(qhx_message_add_image_bytes(NULL, bytes, 3), "qhx_message_add_image_bytes", "msg");
  CHECK_ARG(qhx_message_add_image_bytes(m, NULL, 3), "qhx_message_add_image_bytes", "data");
  CHECK_ARG(qhx_message_add_image_bytes(m, bytes, 0), "qhx_message_add_image_bytes", "len");
  CHECK_ARG(qhx_message_role(NULL, &s), "qhx_message_role", "msg");
  CHECK_ARG(qhx_message_role(m, NULL), "qhx_message_role", "role");
  CHECK_ARG(qhx_message_part_count(NULL, &n), "qhx_message_part_count", "msg");
  CHECK_ARG(qhx_message_part_count(m, NULL), "qhx_message_part_count", "n");
  qhx_message_free(m);
  qhx_message_free(NULL);
}

static void test_pipeline_options(const char* checkpoint) {
  qhx_pipeline* pipe = NULL;
  qhx_pipeline_options po;
  const char* warning = NULL;
  int takes = -1;
  qhx_image_cache_stats cs;
  CHECK_ARG(qhx_pipeline_open2(NULL, NULL, &pipe), "qhx_pipeline_open2", "path");
  CHECK_ARG(qhx_pipeline_open2(checkpoint, NULL, NULL), "qhx_pipeline_open2", "out");
  qhx_pipeline_options_init(&po);
  po.struct_size = offsetof(qhx_pipeline_options, threads); /* an impossible older struct: below API version 2 */
  CHECK_ARG(qhx_pipeline_open2(checkpoint, &po, &pipe), "qhx_pipeline_open2", "options->struct_size");
  CHECK(pipe == NULL && contains(qhx_last_error(), "qhx_pipeline_options"));
  qhx_pipeline_options_init(&po);
  po.threads = -1;
  CHECK_ARG(qhx_pipeline_open2(checkpoint, &po, &pipe), "qhx_pipeline_open2", "threads");
  CHECK(qhx_pipeline_open2("/nonexistent/bundle", NULL, &pipe) == QHX_ERR && pipe == NULL);
  CHECK(contains(qhx_last_error(), "qhx_pipeline_open2") && contains(qhx_last_error(), "/nonexistent/bundle"));

  /* More threads than any machine has: capped, with a warning that says so. The
   * cache is off, so the statistics show nothing held. */
  qhx_pipeline_options_init(&po);
  po.threads = 100000;
  po.image_cache_mb = 0;
  REQUIRE(qhx_pipeline_open2(checkpoint, &po, &pipe) == QHX_OK && pipe != NULL);
  CHECK(qhx_pipeline_warning(pipe, &warning) == QHX_OK && contains(warning, "100000 threads asked for"));
  CHECK(qhx_pipeline_takes_images(pipe, &takes) == QHX_OK && takes == 1);
  qhx_image_cache_stats_init(&cs);
  CHECK(qhx_pipeline_image_cache_stats(pipe, &cs) == QHX_OK && cs.capacity_bytes == 0 && cs.entries == 0);
  cs.struct_size = 8;
  CHECK_ARG(qhx_pipeline_image_cache_stats(pipe, &cs), "qhx_pipeline_image_cache_stats", "stats->struct_size");
  CHECK_ARG(qhx_pipeline_image_cache_stats(NULL, &cs), "qhx_pipeline_image_cache_stats", "pipe");
  CHECK_ARG(qhx_pipeline_image_cache_stats(pipe, NULL), "qhx_pipeline_image_cache_stats", "stats");
  CHECK_ARG(qhx_pipeline_warning(NULL, &warning), "qhx_pipeline_warning", "pipe");
  CHECK_ARG(qhx_pipeline_warning(pipe, NULL), "qhx_pipeline_warning", "text");
  CHECK_ARG(qhx_pipeline_takes_images(NULL, &takes), "qhx_pipeline_takes_images", "pipe");
  CHECK_ARG(qhx_pipeline_takes_images(pipe, NULL), "qhx_pipeline_takes_images", "takes_images");

  /* API 3: the plan's sampling defaults (the tiny checkpoint's generation_config.json:
   * temperature 0.7, top_k 20, top_p 0.8) written into the options; the rest untouched. */
  {
    qhx_generation_options go;
    qhx_generation_options_init(&go);
    go.max_new_tokens = 7;
    CHECK(qhx_pipeline_default_sampling(pipe, &go) == QHX_OK);
    CHECK(go.use_manifest_sampling == 0 && go.greedy == 0 && go.top_k == 20 && go.max_new_tokens == 7);
    CHECK(fabsf(go.temperature - 0.7f) < 1e-6f && fabsf(go.top_p - 0.8f) < 1e-6f && go.repetition_penalty == 1.0f);
    CHECK_ARG(qhx_pipeline_default_sampling(NULL, &go), "qhx_pipeline_default_sampling", "pipe");
    CHECK_ARG(qhx_pipeline_default_sampling(pipe, NULL), "qhx_pipeline_default_sampling", "options");
    go.struct_size = 8;
    CHECK_ARG(qhx_pipeline_default_sampling(pipe, &go), "qhx_pipeline_default_sampling", "options->struct_size");
  }
  qhx_pipeline_free(pipe);

  /* A struct from a newer header (longer) is accepted; its tail is ignored. */
  {
    struct {
      qhx_pipeline_options o;
      char newer_fields[16];
    } longer;
    memset(&longer, 0x7f, sizeof longer);
    qhx_pipeline_options_init(&longer.o);
    longer.o.struct_size = sizeof longer;
    pipe = NULL;
    CHECK(qhx_pipeline_open2(checkpoint, &longer.o, &pipe) == QHX_OK && pipe != NULL);
    CHECK(qhx_pipeline_warning(pipe, &warning) == QHX_OK && strcmp(warning, "") == 0);
    qhx_pipeline_free(pipe);
  }
}

/* Results: every getter on one answer, and their NULL arguments. */
static void test_result_getters(const qhx_result* r, int64_t max_new_tokens) {
  const int32_t* ids = NULL;
  int32_t copy[64];
  size_t n = 0, need = 0, prompt = 0, cached = 99, rows = 0, vocab = 0, len = 0, i;
  const float* logits = NULL;
  const char* s = NULL;
  qhx_timings t;

  CHECK(qhx_result_tokens(r, &ids, &n) == QHX_OK && n >= 1 && n <= (size_t)max_new_tokens && ids != NULL);
  CHECK(qhx_result_copy_tokens(r, copy, 64, &need) == QHX_OK && need == n && memcmp(copy, ids, n * 4) == 0);
  CHECK(qhx_result_copy_tokens(r, copy, n - 1, &need) == QHX_ERR_BUFFER_TOO_SMALL && need == n);
  CHECK(contains(qhx_last_error(), "too small"));
  CHECK(qhx_result_prompt_token_count(r, &prompt) == QHX_OK && prompt > 10);
  CHECK(qhx_result_cached_tokens(r, &cached) == QHX_OK && cached == 0);
  CHECK(qhx_result_reasoning(r, &s, &len) == QHX_OK && s != NULL && strlen(s) == len);
  CHECK(qhx_result_reasoning(r, &s, NULL) == QHX_OK);
  CHECK(qhx_result_text(r, &s, NULL) == QHX_OK && s != NULL);
  /* Greedy: each row of the kept step logits has its maximum at the token it chose. */
  CHECK(qhx_result_step_logits(r, &logits, &rows, &vocab) == QHX_OK);
  CHECK(rows == n && vocab >= 151669 && logits != NULL); /* the config's vocab_size: at least the tokenizer's ids */
  for (i = 0; logits != NULL && i < rows; ++i) {
    size_t v, best = 0;
    for (v = 1; v < vocab; ++v)
      if (logits[i * vocab + v] > logits[i * vocab + best]) best = v;
    CHECK((int32_t)best == ids[i]);
  }
  t = timings_of(r);
  CHECK(t.load_ms > 0 && t.prefill_ms > 0 && t.ttft_ms > 0 && t.image_tokens > 0);
  CHECK(t.decode_steps == (int64_t)n - 1 || t.decode_steps == (int64_t)n);
  CHECK(!isnan(t.decode_ms_per_token));
  /* Only the fields that fit: an impossible short struct is refused, nothing written. */
  qhx_timings_init(&t);
  t.struct_size = 16;
  t.vision_ms = -1;
  CHECK_ARG(qhx_result_timings(r, &t), "qhx_result_timings", "timings->struct_size");
  CHECK(t.vision_ms == -1);

  CHECK_ARG(qhx_result_text(NULL, &s, &len), "qhx_result_text", "result");
  CHECK_ARG(qhx_result_text(r, NULL, &len), "qhx_result_text", "text");
  CHECK_ARG(qhx_result_reasoning(NULL, &s, &len), "qhx_result_reasoning", "result");
  CHECK_ARG(qhx_result_reasoning(r, NULL, &len), "qhx_result_reasoning", "text");
  CHECK_ARG(qhx_result_stop_reason(NULL, &s), "qhx_result_stop_reason", "result");
  CHECK_ARG(qhx_result_stop_reason(r, NULL), "qhx_result_stop_reason", "reason");
  CHECK_ARG(qhx_result_tokens(NULL, &ids, &n), "qhx_result_tokens", "result");
  CHECK_ARG(qhx_result_tokens(r, NULL, &n), "qhx_result_tokens", "ids");
  CHECK_ARG(qhx_result_tokens(r, &ids, NULL), "qhx_result_tokens", "n");
  CHECK_ARG(qhx_result_copy_tokens(NULL, copy, 64, &n), "qhx_result_copy_tokens", "result");
  CHECK_ARG(qhx_result_copy_tokens(r, NULL, 64, &n), "qhx_result_copy_tokens", "ids");
  CHECK_ARG(qhx_result_copy_tokens(r, copy, 64, NULL), "qhx_result_copy_tokens", "n");
  CHECK_ARG(qhx_result_prompt_token_count(NULL, &n), "qhx_result_prompt_token_count", "result");
  CHECK_ARG(qhx_result_prompt_token_count(r, NULL), "qhx_result_prompt_token_count", "n");
  CHECK_ARG(qhx_result_cached_tokens(NULL, &n), "qhx_result_cached_tokens", "result");
  CHECK_ARG(qhx_result_cached_tokens(r, NULL), "qhx_result_cached_tokens", "n");
  CHECK_ARG(qhx_result_step_logits(NULL, &logits, &rows, &vocab), "qhx_result_step_logits", "result");
  CHECK_ARG(qhx_result_step_logits(r, NULL, &rows, &vocab), "qhx_result_step_logits", "logits");
  CHECK_ARG(qhx_result_step_logits(r, &logits, NULL, &vocab), "qhx_result_step_logits", "rows");
  CHECK_ARG(qhx_result_step_logits(r, &logits, &rows, NULL), "qhx_result_step_logits", "vocab");
  CHECK_ARG(qhx_result_timings(NULL, &t), "qhx_result_timings", "result");
  CHECK_ARG(qhx_result_timings(r, NULL), "qhx_result_timings", "timings");
  qhx_result_free(NULL);
}

static void test_sessions(const char* checkpoint, const char* image_path, const char* v1_answer) {
  qhx_pipeline* pipe = NULL;
  qhx_session *a = NULL, *b = NULL;
  qhx_message *turn1_file, *turn1_bytes, *turn2;
  qhx_result *a1, *a2, *b1, *b2, *r;
  qhx_generation_options o = greedy(6);
  qhx_timings t;
  qhx_image_cache_stats cs;
  size_t n = 0, cached = 0, png_len = 0;
  unsigned char* png = read_file(image_path, &png_len);
  REQUIRE(png != NULL && png_len > 8);
  o.keep_step_logits = 1;

  REQUIRE(qhx_pipeline_open2(checkpoint, NULL, &pipe) == QHX_OK);
  CHECK_ARG(qhx_session_new(NULL, &a), "qhx_session_new", "pipe");
  CHECK_ARG(qhx_session_new(pipe, NULL), "qhx_session_new", "out");
  REQUIRE(qhx_session_new(pipe, &a) == QHX_OK && a != NULL);
  REQUIRE(qhx_session_new(pipe, &b) == QHX_OK && b != NULL);

  REQUIRE(qhx_message_new("user", &turn1_file) == QHX_OK);
  REQUIRE(qhx_message_add_image_file(turn1_file, image_path) == QHX_OK);
  REQUIRE(qhx_message_add_text(turn1_file, "Describe the picture.", 21) == QHX_OK);
  REQUIRE(qhx_message_new("user", &turn1_bytes) == QHX_OK);
  REQUIRE(qhx_message_add_image_bytes(turn1_bytes, png, png_len) == QHX_OK);
  free(png); /* the message holds its own copy */
  REQUIRE(qhx_message_add_text(turn1_bytes, "Describe the picture.", 21) == QHX_OK);
  turn2 = text_message("user", "What colour is the largest shape?");

  /* Session A: turn 1 with the image from its file, then turn 2. */
  a1 = send(a, turn1_file, &o);
  test_result_getters(a1, 6);
  t = timings_of(a1);
  CHECK(t.images_encoded == 1 && t.image_cache_hits == 0 && t.vision_ms > 0);
  CHECK(qhx_session_message_count(a, &n) == QHX_OK && n == 2);
  a2 = send(a, turn2, &o);
  CHECK(qhx_result_cached_tokens(a2, &cached) == QHX_OK && cached > 0); /* turn 1 came from the cache */
  t = timings_of(a2);
  CHECK(t.images_encoded == 0 && t.image_cache_hits == 0);
  CHECK(qhx_session_message_count(a, &n) == QHX_OK && n == 4);
  CHECK(qhx_session_cached_tokens(a, &n) == QHX_OK && n > cached);

  /* Session B: the same picture as bytes in memory: its features come from the
   * pipeline's cache (no vision work), and the answers equal A's token for token. */
  b1 = send(b, turn1_bytes, &o);
  t = timings_of(b1);
  CHECK(t.image_cache_hits == 1);
  CHECK(t.images_encoded == 0);
  CHECK(t.vision_ms == 0);
  CHECK(same_tokens(a1, b1));
  CHECK(strcmp(result_text(a1), result_text(b1)) == 0);
  b2 = send(b, turn2, &o);
  CHECK(same_tokens(a2, b2));
  qhx_image_cache_stats_init(&cs);
  CHECK(qhx_pipeline_image_cache_stats(pipe, &cs) == QHX_OK);
  CHECK(cs.entries == 1 && cs.hits >= 1 && cs.misses == 1 && cs.bytes > 0 && cs.capacity_bytes >= cs.bytes);

  /* An unreadable image (a missing file; bytes that are no image) fails the send,
   * naming the image, and leaves the conversation as it was. */
  {
    qhx_message* bad = NULL;
    const unsigned char junk[] = "\x89PNG\r\n\x1a\n not really";
    REQUIRE(qhx_message_new("user", &bad) == QHX_OK);
    REQUIRE(qhx_message_add_image_file(bad, "/nonexistent/absent_picture.png") == QHX_OK);
    REQUIRE(qhx_message_add_text(bad, "Look.", 5) == QHX_OK);
    r = (qhx_result*)&r; /* must be reset to NULL */
    CHECK(qhx_session_send(a, bad, &o, &r) == QHX_ERR && r == NULL);
    CHECK(contains(qhx_last_error(), "absent_picture.png"));
    CHECK(qhx_session_message_count(a, &n) == QHX_OK && n == 4);
    qhx_message_free(bad);
    REQUIRE(qhx_message_new("user", &bad) == QHX_OK);
    REQUIRE(qhx_message_add_image_bytes(bad, junk, sizeof junk - 1) == QHX_OK);
    CHECK(qhx_session_send(a, bad, &o, &r) == QHX_ERR && r == NULL);
    CHECK(contains(qhx_last_error(), "image in memory"));
    CHECK(qhx_session_message_count(a, &n) == QHX_OK && n == 4);
    qhx_message_free(bad);
  }

  /* Replacing the history: A's first three messages (user, assistant, user)
   * copied out and sent to B after a reset: nothing is cached any more, and the
   * answer equals A's second one. */
  {
    qhx_message* history[3];
    const char* role = NULL;
    size_t i;
    for (i = 0; i < 3; ++i) REQUIRE(qhx_session_copy_message(a, i, &history[i]) == QHX_OK && history[i] != NULL);
    CHECK(qhx_message_role(history[1], &role) == QHX_OK && strcmp(role, "assistant") == 0);
    CHECK(qhx_session_reset(b) == QHX_OK);
    CHECK(qhx_session_message_count(b, &n) == QHX_OK && n == 0);
    CHECK(qhx_session_cached_tokens(b, &n) == QHX_OK && n == 0);
    CHECK(qhx_session_respond(b, (const qhx_message* const*)history, 3, &o, &r) == QHX_OK && r != NULL);
    if (r != NULL) {
      CHECK(same_tokens(a2, r));
      CHECK(qhx_result_cached_tokens(r, &cached) == QHX_OK && cached == 0);
      t = timings_of(r);
      CHECK(t.image_cache_hits == 1 && t.images_encoded == 0);
      qhx_result_free(r);
    }
    /* The same request again: all but the last prompt token come from the cache. */
    CHECK(qhx_session_respond(b, (const qhx_message* const*)history, 3, &o, &r) == QHX_OK && r != NULL);
    if (r != NULL) {
      size_t prompt = 0;
      CHECK(same_tokens(a2, r));
      CHECK(qhx_result_prompt_token_count(r, &prompt) == QHX_OK);
      CHECK(qhx_result_cached_tokens(r, &cached) == QHX_OK && cached == prompt - 1);
      qhx_result_free(r);
    }
    CHECK(qhx_session_message_count(b, &n) == QHX_OK && n == 4);
    CHECK(qhx_session_respond(b, NULL, 0, &o, &r) == QHX_ERR && r == NULL);
    CHECK(contains(qhx_last_error(), "no messages"));
    CHECK(qhx_session_respond(b, (const qhx_message* const*)history, 2, &o, &r) == QHX_ERR);
    CHECK(contains(qhx_last_error(), "must end with a user message"));
    CHECK(qhx_session_message_count(b, &n) == QHX_OK && n == 4);
    CHECK_ARG(qhx_session_respond(NULL, (const qhx_message* const*)history, 3, &o, &r), "qhx_session_respond",
              "session");
    CHECK_ARG(qhx_session_respond(b, NULL, 3, &o, &r), "qhx_session_respond", "messages");
    CHECK_ARG(qhx_session_respond(b, (const qhx_message* const*)history, 3, &o, NULL), "qhx_session_respond", "out");
    {
      const qhx_message* holes[2] = {history[0], NULL};
      CHECK_ARG(qhx_session_respond(b, holes, 2, &o, &r), "qhx_session_respond", "messages[1]");
    }
    {
      qhx_message* none = history[0];
      CHECK_ARG(qhx_session_copy_message(a, 4, &none), "qhx_session_copy_message", "index 4");
      CHECK(none == NULL);
      CHECK_ARG(qhx_session_copy_message(NULL, 0, &none), "qhx_session_copy_message", "session");
    }
    CHECK_ARG(qhx_session_copy_message(a, 0, NULL), "qhx_session_copy_message", "out");
    for (i = 0; i < 3; ++i) qhx_message_free(history[i]);
  }

  /* Greedy through v2 equals greedy through v1 for the same prompt. */
  {
    qhx_session* c = NULL;
    qhx_message* hello = text_message("user", "Hello");
    qhx_generation_options five = greedy(5);
    REQUIRE(qhx_session_new(pipe, &c) == QHX_OK);
    r = send(c, hello, &five);
    CHECK(strcmp(result_text(r), v1_answer) == 0);
    qhx_result_free(r);
    /* Options NULL: the manifest's defaults, which still answer. */
    CHECK(qhx_session_reset(c) == QHX_OK);
    CHECK(qhx_session_send(c, hello, NULL, &r) == QHX_OK && r != NULL);
    qhx_result_free(r);
    qhx_message_free(hello);
    qhx_session_free(c);
  }

  /* Options: bad struct_size, bad sampling values, NULL stop strings, bad resize. */
  {
    qhx_generation_options bad = greedy(4);
    bad.struct_size = offsetof(qhx_generation_options, keep_step_logits); /* ends before a version 2 field */
    CHECK_ARG(qhx_session_send(a, turn2, &bad, &r), "qhx_session_send", "options->struct_size");
    CHECK(r == NULL && contains(qhx_last_error(), "qhx_generation_options"));
    bad = greedy(4);
    bad.greedy = 0;
    bad.temperature = -1.0f;
    CHECK(qhx_session_send(a, turn2, &bad, &r) == QHX_ERR && contains(qhx_last_error(), "temperature"));
    bad = greedy(4);
    bad.n_stop = 1;
    CHECK_ARG(qhx_session_send(a, turn2, &bad, &r), "qhx_session_send", "options->stop");
    {
      const char* stops[2] = {"x", NULL};
      bad.stop = stops;
      bad.n_stop = 2;
      CHECK_ARG(qhx_session_send(a, turn2, &bad, &r), "qhx_session_send", "options->stop[1]");
    }
    bad = greedy(4);
    bad.resize = "sideways";
    CHECK(qhx_session_send(a, turn1_file, &bad, &r) == QHX_ERR && contains(qhx_last_error(), "sideways"));
    CHECK(qhx_session_message_count(a, &n) == QHX_OK && n == 4);
    CHECK_ARG(qhx_session_send(NULL, turn2, &o, &r), "qhx_session_send", "session");
    CHECK_ARG(qhx_session_send(a, NULL, &o, &r), "qhx_session_send", "message");
    CHECK_ARG(qhx_session_send(a, turn2, &o, NULL), "qhx_session_send", "out");
    CHECK_ARG(qhx_session_reset(NULL), "qhx_session_reset", "session");
    CHECK_ARG(qhx_session_cached_tokens(NULL, &n), "qhx_session_cached_tokens", "session");
    CHECK_ARG(qhx_session_cached_tokens(a, NULL), "qhx_session_cached_tokens", "n");
    CHECK_ARG(qhx_session_message_count(NULL, &n), "qhx_session_message_count", "session");
    CHECK_ARG(qhx_session_message_count(a, NULL), "qhx_session_message_count", "n");
  }

  /* Sampling with explicit parameters and a seed: the same seed, the same answer. */
  {
    qhx_generation_options s = greedy(6);
    qhx_result *s1, *s2;
    qhx_message* q = text_message("user", "Tell me a story.");
    s.greedy = 0;
    s.temperature = 0.8f;
    s.top_k = 40;
    s.top_p = 0.95f;
    s.min_p = 0.01f;
    s.repetition_penalty = 1.1f;
    s.presence_penalty = 0.2f;
    s.seed = 1234;
    CHECK(qhx_session_reset(a) == QHX_OK);
    s1 = send(a, q, &s);
    CHECK(qhx_session_reset(a) == QHX_OK);
    s2 = send(a, q, &s);
    CHECK(same_tokens(s1, s2));
    qhx_result_free(s1);
    qhx_result_free(s2);
    qhx_message_free(q);
  }

  /* API 3's frequency penalty: a large one makes greedy decoding avoid every token already in
   * the conversation, so the answer's tokens are all different. A version 2 struct (its
   * struct_size ends before the field, whatever bytes lie after) decodes as without it. */
  {
    qhx_message* q = text_message("user", "Say the same word again and again.");
    qhx_generation_options f = greedy(12), v2 = greedy(12);
    qhx_result *plain, *penalized, *old;
    const int32_t* ids = NULL;
    size_t n = 0, i, j;
    int distinct = 1;
    CHECK(qhx_session_reset(a) == QHX_OK);
    plain = send(a, q, &v2);
    f.frequency_penalty = 100.0f;
    CHECK(qhx_session_reset(a) == QHX_OK);
    penalized = send(a, q, &f);
    CHECK(qhx_result_tokens(penalized, &ids, &n) == QHX_OK && n >= 2);
    for (i = 0; i < n; ++i)
      for (j = i + 1; j < n; ++j) distinct = distinct && ids[i] != ids[j];
    CHECK(distinct);
    memset(&v2.reserved_v3, 0x5a, sizeof v2 - offsetof(qhx_generation_options, reserved_v3));
    v2.struct_size = offsetof(qhx_generation_options, reserved_v3) + sizeof v2.reserved_v3;
    CHECK(qhx_session_reset(a) == QHX_OK);
    old = send(a, q, &v2);
    CHECK(same_tokens(plain, old));
    qhx_result_free(plain);
    qhx_result_free(penalized);
    qhx_result_free(old);
    qhx_message_free(q);
  }

  /* API 4's speculation: greedy answers are the same with n-gram drafts checked in one pass. A
   * version 3 struct (its struct_size ends before the field, whatever bytes follow) decodes as
   * without it, and a draft length out of range is refused, naming the field. */
  {
    qhx_message* q = text_message("user", "Say the same word again and again.");
    qhx_generation_options plain_o = greedy(12), spec = greedy(12), v3 = greedy(12);
    qhx_result *plain, *drafted, *old, *bad = NULL;
    CHECK(qhx_session_reset(a) == QHX_OK);
    plain = send(a, q, &plain_o);
    spec.speculate = 4;
    CHECK(qhx_session_reset(a) == QHX_OK);
    drafted = send(a, q, &spec);
    CHECK(same_tokens(plain, drafted));
    memset(&v3.reserved_v4, 0x5a, sizeof v3 - offsetof(qhx_generation_options, reserved_v4));
    v3.struct_size = offsetof(qhx_generation_options, reserved_v4);
    CHECK(qhx_session_reset(a) == QHX_OK);
    old = send(a, q, &v3);
    CHECK(same_tokens(plain, old));
    spec.speculate = 17;
    CHECK(qhx_session_reset(a) == QHX_OK);
    CHECK(qhx_session_send(a, q, &spec, &bad) == QHX_ERR && bad == NULL);
    CHECK(contains(qhx_last_error(), "speculate"));
    qhx_result_free(plain);
    qhx_result_free(drafted);
    qhx_result_free(old);
    qhx_message_free(q);
  }

  /* A stop string: the answer ends before it, and the stream carried exactly the answer. */
  {
    qhx_message* q = text_message("user", "Count to ten.");
    qhx_generation_options s = greedy(16);
    struct collector col;
    const char* full;
    char stop[8], expected[4096];
    const char* stops[2];
    size_t full_len;
    qhx_result* whole;
    CHECK(qhx_session_reset(a) == QHX_OK);
    whole = send(a, q, &s);
    full = result_text(whole);
    full_len = strlen(full);
    REQUIRE(full_len >= 4); /* the tiny model says something */
    memcpy(stop, full + full_len / 2, 2);
    stop[2] = '\0';
    memcpy(expected, full, (size_t)(strstr(full, stop) - full));
    expected[strstr(full, stop) - full] = '\0';
    memset(&col, 0, sizeof col);
    stops[0] = "a stop string that never comes";
    stops[1] = stop;
    s.stop = stops;
    s.n_stop = 2;
    s.on_text = on_text_v2;
    s.user = &col;
    CHECK(qhx_session_reset(a) == QHX_OK);
    r = send(a, q, &s);
    CHECK(strcmp(stop_reason(r), "stop_string") == 0);
    CHECK(strcmp(result_text(r), expected) == 0);
    CHECK(strcmp(col.text, expected) == 0);
    CHECK(strcmp(stop_reason(whole), "max_new_tokens") == 0 || strcmp(stop_reason(whole), "stop_token") == 0);
    qhx_result_free(r);
    qhx_result_free(whole);

    /* Cancelled from the callback after the first piece: stop reason "cancelled";
     * the partial answer joins the conversation. */
    s = greedy(12);
    memset(&col, 0, sizeof col);
    col.cancel_after = 1;
    s.on_text = on_text_v2;
    s.user = &col;
    CHECK(qhx_session_reset(a) == QHX_OK);
    r = send(a, q, &s);
    CHECK(strcmp(stop_reason(r), "cancelled") == 0);
    CHECK(col.calls == 1);
    CHECK(qhx_result_tokens(r, &(const int32_t*){NULL}, &n) == QHX_OK && n < 12);
    CHECK(qhx_session_message_count(a, &n) == QHX_OK && n == 2);
    qhx_result_free(r);
    qhx_message_free(q);
  }

  qhx_result_free(a1);
  qhx_result_free(a2);
  qhx_result_free(b1);
  qhx_result_free(b2);

  /* A session keeps its pipeline alive: freeing the pipeline first is fine
   * (under AddressSanitizer a use after free would fail here). */
  qhx_pipeline_free(pipe);
  r = send(b, turn2, &o);
  CHECK(strlen(stop_reason(r)) > 0);
  qhx_result_free(r);
  qhx_session_free(a);
  qhx_session_free(b);
  qhx_session_free(NULL);
  qhx_message_free(turn1_file);
  qhx_message_free(turn1_bytes);
  qhx_message_free(turn2);
}

int main(int argc, char** argv) {
  char v1_answer[4096];
  if (argc != 4) {
    fprintf(stderr, "usage: test_capi TOKENIZER_JSON CHECKPOINT_DIR IMAGE_PNG\n");
    return 2;
  }
  test_versions_and_structs();
  test_tokenizer(argv[1]);
  test_messages();
  test_generate_v1(argv[2], v1_answer, sizeof v1_answer);
  test_pipeline_options(argv[2]);
  test_sessions(argv[2], argv[3], v1_answer);
  printf("test_capi: %s\n", failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
