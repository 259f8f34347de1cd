// atenx: the few libtorch calls that tch does not wrap.
//
// Compiles against torch 2.9 to 2.15: what differs between versions is chosen by
// TORCH_VERSION_MAJOR / _MINOR (torch/headeronly/version.h, torch/version.h before 2.10).
//
// Only CPU-side ATen/c10 headers are included, so this compiles against CPU-only, CUDA and
// ROCm libtorch alike; GPU work goes through ATen's dispatcher and c10's device-generic
// interfaces, which ROCm builds register under the `cuda` device type.
//
// Conventions: tensors cross the boundary as `at::Tensor*` (what tch's C_tensor is);
// functions return nullptr on success or a malloc'd error message the caller frees.
#include <ATen/ATen.h>
#include <ATen/BlasBackend.h>
#include <ATen/Context.h>
#include <ATen/Version.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/autograd/profiler_kineto.h>
// torch >= 2.10 moved TORCH_VERSION to a header-only folder (pytorch#164381); 2.9 has it
// in <torch/version.h>
#if __has_include(<torch/headeronly/version.h>)
#include <torch/headeronly/version.h>
#else
#include <torch/version.h>
#endif

#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <utility>

namespace {
char* dup(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p) std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}
template <typename F>
char* guard(F&& f) {
  try {
    f();
    return nullptr;
  } catch (const c10::Error& e) {
    return dup(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return dup(e.what());
  } catch (...) {
    return dup("unknown C++ exception");
  }
}
std::optional<double> opt_scale(double s) {
  return s > 0 ? std::optional<double>(s) : std::nullopt;
}
}  // namespace

extern "C" {

void atx_free(char* p) { std::free(p); }

// Flash attention forward (CUDA / ROCm): returns the output tensor only.
char* atx_sdpa_flash(at::Tensor** out, const at::Tensor* q, const at::Tensor* k,
                     const at::Tensor* v, int is_causal, double scale) {
  return guard([&] {
    auto r = at::_scaled_dot_product_flash_attention(*q, *k, *v, 0.0, is_causal != 0, false,
                                                     opt_scale(scale));
    *out = new at::Tensor(std::get<0>(r));
  });
}

// cuDNN attention forward: returns the output tensor only.
char* atx_sdpa_cudnn(at::Tensor** out, const at::Tensor* q, const at::Tensor* k,
                     const at::Tensor* v, int is_causal, double scale) {
  return guard([&] {
    auto r = at::_scaled_dot_product_cudnn_attention(*q, *k, *v, std::nullopt, false, 0.0,
                                                     is_causal != 0, false, opt_scale(scale));
    *out = new at::Tensor(std::get<0>(r));
  });
}

// The name ATen uses for an SDPBackend value (as returned by _fused_sdp_choice).
const char* atx_sdp_backend_name(int64_t b) {
  switch (static_cast<at::SDPBackend>(b)) {
    case at::SDPBackend::math: return "math";
    case at::SDPBackend::flash_attention: return "flash";
    case at::SDPBackend::efficient_attention: return "efficient";
    case at::SDPBackend::cudnn_attention: return "cudnn";
    case at::SDPBackend::overrideable: return "overrideable";
    case at::SDPBackend::error: return "error";
  }
  return "unknown";
}

// Global SDP switches: bit 0 math, 1 flash, 2 efficient, 3 cudnn, 4 overrideable.
int atx_sdp_enabled_mask() {
  auto& c = at::globalContext();
  return (c.userEnabledMathSDP() ? 1 : 0) | (c.userEnabledFlashSDP() ? 2 : 0) |
         (c.userEnabledMemEfficientSDP() ? 4 : 0) | (c.userEnabledCuDNNSDP() ? 8 : 0) |
         (c.userEnabledOverrideableSDP() ? 16 : 0);
}

// Version and build facts. Strings are malloc'd; free with atx_free.
char* atx_torch_version() { return dup(TORCH_VERSION); }
char* atx_show_config() {
  std::string s;
  try { s = at::show_config(); } catch (...) {}
  return dup(s);
}
int atx_has_rocm() {
  try { return at::detail::getCUDAHooks().hasROCM() ? 1 : 0; } catch (...) { return 0; }
}
// CUDA runtime version (e.g. 13000) or, on ROCm builds, the HIP runtime version; -1 unknown.
long atx_runtime_version() {
  try { return at::detail::getCUDAHooks().versionCUDART(); } catch (...) { return -1; }
}
long atx_cudnn_version() {
  try { return at::detail::getCUDAHooks().versionCuDNN(); } catch (...) { return -1; }
}
long atx_miopen_version() {
  try { return at::detail::getCUDAHooks().versionMIOpen(); } catch (...) { return -1; }
}
// CUDAHooksInterface::versionHipBLASLt exists from torch 2.11 on
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 11)
long atx_hipblaslt_version() {
  try { return at::detail::getCUDAHooks().versionHipBLASLt(); } catch (...) { return -1; }
}
#else
long atx_hipblaslt_version() { return -1; }
#endif
// The GEMM library ATen prefers (TORCH_BLAS_PREFER_HIPBLASLT / _CUBLASLT and
// torch.backends.cuda.preferred_blas_library): default, cublas (rocBLAS on ROCm), cublaslt
// (hipBLASLt on ROCm) or ck.
const char* atx_blas_backend() {
  try {
    switch (at::globalContext().blasPreferredBackend()) {
      case at::BlasBackend::Default: return "default";
      case at::BlasBackend::Cublas: return "cublas";
      case at::BlasBackend::Cublaslt: return "cublaslt";
      case at::BlasBackend::Ck: return "ck";
    }
  } catch (...) {}
  return "unknown";
}
// The flash-attention implementation ROCm builds prefer (TORCH_ROCM_FA_PREFER_CK):
// default, aotriton or ck.
const char* atx_rocm_fa_backend() {
  try {
    switch (at::globalContext().getROCmFAPreferredBackend()) {
      case at::ROCmFABackend::Default: return "default";
      case at::ROCmFABackend::AOTriton: return "aotriton";
      case at::ROCmFABackend::Ck: return "ck";
    }
  } catch (...) {}
  return "unknown";
}
int atx_gpu_count() {
  try { return at::detail::getCUDAHooks().getNumGPUs(); } catch (...) { return 0; }
}

// Device-side timing with c10's device-generic events on the stream PyTorch uses for
// `device` (type CUDA: also what ROCm builds register). BACKEND_DEFAULT events keep timing.
struct AtxTimer {
  c10::Event start{c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT};
  c10::Event stop{c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT};
  c10::Device device{c10::DeviceType::CUDA, 0};
};

char* atx_timer_new(AtxTimer** out, int device) {
  return guard([&] {
    auto* t = new AtxTimer();
    t->device = c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device));
    *out = t;
  });
}
void atx_timer_free(AtxTimer* t) { delete t; }

static c10::Stream current_stream(const AtxTimer* t) {
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(t->device);
}
char* atx_timer_start(AtxTimer* t) {
  return guard([&] { t->start.record(current_stream(t)); });
}
char* atx_timer_stop(AtxTimer* t) {
  return guard([&] { t->stop.record(current_stream(t)); });
}
// Waits for the stop event; elapsed milliseconds between the two records.
char* atx_timer_elapsed_ms(AtxTimer* t, double* ms) {
  return guard([&] {
    t->stop.synchronize();
    *ms = t->start.elapsedTime(t->stop);
  });
}

// Graph capture and replay through at::cuda::CUDAGraph, which lives in the GPU library
// (libtorch_cuda / libtorch_hip) that this shim neither includes nor links: its header pulls
// in the CUDA runtime's. The caller resolves the five members by their mangled names and
// passes them in; the object lives in opaque storage larger than any checked layout (the
// layouts and their fingerprints are in lib.rs). A non-virtual member function is called
// as a function taking `this` first, with the declared parameter types (Itanium and MSVC
// x64 alike).
struct AtxGraphFns {
  void* ctor;     // CUDAGraph(bool keep_graph)
  void* dtor;     // ~CUDAGraph()
  void* begin;    // capture_begin(MempoolId_t, cudaStreamCaptureMode / hipStreamCaptureMode)
  void* end;      // capture_end()
  void* replay;   // replay()
};
constexpr size_t kGraphStorage = 4096;
struct AtxGraph {
  alignas(64) unsigned char storage[kGraphStorage];
  AtxGraphFns f;
  bool constructed = false;
  c10::Device device{c10::DeviceType::CUDA, 0};
  // the stream that was current before capture, restored after it
  std::optional<c10::Stream> previous;
};
using GraphCtor = void (*)(void*, bool);
using GraphVoid = void (*)(void*);
using GraphBegin = void (*)(void*, std::pair<unsigned long long, unsigned long long>, int);

char* atx_graph_new(AtxGraph** out, const AtxGraphFns* f, int device) {
  return guard([&] {
    auto* g = new AtxGraph();
    g->f = *f;
    g->device = c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device));
    reinterpret_cast<GraphCtor>(g->f.ctor)(g->storage, false);
    g->constructed = true;
    *out = g;
  });
}
void atx_graph_free(AtxGraph* g) {
  if (!g) return;
  try {
    if (g->previous) {
      c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->exchangeStream(*g->previous);
    }
    if (g->constructed) reinterpret_cast<GraphVoid>(g->f.dtor)(g->storage);
  } catch (...) {}
  delete g;
}
// Make a stream from c10's pool current (capture needs a non-default stream); what runs
// now on the host goes there, warm-up included.
char* atx_graph_enter(AtxGraph* g) {
  return guard([&] {
    if (g->previous) return;
    auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    auto side = impl->getStreamFromGlobalPool(g->device, false);
    // the side stream waits for what the current stream queued (inputs being written)
    c10::Event ready{c10::DeviceType::CUDA};
    auto current = impl->getStream(g->device);
    ready.record(current);
    ready.block(side);
    g->previous = impl->exchangeStream(side);
  });
}
// Back to the stream that was current, after the side stream's work is done.
char* atx_graph_leave(AtxGraph* g) {
  return guard([&] {
    if (!g->previous) return;
    auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    auto side = impl->exchangeStream(*g->previous);
    c10::Event done{c10::DeviceType::CUDA};
    done.record(side);
    done.block(*g->previous);
    g->previous.reset();
  });
}
// Capture mode: 0 global (any unsafe call from any thread fails the capture), as
// torch.cuda.graph's default.
char* atx_graph_begin(AtxGraph* g) {
  return guard([&] {
    reinterpret_cast<GraphBegin>(g->f.begin)(g->storage, {0ULL, 0ULL}, 0);
  });
}
char* atx_graph_end(AtxGraph* g) {
  return guard([&] { reinterpret_cast<GraphVoid>(g->f.end)(g->storage); });
}
// Launch the instantiated graph on the current stream.
char* atx_graph_replay(AtxGraph* g) {
  return guard([&] { reinterpret_cast<GraphVoid>(g->f.replay)(g->storage); });
}
// Size of the opaque storage, for the layout test.
size_t atx_graph_storage() { return kGraphStorage; }

// Tracing with PyTorch's Kineto profiler (the C++ API torch.profiler drives): CPU ops, and
// with `gpu` the device activities CUPTI (roctracer / rocprofiler on ROCm) reports. Events
// come back as text, one per line, tab-separated:
// activity (libkineto's number), device type, duration ns, correlation id, linked
// correlation id, device resource (stream), start ns, name.
namespace {
namespace tpi = torch::profiler::impl;
namespace tap = torch::autograd::profiler;
std::set<tpi::ActivityType> trace_activities(int gpu) {
  std::set<tpi::ActivityType> a{tpi::ActivityType::CPU};
  if (gpu) a.insert(tpi::ActivityType::CUDA);
  return a;
}
}  // namespace

char* atx_trace_start(int gpu) {
  return guard([&] {
    tpi::ProfilerConfig config(tpi::ProfilerState::KINETO);
    auto acts = trace_activities(gpu);
    tap::prepareProfiler(config, acts);
    tap::enableProfiler(config, acts);
  });
}

char* atx_trace_stop(char** out) {
  return guard([&] {
    auto result = tap::disableProfiler();
    std::string s;
    if (result) {
      for (const auto& e : result->events()) {
        std::string name = e.name();
        for (auto& c : name) {
          if (c == '\t' || c == '\n' || c == '\r') c = ' ';
        }
        s += std::to_string(static_cast<int>(e.activityType()));
        s += '\t';
        s += std::to_string(static_cast<int>(e.deviceType()));
        s += '\t';
        s += std::to_string(e.durationNs());
        s += '\t';
        s += std::to_string(e.correlationId());
        s += '\t';
        s += std::to_string(e.linkedCorrelationId());
        s += '\t';
        s += std::to_string(e.deviceResourceId());
        s += '\t';
        s += std::to_string(e.startNs());
        s += '\t';
        s += name;
        s += '\n';
      }
    }
    *out = dup(s);
  });
}

}  // extern "C"
