// CudaAvailable() and MakeCudaDevice() in libmixtrain.so: they load the CUDA backend plugin
// (see cuda_device.h for why it is one) and forward to it. Without a CUDA build only the "why
// not" answers exist.
#include "kernels/cuda/cuda_device.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "graph/check.h"

namespace mixtrain {
namespace {

#if MIXTRAIN_HAVE_CUDA
constexpr char kPlugin[] = "libmixtrain_cuda.so";

struct Plugin {
  const CudaBackendApi* api = nullptr;
  absl::Status why;  // when api is null
};

// dlopen's last error, or a fallback.
std::string DlError() {
  const char* e = dlerror();
  return e != nullptr ? e : "unknown error";
}

const Plugin& LoadedPlugin() {
  static const Plugin plugin = [] {
    Plugin p;
    // Next to this library (the build tree, an install's lib/), else the search path.
    std::string path = kPlugin;
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(&LoadedPlugin), &info) != 0 && info.dli_fname != nullptr) {
      std::string self = info.dli_fname;
      const size_t slash = self.rfind('/');
      if (slash != std::string::npos) path = self.substr(0, slash + 1) + kPlugin;
    }
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr && path != kPlugin) h = dlopen(kPlugin, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      p.why = absl::UnavailableError(absl::StrCat("the CUDA backend ", kPlugin, " could not be loaded: ", DlError()));
      return p;
    }
    using EntryFn = const CudaBackendApi* (*)();
    auto entry = reinterpret_cast<EntryFn>(dlsym(h, "MixtrainCudaBackend"));
    if (entry == nullptr) {
      p.why = absl::UnavailableError(absl::StrCat(path, " has no MixtrainCudaBackend: ", DlError()));
      return p;
    }
    p.api = entry();
    return p;
  }();
  return plugin;
}

// The plugin when a driver exists (checked once; the driver library stays loaded, cudart needs it).
const Plugin& PluginIfDriver() {
  static const Plugin* const result = [] {
    static Plugin none;
    if (dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) == nullptr) {
      none.why = absl::UnavailableError(
          absl::StrCat("no NVIDIA driver on this machine (", DlError(), ")"));
      return static_cast<const Plugin*>(&none);
    }
    return &LoadedPlugin();
  }();
  return *result;
}
#endif  // MIXTRAIN_HAVE_CUDA

}  // namespace

absl::Status LoadCudaBackend() {
#if MIXTRAIN_HAVE_CUDA
  return LoadedPlugin().api != nullptr ? absl::OkStatus() : LoadedPlugin().why;
#else
  return CudaAvailable();
#endif
}

absl::Status CudaAvailable() {
#if MIXTRAIN_HAVE_CUDA
  const Plugin& p = PluginIfDriver();
  return p.api != nullptr ? p.api->available() : p.why;
#else
  return absl::UnavailableError("this build of mixtrain has no CUDA backend (nvcc was not found when it was configured)");
#endif
}

absl::StatusOr<std::unique_ptr<Device>> MakeCudaDevice(int ordinal) {
#if MIXTRAIN_HAVE_CUDA
  const Plugin& p = PluginIfDriver();
  if (p.api == nullptr) return p.why;
  return p.api->make_device(ordinal);
#else
  return CudaAvailable();
#endif
}

const CudaStreamResources& CudaResources(const KernelContext& ctx) {
  MT_CHECK(ctx.resources() != nullptr) << "CUDA kernel of node '" << ctx.node().name() << "' ran off a CUDA device";
  return *static_cast<const CudaStreamResources*>(ctx.resources());
}

}  // namespace mixtrain
