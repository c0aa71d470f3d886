#include "runtime/openai/responses.hpp"

#include <algorithm>
#include <span>

#include "runtime/api/outputs_json.hpp"
#include "runtime/tokenizer/tokenizer.hpp"

namespace troupe::openai {

namespace {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

std::string dump(const ojson& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

ojson null() {
  return ojson(nullptr);
}

double clamp_logprob(double lp) {
  return std::max(lp, -9999.0);
}

/// UTF-8 code points: what Python's len() counts in vLLM's text offsets.
size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

/// A position's entries in vLLM's dict order: the chosen token first, then by rank.
std::vector<std::pair<int32_t, const Logprob*>> ordered(const PositionLogprobMap& m,
                                                        int32_t chosen) {
  std::vector<std::pair<int32_t, const Logprob*>> out;
  if (auto it = m.find(chosen); it != m.end()) out.emplace_back(chosen, &it->second);
  std::vector<std::pair<int32_t, const Logprob*>> rest;
  for (const auto& [id, lp] : m)
    if (id != chosen) rest.emplace_back(id, &lp);
  std::stable_sort(rest.begin(), rest.end(),
                   [](const auto& a, const auto& b) { return a.second->rank < b.second->rank; });
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

std::string decode_one(const ResponseContext& ctx, int32_t id) {
  if (!ctx.tokenizer) return "";
  try {
    return ctx.tokenizer->decode(std::vector<int32_t>{id}, false);
  } catch (const std::exception&) {
    return "";
  }
}

/// vLLM's _get_decoded_token.
std::string token_text(const ResponseContext& ctx, int32_t id, const Logprob* lp) {
  if (ctx.tokens_as_ids) return "token_id:" + std::to_string(id);
  if (lp) return lp->decoded_token;
  return decode_one(ctx, id);
}

ojson bytes_of(const std::string& s) {
  ojson b = ojson::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

/// CompletionLogProbs for `ids` with one (possibly null) map per position.
ojson completion_logprobs(const std::vector<int32_t>& ids,
                          const std::vector<const PositionLogprobMap*>& positions, int64_t top_n,
                          size_t initial_offset, const ResponseContext& ctx) {
  ojson text_offset = ojson::array(), token_logprobs = ojson::array(), tokens = ojson::array(),
        top = ojson::array();
  size_t offset = initial_offset, last_len = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const PositionLogprobMap* m = i < positions.size() ? positions[i] : nullptr;
    const Logprob* chosen = nullptr;
    if (m)
      if (auto it = m->find(ids[i]); it != m->end()) chosen = &it->second;
    std::string token;
    if (!m || !chosen) {
      token = ctx.tokens_as_ids ? "token_id:" + std::to_string(ids[i]) : decode_one(ctx, ids[i]);
      token_logprobs.push_back(null());
      top.push_back(null());
    } else {
      token = token_text(ctx, ids[i], chosen);
      token_logprobs.push_back(clamp_logprob(chosen->logprob));
      ojson t = ojson::object();
      int64_t k = 0;
      for (const auto& [id, lp] : ordered(*m, ids[i])) {
        if (top_n >= k) t[token_text(ctx, id, lp)] = clamp_logprob(lp->logprob);
        ++k;
      }
      top.push_back(std::move(t));
    }
    tokens.push_back(token);
    offset = i == 0 ? initial_offset : offset + last_len;
    text_offset.push_back(offset);
    last_len = code_points(token);
  }
  ojson j;
  j["text_offset"] = std::move(text_offset);
  j["token_logprobs"] = std::move(token_logprobs);
  j["tokens"] = std::move(tokens);
  j["top_logprobs"] = std::move(top);
  return j;
}

/// ChatCompletionLogProbs for the tokens [from, to) of a choice.
ojson chat_logprobs(const CompletionOutput& c, size_t from, size_t to, int64_t top_n,
                    const ResponseContext& ctx) {
  ojson content = ojson::array();
  for (size_t i = from; i < to && i < c.token_ids.size(); ++i) {
    const int32_t id = c.token_ids[i];
    const PositionLogprobMap* m =
        c.logprobs && i < c.logprobs->size() ? &(*c.logprobs)[i] : nullptr;
    const Logprob* chosen = nullptr;
    if (m)
      if (auto it = m->find(id); it != m->end()) chosen = &it->second;
    ojson e;
    if (!chosen) {
      const std::string token =
          ctx.tokens_as_ids ? "token_id:" + std::to_string(id) : decode_one(ctx, id);
      e["token"] = token;
      e["logprob"] = -9999.0;
      e["bytes"] = bytes_of(token);
      e["top_logprobs"] = ojson::array();
    } else {
      e["token"] = token_text(ctx, id, chosen);
      e["logprob"] = clamp_logprob(chosen->logprob);
      e["bytes"] = bytes_of(chosen->decoded_token);
      ojson top = ojson::array();
      int64_t k = 0;
      for (const auto& [tid, lp] : ordered(*m, id)) {
        if (k++ >= top_n) break;
        ojson t;
        const std::string token = token_text(ctx, tid, lp);
        t["token"] = token;
        t["logprob"] = clamp_logprob(lp->logprob);
        t["bytes"] = bytes_of(token);
        top.push_back(std::move(t));
      }
      e["top_logprobs"] = std::move(top);
    }
    content.push_back(std::move(e));
  }
  ojson j;
  j["content"] = std::move(content);
  return j;
}

/// vLLM's UsageInfo. `cached`: the prompt tokens the prefix cache served; with
/// --enable-prompt-tokens-details and cached > 0, prompt_tokens_details carries them (vLLM's
/// rule), else it is null where `with_details` and absent otherwise.
ojson usage(size_t prompt_tokens, size_t completion_tokens, bool with_details,
            const ResponseContext& ctx, int32_t cached) {
  ojson u;
  u["prompt_tokens"] = prompt_tokens;
  u["total_tokens"] = prompt_tokens + completion_tokens;
  u["completion_tokens"] = completion_tokens;
  if (ctx.prompt_tokens_details && cached > 0)
    u["prompt_tokens_details"] = ojson{{"cached_tokens", cached}};
  else if (with_details)
    u["prompt_tokens_details"] = null();
  return u;
}

ojson stop_reason(const CompletionOutput& c) {
  if (!c.stop_reason_text.empty()) return c.stop_reason_text;
  if (c.stop_reason_token >= 0) return c.stop_reason_token;
  return null();
}

ojson finish_reason(const CompletionOutput& c) {
  return c.finish_reason.empty() ? null() : ojson(c.finish_reason);
}

/// vLLM's clamp_prompt_logprobs: the first position null, -inf as -9999.
ojson prompt_logprobs_json(const RequestOutput& out) {
  if (!out.prompt_logprobs) return null();
  ojson pl = ojson::array();
  for (size_t i = 0; i < out.prompt_logprobs->size(); ++i) {
    if (i == 0) {
      pl.push_back(null());
      continue;
    }
    ojson pos = to_json((*out.prompt_logprobs)[i]);
    for (auto& [k, v] : pos.items()) {
      (void)k;
      v["logprob"] = clamp_logprob(v["logprob"].get<double>());
    }
    pl.push_back(std::move(pos));
  }
  return pl;
}

/// Positions of a prompt's logprobs (first null) followed by the output's.
std::vector<const PositionLogprobMap*> positions_of(const RequestOutput& out,
                                                    const CompletionOutput* c, bool prompt,
                                                    size_t from = 0) {
  std::vector<const PositionLogprobMap*> v;
  if (prompt) {
    for (size_t i = 0; i < out.prompt_token_ids.size(); ++i)
      v.push_back(out.prompt_logprobs && i > 0 && i < out.prompt_logprobs->size()
                      ? &(*out.prompt_logprobs)[i]
                      : nullptr);
  }
  if (c && c->logprobs)
    for (size_t i = from; i < c->logprobs->size(); ++i) v.push_back(&(*c->logprobs)[i]);
  return v;
}

bool is_finished(const CompletionOutput& c) {
  return !c.finish_reason.empty();
}

// A running choice's chunk is written directly, not built as an ordered_json and dumped: the
// server writes one per token per stream, and the JSON tree cost ~4 us of a CAF worker each
// (2026-12-06, 300 x 128/128 streams on 2 cores). The bytes are dump()'s, which the tests check.

/// `s` as dump() writes a JSON string: printable ASCII here; anything with a control character
/// or a byte >= 0x80 (UTF-8, or invalid bytes that dump() replaces) through nlohmann.
void append_json_string(std::string& out, const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c >= 0x80) {
      out += dump(ojson(s));
      return;
    }
  out += '"';
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  out += '"';
}

void append_ids(std::string& out, std::span<const int32_t> ids) {
  out += '[';
  for (size_t k = 0; k < ids.size(); ++k) {
    if (k > 0) out += ',';
    out += std::to_string(ids[k]);
  }
  out += ']';
}

/// A chunk's fields before the choice's index: `{"id":...,"choices":[{"index":`.
std::string chunk_head(const ResponseContext& ctx, const char* object) {
  std::string h = "{\"id\":";
  h += dump(ojson(ctx.id));
  h += ",\"object\":\"";
  h += object;
  h += "\",\"created\":";
  h += std::to_string(ctx.created);
  h += ",\"model\":";
  h += dump(ojson(ctx.model));
  h += ",\"choices\":[{\"index\":";
  return h;
}

}  // namespace

std::string sse_event(const std::string& json_text) {
  return "data: " + json_text + "\n\n";
}
std::string sse_done() {
  return "data: [DONE]\n\n";
}

// ---- completions ----

ojson completion_response(const CompletionRequest& req, const ResponseContext& ctx,
                          const std::vector<RequestOutput>& finals,
                          const std::vector<std::string>& prompt_texts) {
  ojson choices = ojson::array();
  size_t prompt_tokens = 0, completion_tokens = 0;
  const bool echo_only = req.echo && req.max_tokens && *req.max_tokens == 0;
  for (size_t p = 0; p < finals.size(); ++p) {
    const RequestOutput& out = finals[p];
    const std::string& prompt_text = p < prompt_texts.size() ? prompt_texts[p] : out.prompt;
    for (const auto& c : out.outputs) {
      std::vector<int32_t> ids;
      std::vector<const PositionLogprobMap*> positions;
      std::string text;
      if (req.echo) {
        ids = out.prompt_token_ids;
        text = prompt_text;
        if (!echo_only) {
          ids.insert(ids.end(), c.token_ids.begin(), c.token_ids.end());
          text += c.text;
        }
        positions = positions_of(out, echo_only ? nullptr : &c, true);
      } else {
        ids = c.token_ids;
        text = c.text;
        positions = positions_of(out, &c, false);
      }
      ojson ch;
      ch["index"] = choices.size();
      ch["text"] = text;
      ch["logprobs"] =
          req.logprobs ? completion_logprobs(ids, positions, *req.logprobs, 0, ctx) : null();
      ch["finish_reason"] = finish_reason(c);
      ch["stop_reason"] = stop_reason(c);
      ch["prompt_logprobs"] = prompt_logprobs_json(out);
      ch["prompt_token_ids"] = req.return_token_ids ? ojson(out.prompt_token_ids) : null();
      ch["token_ids"] = req.return_token_ids ? ojson(c.token_ids) : null();
      choices.push_back(std::move(ch));
      completion_tokens += c.token_ids.size();
    }
    prompt_tokens += out.prompt_token_ids.size();
  }
  ojson j;
  j["id"] = ctx.id;
  j["object"] = "text_completion";
  j["created"] = ctx.created;
  j["model"] = ctx.model;
  j["choices"] = std::move(choices);
  j["service_tier"] = null();
  j["system_fingerprint"] = null();
  j["usage"] = usage(prompt_tokens, completion_tokens, true, ctx,
                     finals.empty() ? 0 : finals.back().num_cached_tokens);
  j["kv_transfer_params"] = null();
  return j;
}

CompletionStream::CompletionStream(const CompletionRequest& req, ResponseContext ctx,
                                   std::vector<std::string> prompt_texts)
    : logprobs_(req.logprobs),
      echo_(req.echo),
      echo_only_(req.echo && req.max_tokens && *req.max_tokens == 0),
      return_token_ids_(req.return_token_ids),
      ctx_(std::move(ctx)),
      prompt_texts_(std::move(prompt_texts)),
      prompt_tokens_(prompt_texts_.size(), 0),
      choices_(prompt_texts_.size() * size_t(std::max<int64_t>(1, req.params.n))),
      head_(chunk_head(ctx_, "text_completion")) {}

std::string CompletionStream::on_output(size_t prompt_index, const RequestOutput& out) {
  std::string events;
  if (prompt_index >= prompt_tokens_.size()) return events;
  prompt_tokens_[prompt_index] = out.prompt_token_ids.size();
  cached_ = out.num_cached_tokens;
  const size_t n = choices_.size() / prompt_tokens_.size();
  for (const auto& c : out.outputs) {
    const size_t i = prompt_index * n + size_t(c.index);
    if (i >= choices_.size()) continue;
    Choice& ch = choices_[i];
    if (ch.finished) continue;
    const size_t text_end = std::max(ch.text_sent, c.text.size());
    std::string delta_text;
    std::vector<int32_t> delta_ids;
    std::vector<const PositionLogprobMap*> positions;
    bool prompt_part = false;
    if (echo_ && !ch.echoed) {
      delta_text = prompt_texts_[prompt_index];
      delta_ids = out.prompt_token_ids;
      prompt_part = true;
      if (!echo_only_) {
        delta_text += c.text.substr(0, text_end);
        delta_ids.insert(delta_ids.end(), c.token_ids.begin(), c.token_ids.end());
      }
      positions = positions_of(out, echo_only_ ? nullptr : &c, true);
      ch.echoed = true;
    } else {
      if (!echo_only_) delta_text = c.text.substr(ch.text_sent, text_end - ch.text_sent);
      delta_ids.assign(c.token_ids.begin() + long(std::min(ch.tokens_sent, c.token_ids.size())),
                       c.token_ids.end());
      if (echo_only_) delta_ids.clear();
      positions = positions_of(out, &c, false, ch.tokens_sent);
    }
    const bool now_finished = is_finished(c);
    if (delta_text.empty() && delta_ids.empty() && !now_finished) continue;
    // Logprobs count text offsets from what was sent before this chunk.
    ojson lp = logprobs_
                   ? completion_logprobs(delta_ids, positions, *logprobs_, ch.chars_sent, ctx_)
                   : null();
    ch.chars_sent += code_points(delta_text);
    if (!echo_only_) ch.text_sent = text_end;
    ch.tokens_sent = c.token_ids.size();
    ch.finished = now_finished;
    if (!logprobs_ && !prompt_part && !now_finished && !ctx_.continuous_usage) {
      events += "data: ";
      events += head_;
      events += std::to_string(i);
      events += ",\"text\":";
      append_json_string(events, delta_text);
      events +=
          ",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null,"
          "\"prompt_token_ids\":null,\"token_ids\":";
      if (return_token_ids_)
        append_ids(events, delta_ids);
      else
        events += "null";
      events += "}],\"usage\":null}\n\n";
      continue;
    }
    ojson choice;
    choice["index"] = i;
    choice["text"] = delta_text;
    choice["logprobs"] = std::move(lp);
    choice["finish_reason"] = now_finished ? finish_reason(c) : null();
    choice["stop_reason"] = now_finished ? stop_reason(c) : null();
    choice["prompt_token_ids"] =
        return_token_ids_ && prompt_part ? ojson(out.prompt_token_ids) : null();
    choice["token_ids"] = return_token_ids_ ? ojson(delta_ids) : null();
    ojson chunk;
    chunk["id"] = ctx_.id;
    chunk["object"] = "text_completion";
    chunk["created"] = ctx_.created;
    chunk["model"] = ctx_.model;
    chunk["choices"] = ojson::array({std::move(choice)});
    chunk["usage"] = ctx_.continuous_usage
                         ? usage(prompt_tokens_[prompt_index], ch.tokens_sent, true, ctx_, cached_)
                         : null();
    events += sse_event(dump(chunk));
  }
  return events;
}

std::string CompletionStream::finish() {
  std::string events;
  if (ctx_.include_usage) {
    size_t p = 0, c = 0;
    for (size_t t : prompt_tokens_) p += t;
    for (const auto& ch : choices_) c += ch.tokens_sent;
    ojson chunk;
    chunk["id"] = ctx_.id;
    chunk["object"] = "text_completion";
    chunk["created"] = ctx_.created;
    chunk["model"] = ctx_.model;
    chunk["choices"] = ojson::array();
    chunk["usage"] = usage(p, c, false, ctx_, cached_);
    events += sse_event(dump(chunk));
  }
  return events + sse_done();
}

// ---- chat ----

ojson chat_response(const ChatRequest& req, const ResponseContext& ctx,
                    const RequestOutput& final_output, const std::string& echo_text) {
  ojson choices = ojson::array();
  size_t completion_tokens = 0;
  const std::string role = req.add_generation_prompt
                               ? ctx.response_role
                               : req.messages.back().value("role", std::string("assistant"));
  for (const auto& c : final_output.outputs) {
    ojson message;
    message["role"] = role;
    message["content"] = echo_text + c.text;
    message["refusal"] = null();
    message["annotations"] = null();
    message["audio"] = null();
    message["function_call"] = null();
    message["tool_calls"] = ojson::array();
    message["reasoning_content"] = null();
    ojson ch;
    ch["index"] = c.index;
    ch["message"] = std::move(message);
    ch["logprobs"] =
        req.logprobs ? chat_logprobs(c, 0, c.token_ids.size(), req.top_logprobs, ctx) : null();
    ch["finish_reason"] = c.finish_reason.empty() ? ojson("stop") : ojson(c.finish_reason);
    ch["stop_reason"] = stop_reason(c);
    if (req.return_token_ids) ch["token_ids"] = c.token_ids;
    choices.push_back(std::move(ch));
    completion_tokens += c.token_ids.size();
  }
  ojson j;
  j["id"] = ctx.id;
  j["object"] = "chat.completion";
  j["created"] = ctx.created;
  j["model"] = ctx.model;
  j["choices"] = std::move(choices);
  j["service_tier"] = null();
  j["system_fingerprint"] = null();
  j["usage"] = usage(final_output.prompt_token_ids.size(), completion_tokens, true, ctx,
                     final_output.num_cached_tokens);
  j["prompt_logprobs"] = prompt_logprobs_json(final_output);
  if (req.return_token_ids) j["prompt_token_ids"] = final_output.prompt_token_ids;
  j["kv_transfer_params"] = null();
  return j;
}

ChatStream::ChatStream(const ChatRequest& req, ResponseContext ctx, std::string echo_text)
    : logprobs_(req.logprobs),
      return_token_ids_(req.return_token_ids),
      top_logprobs_(req.top_logprobs),
      ctx_(std::move(ctx)),
      echo_text_(std::move(echo_text)),
      choices_(size_t(std::max<int64_t>(1, req.params.n))),
      head_(chunk_head(ctx_, "chat.completion.chunk")) {
  if (!req.add_generation_prompt)
    ctx_.response_role = req.messages.back().value("role", std::string("assistant"));
}

std::string ChatStream::on_output(const RequestOutput& out) {
  std::string events;
  prompt_tokens_ = out.prompt_token_ids.size();
  cached_ = out.num_cached_tokens;
  const auto chunk_of = [&](ojson choice, std::optional<size_t> completion_tokens) {
    ojson chunk;
    chunk["id"] = ctx_.id;
    chunk["object"] = "chat.completion.chunk";
    chunk["created"] = ctx_.created;
    chunk["model"] = ctx_.model;
    chunk["choices"] = ojson::array({std::move(choice)});
    if (ctx_.continuous_usage && completion_tokens)
      chunk["usage"] = usage(prompt_tokens_, *completion_tokens, false, ctx_, cached_);
    return sse_event(dump(chunk));
  };
  if (first_) {
    first_ = false;
    for (size_t i = 0; i < choices_.size(); ++i) {
      ojson delta;
      delta["role"] = ctx_.response_role;
      delta["content"] = "";
      ojson choice;
      choice["index"] = i;
      choice["delta"] = std::move(delta);
      choice["logprobs"] = null();
      choice["finish_reason"] = null();
      events += chunk_of(std::move(choice), size_t(0));
    }
    if (!echo_text_.empty())
      for (size_t i = 0; i < choices_.size(); ++i) {
        ojson choice;
        choice["index"] = i;
        choice["delta"] = ojson{{"content", echo_text_}};
        choice["logprobs"] = null();
        choice["finish_reason"] = null();
        events += chunk_of(std::move(choice), size_t(0));
      }
  }
  for (const auto& c : out.outputs) {
    const auto i = size_t(c.index);
    if (i >= choices_.size()) continue;
    Choice& ch = choices_[i];
    if (ch.finished) continue;
    const size_t text_end = std::max(ch.text_sent, c.text.size());
    const std::string delta_text = c.text.substr(ch.text_sent, text_end - ch.text_sent);
    const size_t from = std::min(ch.tokens_sent, c.token_ids.size());
    const bool now_finished = is_finished(c);
    if (delta_text.empty() && from == c.token_ids.size() && !now_finished) continue;
    ch.text_sent = text_end;
    ch.tokens_sent = c.token_ids.size();
    ch.finished = now_finished;
    if (!logprobs_ && !now_finished && !ctx_.continuous_usage) {
      events += "data: ";
      events += head_;
      events += std::to_string(i);
      events += ",\"delta\":{\"content\":";
      append_json_string(events, delta_text);
      events += "},\"logprobs\":null,\"finish_reason\":null";
      if (return_token_ids_) {
        events += ",\"token_ids\":";
        append_ids(events, std::span<const int32_t>(c.token_ids).subspan(from));
      }
      events += "}]}\n\n";
      continue;
    }
    ojson choice;
    choice["index"] = i;
    choice["delta"] = ojson{{"content", delta_text}};
    choice["logprobs"] =
        logprobs_ ? chat_logprobs(c, from, c.token_ids.size(), top_logprobs_, ctx_) : null();
    choice["finish_reason"] = now_finished ? finish_reason(c) : null();
    if (now_finished) choice["stop_reason"] = stop_reason(c);
    if (return_token_ids_)
      choice["token_ids"] =
          std::vector<int32_t>(c.token_ids.begin() + long(from), c.token_ids.end());
    events += chunk_of(std::move(choice), ch.tokens_sent);
  }
  return events;
}

std::string ChatStream::finish() {
  std::string events;
  if (ctx_.include_usage) {
    size_t c = 0;
    for (const auto& ch : choices_) c += ch.tokens_sent;
    ojson chunk;
    chunk["id"] = ctx_.id;
    chunk["object"] = "chat.completion.chunk";
    chunk["created"] = ctx_.created;
    chunk["model"] = ctx_.model;
    chunk["choices"] = ojson::array();
    chunk["usage"] = usage(prompt_tokens_, c, false, ctx_, cached_);
    events += sse_event(dump(chunk));
  }
  return events + sse_done();
}

ojson plain_generate_response(const RequestOutput& out) {
  ojson text = ojson::array();
  for (const auto& c : out.outputs) text.push_back(out.prompt + c.text);
  ojson j;
  j["text"] = std::move(text);
  return j;
}

}  // namespace troupe::openai
