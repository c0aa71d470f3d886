#include "runtime/openai/api_error.hpp"

namespace troupe::openai {

void bad_request(std::string param, std::string message) {
  throw ApiException(make_error(400, std::move(message), std::move(param)));
}

ApiError make_error(int status, std::string message, std::string param) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.param = std::move(param);
  switch (status) {
    case 400:
      e.type = "BadRequestError";
      break;
    case 401:
      e.type = "AuthenticationError";
      break;
    case 404:
      e.type = "NotFoundError";
      break;
    case 405:
      e.type = "MethodNotAllowed";
      break;
    case 413:
      e.type = "RequestEntityTooLarge";
      break;
    case 503:
      e.type = "ServiceUnavailableError";
      break;
    default:
      e.type = status >= 500 ? "InternalServerError" : "BadRequestError";
      break;
  }
  return e;
}

nlohmann::ordered_json to_json(const ApiError& e) {
  nlohmann::ordered_json inner;
  inner["message"] = e.message;
  inner["type"] = e.type;
  inner["param"] =
      e.param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(e.param);
  inner["code"] = e.status;
  nlohmann::ordered_json j;
  j["error"] = std::move(inner);
  return j;
}

std::string error_body(const ApiError& e) {
  // Messages may quote request bytes that are not UTF-8: replace rather than throw.
  return to_json(e).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace troupe::openai
