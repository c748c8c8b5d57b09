// main() for every test binary. Binaries that run kernels first make sure a device is
// there; on a machine without a GPU the CUDA tests exit with 77, which CTest reports as
// skipped (SKIP_RETURN_CODE), never as passed. Catch2 itself is compiled once, in
// tests/catch_session.cpp.
namespace fa::test {
int run_catch(int argc, char** argv);  // tests/catch_session.cpp
}  // namespace fa::test

#ifdef FA_TEST_NEEDS_DEVICE
#include <iostream>

#include "common/device.h"
#include "common/errors.h"
#endif

int main(int argc, char** argv) {
#ifdef FA_TEST_NEEDS_DEVICE
  try {
    const fa::DeviceInfo device = fa::require_device();
    std::cout << "device: " << device.name << " (" << device.backend << ")\n";
#ifdef FA_TEST_NEEDS_HOPPER
    if (device.cc_major != 9 || device.cc_minor != 0) {
      std::cout << "SKIPPED: these tests need a Hopper GPU (compute capability 9.0)\n";
      return fa::kExitNoGpu;
    }
#endif
  } catch (const fa::NoGpuError& e) {
    std::cout << "SKIPPED: " << e.what() << "\n";
    return fa::kExitNoGpu;
  }
#endif
  return fa::test::run_catch(argc, argv);
}
