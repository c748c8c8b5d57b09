// fa_cu2cpp: rewrites a CUDA source so a C++ compiler can build it for the CPU backend.
//
//   fa_cu2cpp input.cu output.cpp
//
// Only three spellings change; everything else is left to fa_cpu/kernel.h:
//   kernel<<<grid, block, smem, stream>>>(args)
//       -> ::fa_cpu::launch(kernel, "kernel", __FILE__, __LINE__, grid, block, smem, stream)(args)
//   extern __shared__ T name[];        (inside a function)
//       -> T* const name = ::fa_cpu::dynamic_shared<T>();
//   __shared__ T name[N][M];
//       -> static T name[N][M]; static ::fa_cpu::SharedRegion <unique>(&name, sizeof(name), "name");
//          <unique>.use();   (the launch that passes it owns it: cpu_backend/scheduler.cpp)
// The output starts with #line 1 "input.cu" and keeps every line where it was, so
// compiler errors, AddressSanitizer reports and gdb all point into the .cu file.
// Comments are blanked first (newlines kept), so text in comments is never rewritten.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <string>

namespace {

[[noreturn]] void die(const std::string& file, const std::string& text, size_t pos, const std::string& why) {
  const long line = 1 + std::count(text.begin(), text.begin() + static_cast<long>(pos), '\n');
  std::cerr << file << ":" << line << ": error: " << why << "\n";
  std::exit(1);
}

// Replaces comments with spaces, keeping newlines and string/char literals.
std::string blank_comments(const std::string& s) {
  std::string out = s;
  enum { Code, Line, Block, Str, Chr } st = Code;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i], n = i + 1 < s.size() ? s[i + 1] : '\0';
    switch (st) {
      case Code:
        if (c == '/' && n == '/') st = Line, out[i] = ' ';
        else if (c == '/' && n == '*') st = Block, out[i] = out[i + 1] = ' ', ++i;
        else if (c == '"') st = Str;
        else if (c == '\'') st = Chr;
        break;
      case Line:
        if (c == '\n') st = Code;
        else out[i] = ' ';
        break;
      case Block:
        if (c == '*' && n == '/') st = Code, out[i] = out[i + 1] = ' ', ++i;
        else if (c != '\n') out[i] = ' ';
        break;
      case Str:
      case Chr:
        if (c == '\\') ++i;
        else if ((st == Str && c == '"') || (st == Chr && c == '\'')) st = Code;
        break;
    }
  }
  return out;
}

// Brace depth at `pos` (string literals skipped; comments are already blank).
int depth_at(const std::string& s, size_t pos) {
  int depth = 0;
  bool in_str = false;
  char quote = 0;
  for (size_t i = 0; i < pos; ++i) {
    const char c = s[i];
    if (in_str) {
      if (c == '\\') ++i;
      else if (c == quote) in_str = false;
    } else if (c == '"' || c == '\'') {
      in_str = true, quote = c;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}') {
      --depth;
    }
  }
  return depth;
}

std::string newlines_in(const std::string& s) { return std::string(std::count(s.begin(), s.end(), '\n'), '\n'); }

std::string squash(std::string s) {
  s = std::regex_replace(s, std::regex(R"(\s+)"), " ");
  return std::regex_replace(s, std::regex(R"(")"), "\\\"");
}

std::string rewrite_dynamic_shared(const std::string& file, const std::string& s) {
  static const std::regex re(
      R"(extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?([A-Za-z_][\w:]*(?:\s*<[^;<>]*>)?)\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?(\w+)\s*\[\s*\]\s*;)");
  std::string out;
  size_t last = 0;
  for (auto it = std::sregex_iterator(s.begin(), s.end(), re); it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    const size_t pos = static_cast<size_t>(m.position(0));
    if (depth_at(s, pos) == 0) {
      die(file, s, pos, "declare 'extern __shared__' inside the kernel: the CPU backend needs it at function scope");
    }
    out += s.substr(last, pos - last);
    out += m[1].str() + "* const " + m[2].str() + " = ::fa_cpu::dynamic_shared<" + m[1].str() + ">();" +
           newlines_in(m[0].str());
    last = pos + static_cast<size_t>(m.length(0));
  }
  return out + s.substr(last);
}

std::string rewrite_static_shared(const std::string& s) {
  static const std::regex re(
      R"(__shared__\s+((?:__align__\s*\(\s*\d+\s*\)\s*)?)([A-Za-z_][\w:]*(?:\s*<[^;<>]*>)?)\s+(\w+)\s*((?:\[[^\];]*\]\s*)*);)");
  std::string out;
  size_t last = 0;
  int counter = 0;
  for (auto it = std::sregex_iterator(s.begin(), s.end(), re); it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    const size_t pos = static_cast<size_t>(m.position(0));
    out += s.substr(last, pos - last);
    const std::string name = m[3].str();
    const std::string region = "fa_cpu_shared_" + std::to_string(counter++) + "_" + name;
    out += "static " + m[1].str() + m[2].str() + " " + name + squash(m[4].str()) + "; static ::fa_cpu::SharedRegion " +
           region + "(&" + name + ", sizeof(" + name + "), \"" + name + "\"); " + region + ".use();" +
           newlines_in(m[0].str());
    last = pos + static_cast<size_t>(m.length(0));
  }
  return out + s.substr(last);
}

std::string rewrite_launches(const std::string& file, const std::string& s) {
  std::string out;
  size_t last = 0;
  for (size_t open = s.find("<<<"); open != std::string::npos; open = s.find("<<<", open + 3)) {
    // Walk back over the kernel's name and optional template arguments: name<A, B>
    size_t j = open;
    while (j > 0 && std::isspace(static_cast<unsigned char>(s[j - 1]))) --j;
    if (j > 0 && s[j - 1] == '>') {
      int angle = 0;
      do {
        --j;
        if (s[j] == '>') ++angle;
        if (s[j] == '<') --angle;
      } while (j > 0 && angle > 0);
      while (j > 0 && std::isspace(static_cast<unsigned char>(s[j - 1]))) --j;
    }
    while (j > 0 && (std::isalnum(static_cast<unsigned char>(s[j - 1])) || s[j - 1] == '_' || s[j - 1] == ':')) --j;
    if (j == open || j < last) die(file, s, open, "cannot find the kernel name before <<<");
    const size_t close = s.find(">>>", open + 3);
    if (close == std::string::npos) die(file, s, open, "<<< without >>>");
    size_t paren = close + 3;
    while (paren < s.size() && std::isspace(static_cast<unsigned char>(s[paren]))) ++paren;
    if (paren >= s.size() || s[paren] != '(') die(file, s, open, "expected '(' after >>>");
    const std::string kernel = s.substr(j, open - j);
    const std::string config = s.substr(open + 3, close - open - 3);
    out += s.substr(last, j - last);
    out += "::fa_cpu::launch(" + kernel + ", \"" + squash(kernel) + "\", __FILE__, __LINE__, " + config + ")" +
           s.substr(close + 3, paren - close - 3) + "(";
    last = paren + 1;
  }
  return out + s.substr(last);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: fa_cu2cpp input.cu output.cpp\n";
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) {
    std::cerr << "fa_cu2cpp: " << argv[1] << ": cannot open (" << std::strerror(errno) << ")\n";
    return 1;
  }
  std::stringstream buf;
  buf << in.rdbuf();
  std::string text = blank_comments(buf.str());
  text = rewrite_dynamic_shared(argv[1], text);
  text = rewrite_static_shared(text);
  text = rewrite_launches(argv[1], text);
  // The output's folder may not exist yet (Ninja creates it, Unix Makefiles do not).
  const std::filesystem::path target(argv[2]);
  std::error_code ec;
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path(), ec);
  if (ec) {
    std::cerr << "fa_cu2cpp: " << target.parent_path().string() << ": cannot create folder (" << ec.message() << ")\n";
    return 1;
  }
  std::ofstream out(argv[2], std::ios::binary);
  if (!out) {
    std::cerr << "fa_cu2cpp: " << argv[2] << ": cannot create (" << std::strerror(errno) << ")\n";
    return 1;
  }
  out << "#line 1 \"" << argv[1] << "\"\n" << text;
  out.close();
  if (!out) {
    std::cerr << "fa_cu2cpp: " << argv[2] << ": write failed\n";
    return 1;
  }
  return 0;
}
