// fa_exercise_stub: a learner's copy of a stage's kernel file with one exercise's solution
// taken out. The solution is marked in the kernel itself, so the stub cannot drift from it:
//
//     // exercise NAME: what to write, in one line
//     //   stub: code that keeps the file compiling (optional, one line each)
//     ...the solution...
//     // end exercise NAME
//
// The copy has the solution replaced by "// TODO(exercise NAME): what to write" and the
// stub lines; the markers of other exercises stay as they are. A kernel file that ends
// with the variants of its stage's tuning.h loses them, as a planted copy does: the
// exercise is the finished kernel.
//
// Usage: fa_exercise_stub KERNEL NAME OUT        writes the stub to OUT
//        fa_exercise_stub --list KERNEL          prints the names of KERNEL's exercises
// Exit 0 on success; 1 (with a message) for a missing or malformed exercise.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string trim_left(const std::string& s) { return s.substr(std::min(s.find_first_not_of(" \t"), s.size())); }
std::string indent_of(const std::string& s) { return s.substr(0, s.size() - trim_left(s).size()); }
bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The exercise a line begins ("// exercise NAME: TASK"), or empty.
std::string begun(const std::string& line, std::string* task) {
  const std::string t = trim_left(line);
  if (!starts_with(t, "// exercise ")) return "";
  const std::size_t colon = t.find(':');
  if (colon == std::string::npos) throw std::runtime_error("'" + t + "': an exercise marker needs 'NAME: task'");
  if (task) *task = trim_left(t.substr(colon + 1));
  return t.substr(12, colon - 12);
}

bool ended(const std::string& line, const std::string& name) { return trim_left(line) == "// end exercise " + name; }

// Checks that every exercise of `lines` begins once and ends; returns their names in order.
std::vector<std::string> exercises(const std::vector<std::string>& lines, const std::string& path) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string name = begun(lines[i], nullptr);
    if (name.empty()) continue;
    if (!seen.insert(name).second) throw std::runtime_error(path + ": exercise '" + name + "' is marked twice");
    std::size_t j = i + 1;
    while (j < lines.size() && !ended(lines[j], name)) {
      if (!begun(lines[j], nullptr).empty()) {
        throw std::runtime_error(path + ":" + std::to_string(j + 1) + ": an exercise inside exercise '" + name + "'");
      }
      ++j;
    }
    if (j == lines.size()) throw std::runtime_error(path + ": exercise '" + name + "' has no '// end exercise " + name + "'");
    names.push_back(name);
  }
  return names;
}

std::string stub(const std::vector<std::string>& lines, const std::string& name, const std::string& path) {
  exercises(lines, path);  // well formed
  std::ostringstream out;
  bool found = false;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::string task;
    if (begun(lines[i], &task) != name) {
      // The variants of tuning.h, from their marker to the first line that closes a block.
      if (starts_with(lines[i], "// The variants of tuning.h")) {
        while (i < lines.size() && lines[i] != "}") ++i;
        continue;
      }
      out << lines[i] << "\n";
      continue;
    }
    found = true;
    const std::string indent = indent_of(lines[i]);
    out << indent << "// TODO(exercise " << name << "): " << task << "\n";
    std::size_t j = i + 1;
    for (; starts_with(trim_left(lines[j]), "//   stub: "); ++j) {
      out << indent << trim_left(lines[j]).substr(11) << "\n";
    }
    while (!ended(lines[j], name)) ++j;
    i = j;
  }
  if (!found) throw std::runtime_error(path + ": no exercise '" + name + "' (marked '// exercise " + name + ": ...')");
  return out.str();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 3 && std::string(argv[1]) == "--list") {
      for (const std::string& n : exercises(read_lines(argv[2]), argv[2])) std::cout << n << "\n";
      return 0;
    }
    if (argc != 4) {
      std::cerr << "usage: fa_exercise_stub KERNEL NAME OUT | --list KERNEL\n";
      return 1;
    }
    const std::string text = stub(read_lines(argv[1]), argv[2], argv[1]);
    std::ofstream out(argv[3]);
    out << text;
    if (!out) throw std::runtime_error(std::string(argv[3]) + ": cannot write");
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "fa_exercise_stub: " << e.what() << "\n";
    return 1;
  }
}
