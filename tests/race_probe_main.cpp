// race_probe [--planted] shuffle|ldmatrix: runs one kernel of race_probe.cu on the GPU
// and checks its results. CTest runs it under compute-sanitizer's racecheck: without
// --planted racecheck must find nothing, with --planted it must find the race (whose
// results usually come out right, which is why a detector is needed).
#include <cstring>
#include <iostream>
#include <string>

#include "common/demo.h"
#include "common/device.h"
#include "tests/race_probe.h"

int main(int argc, char** argv) {
  return fa::run_guarded(argv[0], [&] {
    bool planted = false;
    std::string kernel;
    for (int i = 1; i < argc; ++i) {
      if (std::strcmp(argv[i], "--planted") == 0) planted = true;
      else kernel = argv[i];
    }
    if (kernel != "shuffle" && kernel != "ldmatrix") {
      std::cerr << "usage: " << argv[0] << " [--planted] shuffle|ldmatrix\n";
      return 2;
    }
    const fa::DeviceInfo device = fa::require_device();
    int wrong = 0;
    if (kernel == "shuffle") {
      const std::vector<float> out = fa::race_probe::shuffle_then_read(planted);
      for (int lane = 0; lane < 32; ++lane) wrong += out[lane] != static_cast<float>(2 * (31 - lane) + (lane ^ 16));
    } else {
      const std::vector<std::uint32_t> out = fa::race_probe::store_then_ldmatrix(planted);
      for (int lane = 0; lane < 32; ++lane) {
        const unsigned lo = 8u * (lane / 4) + 2u * (lane % 4);
        wrong += out[lane] != (lo | (lo + 1) << 16);
      }
    }
    std::cout << kernel << (planted ? " (race planted)" : "") << " on " << device.name << ": " << wrong
              << " of 32 lanes wrong\n";
    return planted || wrong == 0 ? 0 : 1;
  });
}
