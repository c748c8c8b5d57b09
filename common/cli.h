/**
 * \file cli.h
 * \brief The one command line every demo shares, and a small parser stages can extend.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fa {

/// A table-driven parser for `--name value` and `--flag` / `--no-flag` options.
class ArgParser {
 public:
  /// \param program name shown in help; \param summary one paragraph under it.
  ArgParser(std::string program, std::string summary);

  /// An integer option; values below `min` are rejected.
  void add_int(const std::string& name, int64_t* target, const std::string& help, int64_t min = 1);
  /// A comma-separated list of integers (`--seq 512,1024`); each must be at least `min`.
  void add_int_list(const std::string& name, std::vector<int64_t>* target, const std::string& help,
                    int64_t min = 1);
  /// A comma-separated list of floats (`--row=2,1,-inf`), each as strtof reads it.
  void add_real_list(const std::string& name, std::vector<float>* target, const std::string& help);
  /// An unsigned 64-bit option (seeds).
  void add_uint(const std::string& name, uint64_t* target, const std::string& help);
  /// A real option; values outside [min, max] are rejected.
  void add_real(const std::string& name, double* target, const std::string& help,
                double min, double max);
  /// A boolean switch: `--name` sets it, `--no-name` clears it.
  void add_switch(const std::string& name, bool* target, const std::string& help);
  /// A string option (a directory, say).
  void add_string(const std::string& name, std::string* target, const std::string& help,
                  const std::string& metavar = "VALUE");

  /// Replaces the help text of option `name`, for a demo in which a shared flag means a
  /// little more (stage 09's `--heads` are query heads). \throws std::logic_error if none.
  void reword(const std::string& name, const std::string& help);

  /// Unregisters option `name`. \throws std::logic_error if there is none.
  void remove(const std::string& name);

  /**
   * Parses argv. \returns false if --help was given (help already printed to stdout).
   * \throws UsageError naming the bad flag or value.
   */
  bool parse(int argc, const char* const* argv);
  /// True if the option was given explicitly on the command line.
  bool given(const std::string& name) const;
  /// The help text.
  std::string help() const;

 private:
  struct Option {
    std::string name, help, metavar, default_text;
    bool takes_value;
    std::function<void(const std::string&)> set;  // value parser; throws UsageError
    bool given = false;
  };
  Option* find(const std::string& name);
  std::string program_, summary_;
  std::vector<Option> options_;
};

/// Options shared by every demo (the fields mirror the flags).
struct DemoOptions {
  int64_t batch = 1;       ///< --batch
  int64_t heads = 1;       ///< --heads
  int64_t seq_q = 1;       ///< --seq-q
  int64_t seq_kv = 1;      ///< --seq-kv
  int64_t dim = 64;        ///< --dim
  double scale = 0.0;      ///< --scale; 0 means 1/sqrt(d)
  bool causal = false;     ///< --causal
  std::string dtype;       ///< --dtype fp32|fp16|bf16; empty: the stage's own default
  uint64_t seed = 2024;    ///< --seed
  double magnitude = 1.0;  ///< --magnitude: inputs uniform in [−magnitude, magnitude]
  int64_t warmup = 3;      ///< --warmup
  int64_t repeats = 20;    ///< --repeats
  bool check = true;       ///< --check / --no-check
  int64_t check_rows = 1024;  ///< --check-rows: at most this many query rows checked
  bool json = false;       ///< --json
  bool brief = false;      ///< --brief
  bool compare = false;    ///< --compare: also run the earlier stages on the same inputs
  bool dry_run = false;    ///< --dry-run: check and size the run, estimate its time, run nothing
  std::string load_dir;    ///< --load
  std::string save_dir;    ///< --save
  std::string variant;     ///< --variant: a stage's variant (StageDemo::variants); empty: the finished kernel
};

/// Defaults for demos: the seeds' shape on a GPU, a small one on the CPU backend.
DemoOptions default_demo_options(bool cpu_backend);

/// Registers the shared demo flags on a parser, but those named in `leave_out` ("load"):
/// the demo driver (run_demo() in demo.h) calls it with the flags a demo leaves out
/// (Demo::left_out_flags()); the demo then rewords what it must (ArgParser::reword) and adds
/// its own (Demo::add_flags()).
void add_demo_options(ArgParser& parser, DemoOptions& options, const std::vector<std::string>& leave_out = {});

}  // namespace fa
