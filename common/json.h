/**
 * \file json.h
 * \brief The project's one JSON writer: objects and arrays written as they are built, each
 *        string escaped and each number formatted in one place.
 *
 * \code
 * JsonWriter w(std::cout);
 * w.begin_object().field("stage", "05_flash2").field("median_ms", 19.4).field("causal", false);
 * w.key("rows").begin_array().value(1).value(2).end_array();
 * w.end_object();   // {"stage":"05_flash2","median_ms":19.4,"causal":false,"rows":[1,2]}
 * \endcode
 */
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace fa {

/// How a JsonWriter writes reals.
struct JsonFormat {
  int digits = 6;  ///< significant digits (9 keep a float exactly)
  /// NaN and infinity as the strings "nan", "inf" and "-inf" (for a reader that turns them
  /// back into numbers, as the See it run page does), instead of null.
  bool nonfinite_as_strings = false;
};

/// Writes one JSON value (an object or array, usually) to a stream as it is built. Commas
/// and colons are placed by the writer; a misuse (a value where a key is due, an end that
/// does not match its begin) throws std::logic_error.
class JsonWriter {
 public:
  /// Writes to `out`, which must outlive the writer, reals as `format` says.
  explicit JsonWriter(std::ostream& out, JsonFormat format = {}) : out_(out), format_(format) {}

  JsonWriter& begin_object();  ///< `{`
  JsonWriter& end_object();    ///< `}`
  JsonWriter& begin_array();   ///< `[`
  JsonWriter& end_array();     ///< `]`
  /// The key of the next member of the object being written.
  JsonWriter& key(const std::string& k);

  JsonWriter& value(const std::string& s);  ///< a string, escaped
  JsonWriter& value(const char* s);         ///< a string, escaped
  JsonWriter& value(bool b);                ///< true or false
  JsonWriter& value(int64_t x);             ///< an integer, exactly
  JsonWriter& value(int x) { return value(static_cast<int64_t>(x)); }  ///< an integer, exactly
  JsonWriter& value(uint64_t x);            ///< an integer, exactly
  /// A real with the format's significant digits; null (or a string, as the format says)
  /// for NaN and infinity, which JSON cannot hold.
  JsonWriter& value(double x);
  JsonWriter& value(float x) { return value(static_cast<double>(x)); }  ///< a real, as value(double)
  JsonWriter& null();  ///< null
  /// A real, or null where there is none.
  JsonWriter& value(const std::optional<double>& x) { return x ? value(*x) : null(); }

  /// key(k) then value(v).
  template <typename T>
  JsonWriter& field(const std::string& k, const T& v) {
    key(k);
    return value(v);
  }

 private:
  void before_value();
  std::ostream& out_;
  JsonFormat format_;
  struct Level {
    bool object;      // an object (else an array)
    bool empty;       // nothing written in it yet
    bool key_given;   // (objects) a key waits for its value
  };
  std::vector<Level> stack_;
};

/// `s` with JSON's special characters escaped (no surrounding quotes).
std::string json_escape(const std::string& s);

}  // namespace fa
