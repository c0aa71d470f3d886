/* troupe's logits-processor plug-in ABI (C, stable): a shared library that exports one function,
 * troupe_logits_processors(), listing the processors it offers. Load it with
 * `--logits-processor-plugin PATH` (troupe generate / serve / worker, or
 * EngineArgs::logits_processor_plugin); a request then names a processor in its
 * `logits_processors` list as "name" or "name:argument" (the argument is the processor's own
 * text, e.g. "no_repeat_ngram:3").
 *
 * A processor is stateless: it sees the request's prompt ids, the output ids of the sequence so
 * far and that sequence's logits row, and may change the row in place before sampling (after
 * the raw logprobs are taken, before logit_bias, penalties and temperature, as vLLM applies
 * per-request processors). Being a pure function of the ids, it gives the same result after a
 * preemption, on any executor and in any batch. Only the rows of requests that name a processor
 * are processed (and, on a GPU, copied to the host and back).
 *
 * Threads: apply() and check() may be called from several threads at once (one executor per
 * thread); they must not keep mutable global state. Errors: return non-zero and write a one-line
 * message (NUL-terminated, at most error_size bytes) into `error`; the engine refuses the
 * request (check) or fails it (apply) with that message, naming the processor.
 *
 * examples/logits_processors/no_repeat_ngram.c is a complete plug-in.
 */
#ifndef TROUPE_LOGITS_PROCESSOR_PLUGIN_H
#define TROUPE_LOGITS_PROCESSOR_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TROUPE_LOGITS_PROCESSOR_ABI_VERSION 1u

/* One row to process. The ids stay valid for the call only. */
typedef struct troupe_logits_row {
  const int32_t* prompt_ids; /* [num_prompt_ids] */
  int64_t num_prompt_ids;
  const int32_t* output_ids; /* [num_output_ids], the sequence's sampled tokens so far */
  int64_t num_output_ids;
  float* logits; /* [vocab_size] f32, changed in place; -INFINITY bans a token */
  int64_t vocab_size;
} troupe_logits_row;

typedef struct troupe_logits_processor {
  /* What requests name it by: [A-Za-z0-9_.-]+, unique among the loaded plug-ins. */
  const char* name;
  /* One line for --help and error messages. */
  const char* description;
  /* Checks an argument ("" when the request gave none) when a request is admitted. Returns 0
   * when it is acceptable. May be NULL: every argument is. */
  int (*check)(const char* argument, char* error, size_t error_size);
  /* Processes one row. Returns 0 on success. */
  int (*apply)(const char* argument, const troupe_logits_row* row, char* error, size_t error_size);
} troupe_logits_processor;

/* The one symbol a plug-in exports. troupe passes the ABI version it speaks; the plug-in returns
 * 0 and sets *processors / *count to a table that lives as long as the library, or returns
 * non-zero when it cannot serve that version. */
int troupe_logits_processors(uint32_t abi_version, const troupe_logits_processor** processors,
                             size_t* count);

#ifdef __cplusplus
}
#endif

#endif /* TROUPE_LOGITS_PROCESSOR_PLUGIN_H */
