// cuBLASLt is opened on first use (cuda/lt_api.hpp), not linked. These cases need the library
// but no GPU: dlopen and dlsym run on any machine with the CUDA toolkit, as CI has.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include "cuda/lt_api.hpp"
#include "runtime/error.hpp"

using Catch::Matchers::Contains;
using namespace troupe::cuda;

namespace {

bool mapped(const std::string& needle) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(needle) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("cuda lt_api opens the toolkit's cuBLASLt on first use and resolves every entry point",
          "[cuda][lt_api]") {
  CHECK(lt_library_name() == "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR));
  // Whether it was mapped before depends on the cases run earlier in this process (a CUDA
  // backend opens it); that a CPU run never opens it is `system: cpu_run_opens_no_cublas`.
  const LtApi& api = lt_api();
  CHECK(mapped("libcublasLt"));
  CHECK(&lt_api() == &api);  // loaded once
#define TROUPE_LT_CHECK_RESOLVED(member, name) CHECK(api.member != nullptr);
  TROUPE_LT_ENTRY_POINTS(TROUPE_LT_CHECK_RESOLVED)
#undef TROUPE_LT_CHECK_RESOLVED
  // A call into the library that needs no GPU: the name of a status, as check_cublas shows it.
  CHECK(std::string(api.get_status_name(CUBLAS_STATUS_NOT_SUPPORTED)) ==
        "CUBLAS_STATUS_NOT_SUPPORTED");
}

TEST_CASE("cuda lt_api names the library and the loader's reason when cuBLASLt cannot be opened",
          "[cuda][lt_api]") {
  CHECK_THROWS_AS(load_lt_api("libtroupe_no_such_cublasLt.so.13"), troupe::Error);
  CHECK_THROWS_WITH(load_lt_api("libtroupe_no_such_cublasLt.so.13"),
                    Contains("libtroupe_no_such_cublasLt.so.13") &&
                        Contains("cannot open shared object file") && Contains("LD_LIBRARY_PATH"));
  // A library that opens but is not cuBLASLt: the first missing entry point is named.
  CHECK_THROWS_WITH(load_lt_api("libm.so.6"), Contains("libm.so.6 has no cublasLtCreate"));
}
