// The error every OpenAI-compatible endpoint answers with, in vLLM's shape:
//   {"error": {"message": "...", "type": "BadRequestError", "param": "temperature", "code": 400}}
// `param` names the request field at fault (null when none); `code` repeats the HTTP status.
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace troupe::openai {

struct ApiError {
  int status = 400;
  std::string type = "BadRequestError";
  std::string message;
  std::string param;  // the request field at fault; "" = null
};

/// Thrown by the request parsers and checks; the server turns it into its status and body.
class ApiException : public std::runtime_error {
 public:
  explicit ApiException(ApiError e) : std::runtime_error(e.message), error_(std::move(e)) {}
  [[nodiscard]] const ApiError& error() const { return error_; }

 private:
  ApiError error_;
};

/// A 400 naming `param`.
[[noreturn]] void bad_request(std::string param, std::string message);

/// vLLM's status names: 400 BadRequestError, 401 AuthenticationError, 404 NotFoundError,
/// 405 MethodNotAllowed, 413 RequestEntityTooLarge, 500 InternalServerError,
/// 503 ServiceUnavailableError.
[[nodiscard]] ApiError make_error(int status, std::string message, std::string param = {});

[[nodiscard]] nlohmann::ordered_json to_json(const ApiError& e);
/// to_json(e).dump(): the body of an error response and of a streamed error event.
[[nodiscard]] std::string error_body(const ApiError& e);

}  // namespace troupe::openai
