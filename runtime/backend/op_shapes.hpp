// Shape rules that every backend's argument checks share, written once over the backend's own
// OpCheck (cpu/op_checks.hpp, cuda/cuda_check.hpp: fail and dim with the same signatures).
#pragma once

#include <fmt/format.h>

#include <cstdint>

#include "runtime/backend/tensor.hpp"

namespace troupe {

/// act_mul's layout: gate_up [T, 2 I] is [gate | up] per row and out is [T, I]. Returns I.
template <class Check>
int64_t check_gate_up_halves(const Check& check, const Tensor& gate_up, const Tensor& out) {
  if (gate_up.dim(1) % 2 != 0)
    check.fail("gate_up {}: row of {} is not [gate | up] of two equal halves", describe(gate_up),
               gate_up.dim(1));
  const int64_t inter = gate_up.dim(1) / 2;
  check.dim("out", out, 0, gate_up.dim(0), fmt::format("T of gate_up {}", describe(gate_up)));
  check.dim("out", out, 1, inter, fmt::format("half the row of gate_up {}", describe(gate_up)));
  return inter;
}

}  // namespace troupe
