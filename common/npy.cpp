#include "common/npy.h"

#include <cstring>
#include <fstream>
#include <regex>

#include "common/errors.h"

namespace fa {

namespace {

constexpr char kMagic[] = "\x93NUMPY";

[[noreturn]] void bad(const std::string& path, const std::string& why) {
  throw InputError(path + ": " + why);
}

bool little_endian_host() {
  const uint16_t one = 1;
  unsigned char first;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

}  // namespace

NpyArray load_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) bad(path, "cannot open file");
  char magic[6];
  if (!in.read(magic, 6) || std::memcmp(magic, kMagic, 6) != 0) bad(path, "not a .npy file (bad magic)");
  unsigned char version[2];
  if (!in.read(reinterpret_cast<char*>(version), 2)) bad(path, "truncated header");
  uint32_t header_len = 0;
  if (version[0] == 1) {
    unsigned char b[2];
    if (!in.read(reinterpret_cast<char*>(b), 2)) bad(path, "truncated header");
    header_len = b[0] | (b[1] << 8);
  } else if (version[0] == 2 || version[0] == 3) {
    unsigned char b[4];
    if (!in.read(reinterpret_cast<char*>(b), 4)) bad(path, "truncated header");
    header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
  } else {
    bad(path, "unsupported .npy version " + std::to_string(version[0]));
  }
  if (header_len > (1u << 20)) bad(path, "header too long");
  std::string header(header_len, '\0');
  if (!in.read(header.data(), header_len)) bad(path, "truncated header");

  std::smatch mt;
  if (!std::regex_search(header, mt, std::regex(R"('descr'\s*:\s*'([^']*)')"))) bad(path, "header has no 'descr'");
  const std::string descr = mt[1];
  const bool native = little_endian_host();
  DType stored;
  if (descr == "<f4" || (descr == "=f4" && native)) {
    stored = DType::F32;
  } else if (descr == "<f2" || (descr == "=f2" && native)) {
    stored = DType::F16;
  } else {
    bad(path, "dtype '" + descr + "' is neither little-endian float32 ('<f4') nor float16 ('<f2'); "
              "save with .astype(np.float32)");
  }
  if (!std::regex_search(header, mt, std::regex(R"('fortran_order'\s*:\s*(True|False))"))) {
    bad(path, "header has no 'fortran_order'");
  }
  if (mt[1] == "True") bad(path, "Fortran-order arrays are not supported; save with np.ascontiguousarray");
  if (!std::regex_search(header, mt, std::regex(R"('shape'\s*:\s*\(([^)]*)\))"))) bad(path, "header has no 'shape'");
  NpyArray arr;
  arr.stored = stored;
  const std::string dims = mt[1];
  int64_t count = 1;
  size_t pos = 0;
  while (pos <= dims.size()) {
    size_t comma = dims.find(',', pos);
    if (comma == std::string::npos) comma = dims.size();
    const std::string token = std::regex_replace(dims.substr(pos, comma - pos), std::regex(R"(^\s+|\s+$)"), "");
    pos = comma + 1;
    if (token.empty()) continue;  // "(5,)" and "()" have empty pieces
    if (token.size() > 15 || token.find_first_not_of("0123456789") != std::string::npos) {
      bad(path, "malformed shape (" + dims + ")");
    }
    const int64_t n = std::stoll(token);
    if (n > 0 && count > (int64_t{1} << 40) / n) bad(path, "array too large");
    arr.shape.push_back(n);
    count *= n;
  }
  if (!little_endian_host()) bad(path, "big-endian hosts are not supported");
  arr.data.resize(static_cast<size_t>(count));
  bool ok;
  if (stored == DType::F16) {
    std::vector<uint16_t> bits(static_cast<size_t>(count));
    ok = static_cast<bool>(in.read(reinterpret_cast<char*>(bits.data()), static_cast<std::streamsize>(count * 2)));
    for (size_t i = 0; i < bits.size(); ++i) arr.data[i] = half_bits_to_float(bits[i]);
  } else {
    ok = static_cast<bool>(in.read(reinterpret_cast<char*>(arr.data.data()),
                                   static_cast<std::streamsize>(count * sizeof(float))));
  }
  if (!ok) bad(path, "file ends before its " + std::to_string(count) + " values");
  return arr;
}

void save_npy(const std::string& path, const std::vector<int64_t>& shape, const float* data, DType as) {
  std::string dims;
  int64_t count = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    dims += std::to_string(shape[i]) + (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
    count *= shape[i];
  }
  const bool half = as == DType::F16;
  std::string dict = std::string("{'descr': '") + (half ? "<f2" : "<f4") + "', 'fortran_order': False, 'shape': (" +
                     dims + "), }";
  // Pad with spaces so magic + version + length + header is a multiple of 64, ending in '\n'.
  const size_t prefix = 6 + 2 + 2;
  size_t total = prefix + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out) bad(path, "cannot create file");
  const uint16_t len = static_cast<uint16_t>(dict.size());
  const char lenb[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(kMagic, 6);
  out.put(1);
  out.put(0);
  out.write(lenb, 2);
  out.write(dict.data(), static_cast<std::streamsize>(dict.size()));
  if (half) {
    std::vector<uint16_t> bits(static_cast<size_t>(count));
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = float_to_half_bits(data[i]);
    out.write(reinterpret_cast<const char*>(bits.data()), static_cast<std::streamsize>(count * 2));
  } else {
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(count * sizeof(float)));
  }
  if (!out) bad(path, "write failed");
}

}  // namespace fa
