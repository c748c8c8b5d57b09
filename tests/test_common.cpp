// Shared utilities: problem validation, comparison and tolerances, .npy files, the CLI, the
// JSON writer and the demos' report.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/compare.h"
#include "common/errors.h"
#include "common/json.h"
#include "common/npy.h"
#include "common/problem.h"
#include "common/random.h"
#include "common/report.h"
#include "tests/catch.h"

using fa::test::HasSubstring;

TEST_CASE("make_problem accepts valid shapes and fills in the scale", "[problem]") {
  const fa::AttentionProblem p = fa::make_problem(2, 3, 5, 7, 64);
  REQUIRE(p.scale == 0.125f);
  REQUIRE(p.q_elems() == 2 * 3 * 5 * 64);
  REQUIRE(p.kv_elems() == 2 * 3 * 7 * 64);
  REQUIRE(p.flops() == 4.0 * 2 * 3 * 5 * 7 * 64);
  REQUIRE(fa::make_problem(1, 1, 1, 1, 16, 0.5).scale == 0.5f);
}

TEST_CASE("make_problem rejects bad sizes with a clear message", "[problem]") {
  REQUIRE_THROWS_WITH(fa::make_problem(1, 1, 1, 1, 48), HasSubstring("head dim 48 is not supported"));
  REQUIRE_THROWS_WITH(fa::make_problem(0, 1, 1, 1, 64), HasSubstring("batch must be at least 1"));
  REQUIRE_THROWS_WITH(fa::make_problem(1, -2, 1, 1, 64), HasSubstring("heads must be at least 1"));
  REQUIRE_THROWS_WITH(fa::make_problem(1, 1, 0, 1, 64), HasSubstring("seq-q"));
  REQUIRE_THROWS_WITH(fa::make_problem(1, 1, 1, 0, 64), HasSubstring("seq-kv"));
  REQUIRE_THROWS_WITH(fa::make_problem(1 << 20, 1 << 20, 1 << 20, 1 << 20, 64), HasSubstring("too large"));
  REQUIRE_THROWS_AS(fa::make_problem(1, 1, 1, 1, 64, -1.0), fa::InputError);
}

TEST_CASE("random inputs are reproducible and bounded", "[random]") {
  const auto a = fa::random_uniform(1000, 5, 2.0f), b = fa::random_uniform(1000, 5, 2.0f);
  const auto c = fa::random_uniform(1000, 6, 2.0f);
  REQUIRE(a == b);
  REQUIRE(a != c);
  for (float x : a) REQUIRE(std::fabs(x) <= 2.0f);
  const fa::AttentionInputs in = fa::random_inputs(fa::make_problem(1, 1, 4, 4, 16), 1);
  REQUIRE(in.q != in.k);  // independent streams
}

TEST_CASE("compare passes within tolerance and reports mismatches", "[compare]") {
  const std::vector<double> want = {1.0, 2.0, -3.0, 4.0};
  std::vector<float> got = {1.0f, 2.0f, -3.0f, 4.0f};
  REQUIRE(fa::compare(got.data(), want.data(), 4, {1e-6, 1e-6}).passed());
  got[2] = -3.01f;
  const fa::Comparison c = fa::compare(got.data(), want.data(), 4, {1e-6, 1e-6});
  REQUIRE_FALSE(c.passed());
  REQUIRE(c.failures == 1);
  REQUIRE(c.first_mismatches.at(0).index == 2);
  REQUIRE(c.max_abs_err > 0.009);
  REQUIRE_THAT(fa::describe(c, [](int64_t i) { return "x" + std::to_string(i); }),
               HasSubstring("x2") && HasSubstring("FAILED"));
}

TEST_CASE("compare fails on NaN and passes equal infinities", "[compare]") {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> want = {1.0, -inf};
  std::vector<float> got = {std::nanf(""), -std::numeric_limits<float>::infinity()};
  const fa::Comparison c = fa::compare(got.data(), want.data(), 2, {1, 1});
  REQUIRE(c.failures == 1);
  REQUIRE(c.first_mismatches.at(0).index == 0);
  REQUIRE(std::isnan(c.max_abs_err));
}

TEST_CASE("the fp32 tolerance grows with the baseline's error, not below its floor", "[compare]") {
  const fa::Tolerance small = fa::fp32_tolerance(10.0, 0.0);
  REQUIRE(small.atol == fa::kFp32AtolFloor * 10.0);
  const fa::Tolerance large = fa::fp32_tolerance(10.0, 1e-3);
  REQUIRE(large.atol == fa::kBaselineErrorFactor * 1e-3);
  // An error of 100x the baseline's fails.
  const std::vector<double> want = {1.0, 1.0};
  const std::vector<float> base = {1.00001f, 1.0f};
  const std::vector<float> bad = {1.001f, 1.0f};
  REQUIRE_FALSE(fa::compare_fp32(bad.data(), want.data(), base.data(), 2).passed());
  REQUIRE(fa::compare_fp32(base.data(), want.data(), base.data(), 2).passed());
}

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("fa_test_" + name)).string();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace

TEST_CASE("npy files round-trip", "[npy]") {
  const std::string path = temp_path("roundtrip.npy");
  const std::vector<float> data = fa::random_uniform(2 * 3 * 4 * 16, 1);
  fa::save_npy(path, {2, 3, 4, 16}, data.data());
  const fa::NpyArray a = fa::load_npy(path);
  REQUIRE(a.shape == std::vector<int64_t>{2, 3, 4, 16});
  REQUIRE(a.data == data);
  // The header is padded so the data starts at a multiple of 64 bytes.
  REQUIRE(std::filesystem::file_size(path) == 128 + data.size() * 4);
  fa::save_npy(path, {5}, data.data());
  REQUIRE(fa::load_npy(path).shape == std::vector<int64_t>{5});
  std::remove(path.c_str());
}

TEST_CASE("malformed npy files get a clear error", "[npy]") {
  const std::string path = temp_path("bad.npy");
  REQUIRE_THROWS_WITH(fa::load_npy(temp_path("missing.npy")), HasSubstring("cannot open"));
  write_bytes(path, "hello world, not numpy");
  REQUIRE_THROWS_WITH(fa::load_npy(path), HasSubstring("bad magic"));

  const auto with_header = [](const std::string& dict) {
    std::string h = dict;
    h.append((64 - (10 + h.size() + 1) % 64) % 64, ' ');
    h += '\n';
    return std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(h.size() & 0xff) +
           static_cast<char>(h.size() >> 8) + h;
  };
  write_bytes(path, with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }") +
                        std::string(16, '\0'));
  REQUIRE_THROWS_WITH(fa::load_npy(path), HasSubstring("'<f8'"));
  write_bytes(path, with_header("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }") +
                        std::string(8, '\0'));
  REQUIRE_THROWS_WITH(fa::load_npy(path), HasSubstring("Fortran"));
  write_bytes(path, with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }"));
  REQUIRE_THROWS_WITH(fa::load_npy(path), HasSubstring("malformed shape"));
  write_bytes(path, with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }") +
                        std::string(8, '\0'));
  REQUIRE_THROWS_WITH(fa::load_npy(path), HasSubstring("ends before"));
  std::remove(path.c_str());
}

TEST_CASE("the command line parses values and rejects bad ones", "[cli]") {
  fa::DemoOptions o = fa::default_demo_options(false);
  REQUIRE(o.batch == 4);
  REQUIRE(o.seq_q == 4096);
  const auto parse = [&](std::vector<const char*> args) {
    args.insert(args.begin(), "demo");
    fa::ArgParser parser("demo", "test");
    fa::add_demo_options(parser, o);
    return parser.parse(static_cast<int>(args.size()), args.data());
  };
  REQUIRE(parse({"--batch", "2", "--seq-q=17", "--causal", "--no-check", "--magnitude", "30"}));
  REQUIRE(o.batch == 2);
  REQUIRE(o.seq_q == 17);
  REQUIRE(o.causal);
  REQUIRE_FALSE(o.check);
  REQUIRE(o.magnitude == 30.0);
  REQUIRE_THROWS_WITH(parse({"--seq-kv", "0"}), HasSubstring("--seq-kv: must be at least 1"));
  REQUIRE_THROWS_WITH(parse({"--batch", "-1"}), HasSubstring("at least 1"));
  REQUIRE_THROWS_WITH(parse({"--dim", "sixty"}), HasSubstring("expected an integer"));
  REQUIRE_THROWS_WITH(parse({"--heads"}), HasSubstring("needs a value"));
  REQUIRE_THROWS_WITH(parse({"--frobnicate"}), HasSubstring("unknown option"));
  REQUIRE_THROWS_WITH(parse({"stray"}), HasSubstring("unexpected argument"));
  REQUIRE_THROWS_WITH(parse({"--causal=1"}), HasSubstring("takes no value"));
  REQUIRE_THROWS_AS(parse({"--magnitude", "nan"}), fa::UsageError);
}

TEST_CASE("a demo takes the shared flags it needs, reworded, and adds its own", "[cli]") {
  fa::DemoOptions o = fa::default_demo_options(true);
  int64_t splits = 0;
  fa::ArgParser parser("demo", "test");
  fa::add_demo_options(parser, o, {"load", "save"});
  parser.reword("heads", "query heads Hq");
  parser.add_int("splits", &splits, "blocks along each cache", 0);
  const std::string help = parser.help();
  REQUIRE_THAT(help, HasSubstring("query heads Hq (default: 2)"));
  REQUIRE_THAT(help, HasSubstring("--splits N"));
  REQUIRE_THAT(help, !HasSubstring("--load"));
  REQUIRE_THAT(help, !HasSubstring("heads per batch entry"));
  std::vector<const char*> args = {"demo", "--heads", "8", "--splits", "3"};
  REQUIRE(parser.parse(static_cast<int>(args.size()), args.data()));
  REQUIRE(o.heads == 8);
  REQUIRE(splits == 3);
  args = {"demo", "--save", "out"};
  REQUIRE_THROWS_WITH(parser.parse(static_cast<int>(args.size()), args.data()), HasSubstring("unknown option '--save'"));
  REQUIRE_THROWS_AS(parser.reword("frobnicate", "x"), std::logic_error);
  REQUIRE_THROWS_AS(parser.remove("frobnicate"), std::logic_error);
}

TEST_CASE("a list of reals parses as strtof reads each value, and rejects the rest", "[cli]") {
  std::vector<float> row = {2, 1};
  fa::ArgParser parser("demo", "test");
  parser.add_real_list("row", &row, "values");
  REQUIRE_THAT(parser.help(), HasSubstring("--row X,X,...           values (default: 2,1)"));
  std::vector<const char*> args = {"demo", "--row=5,-inf,1.5"};
  REQUIRE(parser.parse(static_cast<int>(args.size()), args.data()));
  REQUIRE(row == std::vector<float>{5.0f, -INFINITY, 1.5f});
  args = {"demo", "--row=5,x"};
  REQUIRE_THROWS_WITH(parser.parse(static_cast<int>(args.size()), args.data()), HasSubstring("'x' is not a number"));
  args = {"demo", "--row=5,,3"};
  REQUIRE_THROWS_WITH(parser.parse(static_cast<int>(args.size()), args.data()), HasSubstring("'' is not a number"));
  args = {"demo", "--row="};
  REQUIRE_THROWS_WITH(parser.parse(static_cast<int>(args.size()), args.data()), HasSubstring("needs at least one value"));
}

TEST_CASE("the JSON writer places commas, escapes strings and writes null for what JSON cannot hold",
          "[json]") {
  std::ostringstream out;
  fa::JsonWriter w(out);
  w.begin_object().field("name", "a \"quoted\" \\ name\n").field("n", int64_t{-3}).field("big", uint64_t{1} << 40);
  w.field("x", 0.125).field("nan", std::nan("")).field("inf", std::numeric_limits<double>::infinity());
  w.field("yes", true).field("none", std::optional<double>()).key("list").begin_array();
  w.value(1).begin_object().end_object().begin_array().end_array().value("s").end_array();
  w.end_object();
  CHECK(out.str() == "{\"name\":\"a \\\"quoted\\\" \\\\ name\\n\",\"n\":-3,\"big\":1099511627776,\"x\":0.125,"
                     "\"nan\":null,\"inf\":null,\"yes\":true,\"none\":null,\"list\":[1,{},[],\"s\"]}");
  std::ostringstream ctl;
  fa::JsonWriter c(ctl);
  c.begin_object().field("c", std::string(1, '\x01'));
  CHECK(ctl.str() == "{\"c\":\"\\u0001\"");
}

TEST_CASE("the JSON writer refuses what would not be JSON", "[json]") {
  std::ostringstream out;
  fa::JsonWriter w(out);
  w.begin_object();
  REQUIRE_THROWS_AS(w.value(1), std::logic_error);  // a value without its key
  w.key("k");
  REQUIRE_THROWS_AS(w.key("again"), std::logic_error);
  REQUIRE_THROWS_AS(w.end_object(), std::logic_error);  // the key's value is missing
  w.value(1);
  REQUIRE_THROWS_AS(w.end_array(), std::logic_error);
  w.end_object();
  REQUIRE_THROWS_AS(w.end_object(), std::logic_error);
}

namespace {

// A report of `stage` with one check of `n` elements, `bad` of them out of tolerance.
fa::RunReport report_with_check(const std::string& stage, const std::string& check, int64_t n, int64_t bad) {
  fa::RunReport r;
  r.stage = stage;
  r.title = "a test";
  r.device.name = "CPU backend";
  r.device.backend = "cpu";
  r.shape = "B=1";
  r.median_ms = 2.0;
  r.repeats = 1;
  r.checked = true;
  r.checked_what = "1 of 1 heads";
  r.checked_count = {"heads_checked", 1};
  fa::Comparison c;
  c.count = n;
  c.failures = bad;
  r.checks.push_back({check, c, [check](int64_t k) { return check + "[" + std::to_string(k) + "]"; }});
  return r;
}

}  // namespace

TEST_CASE("a report fails when any named check fails, its own or a compared stage's", "[report]") {
  fa::RunReport r = report_with_check("10_backward", "dQ", 8, 0);
  r.checks.push_back(report_with_check("", "dK", 8, 0).checks.front());
  REQUIRE(std::string(r.verdict()) == "PASSED");
  REQUIRE(r.passed());
  REQUIRE(r.check("dK") != nullptr);
  REQUIRE(r.check("dV") == nullptr);

  SECTION("one of its checks fails") {
    r.checks.push_back(report_with_check("", "dV", 8, 3).checks.front());
    REQUIRE(std::string(r.verdict()) == "FAILED");
    REQUIRE_FALSE(r.passed());
  }
  SECTION("a compared stage fails: this stage's verdict stands, the run fails") {
    r.compared.push_back(report_with_check("05_flash2", "O", 8, 1));
    REQUIRE(std::string(r.verdict()) == "PASSED");
    REQUIRE_FALSE(r.passed());
    REQUIRE_THAT(fa::summary_line(r), HasSubstring("| 05_flash2: FAILED 2.000 ms"));
  }
  SECTION("nothing compared, no element checked: a check of nothing does not pass") {
    r.checks.push_back(report_with_check("", "lse", 0, 0).checks.front());
    REQUIRE_FALSE(r.passed());
  }
  SECTION("not checked at all") {
    r.checked = false;
    r.checks.clear();
    REQUIRE(std::string(r.verdict()) == "UNCHECKED");
    REQUIRE(r.passed());
  }
}

TEST_CASE("a report's JSON names each check and metric; its text leaves out rates it has none of",
          "[report]") {
  fa::RunReport r = report_with_check("09_split_kv_decoding", "O", 4, 0);
  r.fields = {{"batch", int64_t{3}}, {"causal", true}, {"scale", 0.5}, {"plan", std::string("8 splits")}};
  fa::Metric rate;
  rate.key = "tbps";
  rate.unit = "TB/s";
  rate.label = "bandwidth";
  rate.headline = true;  // no value: the CPU backend
  fa::Metric other = rate;
  other.key = "forward_ms";
  other.value = 1.5;
  other.unit = "ms";
  other.label = "forward";
  other.headline = false;
  r.metrics = {rate, other};
  r.notes = {{"plan", "16 rows a block"}};
  std::ostringstream json;
  fa::print_report_json(json, r);
  REQUIRE_THAT(json.str(), HasSubstring("\"batch\":3,\"causal\":true,\"scale\":0.5,\"plan\":\"8 splits\""));
  REQUIRE_THAT(json.str(), HasSubstring("\"tbps\":null,\"forward_ms\":1.5"));
  REQUIRE_THAT(json.str(), HasSubstring("\"notes\":{\"plan\":\"16 rows a block\"}"));
  REQUIRE_THAT(json.str(), HasSubstring("\"heads_checked\":1,\"checks\":{\"O\":{\"max_abs_err\":0,"));
  REQUIRE_THAT(json.str(), HasSubstring("\"failures\":0,\"passed\":true}},\"result\":\"PASSED\"}"));
  std::ostringstream text;
  fa::print_report(text, r);
  REQUIRE_THAT(text.str(), HasSubstring("  forward     1.50 ms\n"));  // its digits: 2
  REQUIRE(text.str().find("bandwidth") == std::string::npos);
  REQUIRE_THAT(text.str(), HasSubstring("  check       1 of 1 heads against the float64 CPU reference\n  O           "));
  REQUIRE_THAT(fa::summary_line(r), HasSubstring("09_split_kv_decoding: PASSED  2.000 ms  [B=1]  [CPU backend]"));
}
