/* A troupe logits-processor plug-in (runtime/sampling/logits_processor_plugin.h):
 * "no_repeat_ngram:N" bans every token that would complete an N-gram already present in the
 * sequence (prompt and output so far), as transformers' NoRepeatNGramLogitsProcessor
 * (`no_repeat_ngram_size`) does for a decoder-only model.
 *
 *   troupe generate --logits-processor-plugin
 * build/examples/logits_processors/libtroupe_no_repeat_ngram.so \
 *       --sampling-logits-processors no_repeat_ngram:2 "Once upon a time"
 *
 * Stateless: each call rescans the ids, O(length) per call, which is small next to sampling. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/sampling/logits_processor_plugin.h"

static int parse_n(const char* argument, long* n, char* error, size_t error_size) {
  char* end = NULL;
  *n = strtol(argument, &end, 10);
  if (!*argument || *end || *n < 1 || *n > 64) {
    snprintf(error, error_size, "the argument \"%s\" is not an n-gram size in [1, 64]", argument);
    return 1;
  }
  return 0;
}

static int check(const char* argument, char* error, size_t error_size) {
  long n = 0;
  return parse_n(argument, &n, error, error_size);
}

/* The token at position i of the sequence prompt ++ output. */
static int32_t at(const troupe_logits_row* row, int64_t i) {
  return i < row->num_prompt_ids ? row->prompt_ids[i] : row->output_ids[i - row->num_prompt_ids];
}

static int apply(const char* argument, const troupe_logits_row* row, char* error,
                 size_t error_size) {
  long n = 0;
  if (parse_n(argument, &n, error, error_size)) return 1;
  const int64_t len = row->num_prompt_ids + row->num_output_ids;
  if (len + 1 < n) return 0; /* no complete n-gram can be formed yet */
  /* The last n-1 tokens; every earlier n-gram starting with them bans its last token. */
  const int64_t tail = len - (n - 1);
  for (int64_t start = 0; start + n <= len; ++start) {
    int64_t k = 0;
    while (k < n - 1 && at(row, start + k) == at(row, tail + k)) ++k;
    if (k < n - 1) continue;
    const int32_t banned = at(row, start + n - 1);
    if (banned >= 0 && banned < row->vocab_size) row->logits[banned] = -INFINITY;
  }
  return 0;
}

static const troupe_logits_processor kProcessors[] = {
    {"no_repeat_ngram", "bans tokens that would repeat an n-gram of the sequence; argument: n",
     check, apply},
};

int troupe_logits_processors(uint32_t abi_version, const troupe_logits_processor** processors,
                             size_t* count) {
  if (abi_version != TROUPE_LOGITS_PROCESSOR_ABI_VERSION) return 1;
  *processors = kProcessors;
  *count = sizeof kProcessors / sizeof kProcessors[0];
  return 0;
}
