// opbench's compatibility layer for building a tch whose generated bindings call ATen ops
// that a newer torch removed: torch 2.15 dropped the deprecated `cholesky` and `qr`
// (deprecated since 1.9 for `linalg_cholesky` and `linalg_qr`), and tch 0.26 (made for
// torch 2.13) still binds them. These forward to the replacements, with the same results
// for the arguments the bindings pass. scripts/run.py force-includes this header into C++
// builds (`-include`, `/FI` with MSVC) only when torch's headers lack ATen/ops/cholesky.h.
// opbench itself calls none of these ops.
#pragma once
#include <ATen/ATen.h>

namespace at {
inline Tensor cholesky(const Tensor& self, bool upper = false) {
  return at::linalg_cholesky(self, upper);
}
inline Tensor& cholesky_out(Tensor& out, const Tensor& self, bool upper = false) {
  return at::linalg_cholesky_out(out, self, upper);
}
inline std::tuple<Tensor, Tensor> qr(const Tensor& self, bool some = true) {
  return at::linalg_qr(self, some ? "reduced" : "complete");
}
inline std::tuple<Tensor&, Tensor&> qr_out(Tensor& Q, Tensor& R, const Tensor& self,
                                           bool some = true) {
  return at::linalg_qr_out(Q, R, self, some ? "reduced" : "complete");
}
}  // namespace at
