/* A C program using the installed QHexRT: 4 greedy tokens from the checkpoint
 * given as the argument, through a session. Exit 0 = it worked. */
#include <stdio.h>

#include <qhexrt/qhexrt.h>

static int fail(const char* what) {
  fprintf(stderr, "consumer (C): %s failed: %s\n", what, qhx_last_error());
  return 1;
}

int main(int argc, char** argv) {
  qhx_pipeline* pipe = NULL;
  qhx_session* session = NULL;
  qhx_message* msg = NULL;
  qhx_result* result = NULL;
  qhx_generation_options o;
  const char* text = NULL;
  const int32_t* ids = NULL;
  size_t n = 0;
  int status = 1;
  if (argc != 2) {
    fprintf(stderr, "usage: consumer_c CHECKPOINT_DIR\n");
    return 2;
  }
  /* The library at run time is at least as new as the header at build time. */
  if (qhx_api_version() < QHX_API_VERSION) {
    fprintf(stderr, "consumer (C): library API %d < header API %d\n", qhx_api_version(), QHX_API_VERSION);
    return 1;
  }
  if (qhx_pipeline_open2(argv[1], NULL, &pipe) != QHX_OK) return fail("qhx_pipeline_open2");
  if (qhx_session_new(pipe, &session) != QHX_OK) return fail("qhx_session_new");
  if (qhx_message_new("user", &msg) != QHX_OK || qhx_message_add_text(msg, "Hello", 5) != QHX_OK)
    return fail("building the message");
  qhx_generation_options_init(&o);
  o.max_new_tokens = 4;
  o.use_manifest_sampling = 0;
  o.greedy = 1;
  if (qhx_session_send(session, msg, &o, &result) != QHX_OK) return fail("qhx_session_send");
  if (qhx_result_tokens(result, &ids, &n) != QHX_OK || qhx_result_text(result, &text, NULL) != QHX_OK)
    return fail("reading the result");
  if (n >= 1 && n <= 4) {
    printf("consumer (C, qhexrt %s, API %d): %zu tokens: \"%s\"\n", qhx_version(), qhx_api_version(), n, text);
    status = 0;
  } else {
    fprintf(stderr, "consumer (C): %zu tokens, expected 1 to 4\n", n);
  }
  qhx_result_free(result);
  qhx_message_free(msg);
  qhx_session_free(session);
  qhx_pipeline_free(pipe);
  return status;
}
