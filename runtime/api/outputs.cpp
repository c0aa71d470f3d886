#include "runtime/api/outputs.hpp"

#include <iterator>
#include <utility>

namespace troupe {

namespace {

template <class T>
void append_moved(std::vector<T>& to, std::vector<T>&& from) {
  if (to.empty()) {
    to = std::move(from);
    return;
  }
  to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
}

}  // namespace

void append_output(RequestOutput& acc, RequestOutput&& delta) {
  if (acc.request_id.empty()) {  // the first: the request's own fields start here
    acc.request_id = std::move(delta.request_id);
    acc.prompt = std::move(delta.prompt);
    acc.prompt_token_ids = std::move(delta.prompt_token_ids);
  }
  if (delta.prompt_logprobs) {
    if (acc.prompt_logprobs)
      append_moved(*acc.prompt_logprobs, std::move(*delta.prompt_logprobs));
    else
      acc.prompt_logprobs = std::move(delta.prompt_logprobs);
  }
  for (CompletionOutput& d : delta.outputs) {
    const auto i = size_t(d.index);
    while (acc.outputs.size() <= i) {
      acc.outputs.emplace_back();
      acc.outputs.back().index = int32_t(acc.outputs.size() - 1);
    }
    CompletionOutput& c = acc.outputs[i];
    c.text += d.text;
    append_moved(c.token_ids, std::move(d.token_ids));
    if (d.logprobs) {
      if (c.logprobs)
        append_moved(*c.logprobs, std::move(*d.logprobs));
      else
        c.logprobs = std::move(d.logprobs);
    }
    c.cumulative_logprob = d.cumulative_logprob;
    c.finish_reason = std::move(d.finish_reason);
    c.stop_reason_text = std::move(d.stop_reason_text);
    c.stop_reason_token = d.stop_reason_token;
    c.times = d.times;
  }
  acc.num_cached_tokens = delta.num_cached_tokens;
  acc.metrics = delta.metrics;
  acc.finished = delta.finished;
  acc.error = std::move(delta.error);
}

}  // namespace troupe
