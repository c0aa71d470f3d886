#include "cpu/op_checks.hpp"

namespace troupe::cpu {

void OpCheck::tensor(std::string_view name, const Tensor& t, DType dtype, int ndim) const {
  if (t.device.kind != DeviceKind::cpu)
    fail("{} {} must be on cpu (this is the CPU backend)", name, describe(t));
  if (t.dtype != dtype) {
    if (is_float(dtype) && is_float(t.dtype))
      fail("{} {} must be {} (the CPU backend computes in float32)", name, describe(t),
           dtype_name(dtype));
    fail("{} {} must be {}", name, describe(t), dtype_name(dtype));
  }
  if (t.ndim != ndim)
    fail("{} {} must have {} dimension(s), has {}", name, describe(t), ndim, t.ndim);
  if (t.data == nullptr && t.numel() > 0)
    fail("{} {} has no memory (null data)", name, describe(t));
}

void OpCheck::dim(std::string_view name, const Tensor& t, int i, int64_t expected,
                  std::string_view why) const {
  if (t.dim(i) != expected)
    fail("{} {}: dim {} is {}, expected {} ({})", name, describe(t), i, t.dim(i), expected, why);
}

void OpCheck::same_shape(std::string_view name, const Tensor& t, std::string_view ref_name,
                         const Tensor& ref) const {
  bool same = t.dtype == ref.dtype && t.ndim == ref.ndim;
  for (int i = 0; same && i < t.ndim; ++i) same = t.shape[size_t(i)] == ref.shape[size_t(i)];
  if (!same)
    fail("{} {} must have the shape and dtype of {} {}", name, describe(t), ref_name,
         describe(ref));
}

void OpCheck::positive(std::string_view name, int64_t value) const {
  if (value <= 0) fail("{} = {} must be > 0", name, value);
}

}  // namespace troupe::cpu
