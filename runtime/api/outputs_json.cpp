#include "runtime/api/outputs_json.hpp"

namespace troupe {

nlohmann::ordered_json to_json(const PositionLogprobMap& position) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& [token, lp] : position)
    j[std::to_string(token)] = {
        {"logprob", lp.logprob}, {"rank", lp.rank}, {"decoded_token", lp.decoded_token}};
  return j;
}

nlohmann::ordered_json to_json(const RequestOutput& out) {
  nlohmann::ordered_json j;
  j["request_id"] = out.request_id;
  j["prompt"] = out.prompt;
  j["prompt_token_ids"] = out.prompt_token_ids;
  if (out.prompt_logprobs) {
    nlohmann::ordered_json pl = nlohmann::ordered_json::array();
    for (size_t i = 0; i < out.prompt_logprobs->size(); ++i)
      pl.push_back(i == 0 ? nlohmann::ordered_json(nullptr) : to_json((*out.prompt_logprobs)[i]));
    j["prompt_logprobs"] = std::move(pl);
  }
  nlohmann::ordered_json outputs = nlohmann::ordered_json::array();
  for (const auto& c : out.outputs) {
    nlohmann::ordered_json o;
    o["index"] = c.index;
    o["text"] = c.text;
    o["token_ids"] = c.token_ids;
    o["cumulative_logprob"] = c.cumulative_logprob ? nlohmann::ordered_json(*c.cumulative_logprob)
                                                   : nlohmann::ordered_json(nullptr);
    if (c.logprobs) {
      nlohmann::ordered_json lps = nlohmann::ordered_json::array();
      for (const auto& p : *c.logprobs) lps.push_back(to_json(p));
      o["logprobs"] = std::move(lps);
    }
    o["finish_reason"] = c.finish_reason.empty() ? nlohmann::ordered_json(nullptr)
                                                 : nlohmann::ordered_json(c.finish_reason);
    if (!c.stop_reason_text.empty()) o["stop_reason"] = c.stop_reason_text;
    else if (c.stop_reason_token >= 0) o["stop_reason"] = c.stop_reason_token;
    else o["stop_reason"] = nullptr;
    outputs.push_back(std::move(o));
  }
  j["outputs"] = std::move(outputs);
  j["num_cached_tokens"] = out.num_cached_tokens;
  const RequestMetrics& m = out.metrics;
  const auto opt = [](const std::optional<double>& v) {
    return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
  };
  j["metrics"] = {{"arrival_time", m.arrival_time},
                  {"last_token_time", opt(m.last_token_time)},
                  {"first_scheduled_time", opt(m.first_scheduled_time)},
                  {"first_token_time", opt(m.first_token_time)},
                  {"time_in_queue", opt(m.time_in_queue)},
                  {"finished_time", opt(m.finished_time)}};
  if (!out.error.empty()) j["error"] = out.error;
  return j;
}

}  // namespace troupe
