#include "cuda/lt_api.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <exception>
#include <optional>
#include <type_traits>

#include "runtime/error.hpp"

namespace troupe::cuda {

std::string lt_library_name() {
  return fmt::format("libcublasLt.so.{}", CUBLAS_VER_MAJOR);
}

LtApi load_lt_api(const std::string& library) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    fail(
        "the CUDA backend needs cuBLASLt ({}), which could not be loaded: {} (install the CUDA "
        "{} toolkit's cuBLAS, or put the folder that holds it on LD_LIBRARY_PATH)",
        library, why != nullptr ? why : "unknown reason", CUBLAS_VER_MAJOR);
  }
  LtApi api;
  const auto resolve = [&](auto& fn, const char* name) {
    dlerror();
    void* sym = dlsym(handle, name);
    if (sym == nullptr) {
      const char* why = dlerror();
      dlclose(handle);
      fail("{} has no {}: {}", library, name, why != nullptr ? why : "null symbol");
    }
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(sym);
  };
#define TROUPE_LT_RESOLVE(member, name) resolve(api.member, #name);
  TROUPE_LT_ENTRY_POINTS(TROUPE_LT_RESOLVE)
#undef TROUPE_LT_RESOLVE
  return api;
}

const LtApi& lt_api() {
  struct Loaded {
    std::optional<LtApi> api;
    std::string error;
  };
  static const Loaded loaded = [] {
    Loaded l;
    try {
      l.api = load_lt_api(lt_library_name());
    } catch (const std::exception& e) {
      l.error = e.what();
    }
    return l;
  }();
  if (!loaded.api) fail("{}", loaded.error);
  return *loaded.api;
}

}  // namespace troupe::cuda
